package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// TestNodeLost: the process node running rank 1 vanishes mid-run (its processes die, its Node object is
// deleted). The pod garbage collector fails the orphaned pod with DisruptionTarget, and the TrainingJob
// restarts the gang on the remaining node without using its budget (backoffLimit 0), resuming from a
// checkpoint. The node comes back afterwards for the other tests.
func TestNodeLost(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	lc := lifecycle{name: "node-lost", reasons: []string{"Succeeded"}, disruptions: 1, mutate: func(tj *mlv1.TrainingJob) {
		tj.Spec.Hyperparameters.Epochs = ptrTo[int32](40)
		tj.Spec.FailurePolicy = &mlv1.FailurePolicy{RestartPolicy: mlv1.RestartGang, BackoffLimit: ptrTo[int32](0)}
	}}
	tj := createJob(t, ns, lc)
	key := client.ObjectKeyFromObject(tj)
	var nodeName string
	for deadline := time.Now().Add(2 * time.Minute); nodeName == ""; time.Sleep(200 * time.Millisecond) {
		got := &mlv1.TrainingJob{}
		if err := stack.Client.Get(ctx, key, got); err != nil {
			t.Fatal(err)
		}
		var pods corev1.PodList
		if err := stack.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{builders.NameLabel: tj.Name, builders.RankLabel: "1"}); err != nil {
			t.Fatal(err)
		}
		if got.Status.State == mlv1.StateRunning && got.Status.Checkpoint != nil && got.Status.Checkpoint.LatestEpoch >= 2 && len(pods.Items) == 1 {
			nodeName = pods.Items[0].Spec.NodeName
		}
		if time.Now().After(deadline) {
			t.Fatal("the job did not run with a checkpoint")
		}
	}
	lost := time.Now()
	if err := stack.LoseNode(ctx, nodeName); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stack.AddNode(ctx, nodeName, 2); err != nil {
			t.Error(err)
		}
	})
	restarted := time.Duration(0)
	for deadline := time.Now().Add(4 * time.Minute); restarted == 0; time.Sleep(200 * time.Millisecond) {
		got := &mlv1.TrainingJob{}
		if err := stack.Client.Get(ctx, key, got); err != nil {
			t.Fatal(err)
		}
		if got.Status.Attempt == 1 {
			restarted = time.Since(lost)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no gang restart 4 minutes after losing %s: %+v", nodeName, got.Status)
		}
	}
	if !checkJob(t, tj, lc, metricsAddr) {
		return
	}
	got := &mlv1.TrainingJob{}
	if err := stack.Client.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Attempt != 1 || !strings.Contains(got.Status.LastFailure, nodeName) {
		t.Errorf("attempt %d, lastFailure %q: want one gang restart for a disruption", got.Status.Attempt, got.Status.LastFailure)
	}
	t.Logf("node loss report: %s lost mid-run; gang restart recorded %s later (the node is seen gone as soon as a rank fails); the job completed on the remaining node, restartCount %d", nodeName, restarted.Round(time.Second), got.Status.RestartCount)
}

func ptrTo[T any](v T) *T { return &v }
