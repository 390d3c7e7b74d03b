package builders_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestAvoidedNodesAndPreemptionGrace: avoided nodes become metadata.name NotIn in every required node
// selector term (the user's own terms kept, the spec untouched); onPreemption sets the grace period and
// the contract's variable.
func TestAvoidedNodesAndPreemptionGrace(t *testing.T) {
	gpuA := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "gpu", Operator: corev1.NodeSelectorOpIn, Values: []string{"a100"}},
	}}
	gpuH := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "gpu", Operator: corev1.NodeSelectorOpIn, Values: []string{"h100"}},
	}}
	notIn := []corev1.NodeSelectorRequirement{ // one value each: the API server refuses more in a node field selector
		{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"n1"}},
		{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"n2"}}}
	tj := tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Scheduling = &mlv1.SchedulingSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{gpuA, gpuH}}}}}
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), OnPreemption: true, PreemptionGraceSeconds: ptr.To[int32](90)}
		tj.Status.AvoidedNodes = []mlv1.AvoidedNode{{Name: "n1"}, {Name: "n2"}}
		tj.Status.CheckpointStorage = &mlv1.CheckpointStorage{Type: mlv1.StoragePVC}
	}).Obj()
	spec := builders.Job(tj, builders.Options{}).Spec.Template.Spec
	withNotIn := func(term corev1.NodeSelectorTerm) corev1.NodeSelectorTerm {
		term.MatchFields = notIn
		return term
	}
	want := []corev1.NodeSelectorTerm{withNotIn(gpuA), withNotIn(gpuH)}
	if diff := cmp.Diff(want, spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms); diff != "" {
		t.Errorf("node selector terms (-want +got):\n%s", diff)
	}
	terms := tj.Spec.Scheduling.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms[0].MatchFields) > 0 {
		t.Errorf("the builder changed the TrainingJob's own affinity: %+v", terms)
	}
	env := map[string]string{}
	for _, e := range spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	got := []any{ptr.Deref(spec.TerminationGracePeriodSeconds, 0), env[builders.CheckpointOnSigtermEnv]}
	if !cmp.Equal(got, []any{int64(90), "1"}) {
		t.Errorf("grace period, %s = %v, want [90 1]", builders.CheckpointOnSigtermEnv, got)
	}

	plain := tjtest.NewTJ("ml", "b").With(func(tj *mlv1.TrainingJob) { tj.Status.AvoidedNodes = []mlv1.AvoidedNode{{Name: "n1"}} }).Obj()
	ps := builders.Job(plain, builders.Options{}).Spec.Template.Spec
	wantTerms := []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
		{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"n1"}},
	}}}
	diff := cmp.Diff(wantTerms, ps.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms)
	if diff != "" || ps.TerminationGracePeriodSeconds != nil {
		t.Errorf("without affinity or onPreemption (-want +got):\n%s\ngrace %v", diff, ps.TerminationGracePeriodSeconds)
	}
}
