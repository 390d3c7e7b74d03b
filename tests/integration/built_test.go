package integration

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestBuiltJobsAreAccepted: the Jobs the builders make from status the operator writes later (avoided
// nodes: each a node field selector of its own, which the API server holds to one value) and from
// options a platform sets (a node input cache) pass the real API server's validation (a dry run).
func TestBuiltJobsAreAccepted(t *testing.T) {
	ns := newNamespace(t)
	for _, tc := range []struct {
		name   string
		change func(*mlv1.TrainingJob)
		opts   builders.Options
	}{
		{
			name: "three avoided nodes beside the job's own affinity",
			change: func(tj *mlv1.TrainingJob) {
				tj.Spec.Scheduling = &mlv1.SchedulingSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
						{MatchExpressions: []corev1.NodeSelectorRequirement{
							{Key: "gpu", Operator: corev1.NodeSelectorOpIn, Values: []string{"a100", "h100"}},
						}}}}}}}
				tj.Status.AvoidedNodes = []mlv1.AvoidedNode{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}}
			},
			opts: builders.Options{},
		},
		{name: "a node input cache", change: func(tj *mlv1.TrainingJob) {
			tj.Spec.Dataset = "s3://datasets/squad"
			tj.Spec.Inputs = &mlv1.InputsSpec{Cache: mlv1.InputsCachePerNode}
			tj.UID = "0b5e7d2a-1111-2222-3333-444455556666"
		}, opts: builders.Options{InputsNodeCacheDir: "/var/lib/trainingjob-operator/inputs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ(ns, "built").Workers(4).With(tc.change).With(func(tj *mlv1.TrainingJob) { tj.Spec.Image = "trainer:1" }).Obj()
			tj.Default()
			job := builders.Job(tj, tc.opts)
			if err := env.Client.Create(context.Background(), job, client.DryRunAll); err != nil {
				t.Fatalf("the API server refuses the built Job: %v", err)
			}
		})
	}
}
