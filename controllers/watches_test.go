package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

func TestSpecOrState(t *testing.T) {
	base := &mlv1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: mlv1.TrainingJobStatus{State: mlv1.StateRunning, Progress: "10%",
		Checkpoint: &mlv1.CheckpointStatus{Latest: "s3://b/ml/a/checkpoint-epoch-2", Count: 1}}}
	base.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Storage: &mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "b"}}
	change := func(f func(*mlv1.TrainingJob)) *mlv1.TrainingJob { n := base.DeepCopy(); f(n); return n }
	cases := []struct {
		name string
		new  *mlv1.TrainingJob
		want bool
	}{
		{"progress only", change(func(n *mlv1.TrainingJob) { n.Status.Progress = "20%" }), false},
		{"workers only", change(func(n *mlv1.TrainingJob) { n.Status.Workers.Active = 3 }), false},
		{"checkpoint count only", change(func(n *mlv1.TrainingJob) { n.Status.Checkpoint.Count = 2 }), false},
		{"a newer checkpoint (the CheckpointController moves RESUME_FROM)", change(func(n *mlv1.TrainingJob) { n.Status.Checkpoint.Latest = "s3://b/ml/a/checkpoint-epoch-4" }), false},
		{"state", change(func(n *mlv1.TrainingJob) { n.Status.State = mlv1.StateCompleted }), true},
		// A gang restart decided before every worker ran keeps the state (Initializing) but not the attempt:
		// the JobController must come back to replace the Job (found by the chaos suite).
		{"attempt", change(func(n *mlv1.TrainingJob) { n.Status.Attempt = 1 }), true},
		{"spec", change(func(n *mlv1.TrainingJob) { n.Generation = 2 }), true},
		{"labels", change(func(n *mlv1.TrainingJob) { n.Labels = map[string]string{"a": "b"} }), true},
		{"deleting", change(func(n *mlv1.TrainingJob) { now := metav1.Now(); n.DeletionTimestamp = &now }), true},
	}
	for _, tc := range cases {
		if got := specOrState.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestStatusControllerEvents: a finished run's newer checkpoint (a stopped agent's final report, read after
// the end) brings the StatusController back to settle the epoch; a running one's does not.
func TestStatusControllerEvents(t *testing.T) {
	at := func(state mlv1.State, latest string) *mlv1.TrainingJob {
		return &mlv1.TrainingJob{Status: mlv1.TrainingJobStatus{State: state, Checkpoint: &mlv1.CheckpointStatus{Latest: latest}}}
	}
	cases := []struct {
		name     string
		old, new *mlv1.TrainingJob
		want     bool
	}{
		{"running, newer checkpoint", at(mlv1.StateRunning, "c-1"), at(mlv1.StateRunning, "c-2"), false},
		{"completed, newer checkpoint", at(mlv1.StateCompleted, "c-5"), at(mlv1.StateCompleted, "c-6"), true},
		{"failed, newer checkpoint", at(mlv1.StateFailed, "c-5"), at(mlv1.StateFailed, "c-6"), true},
		{"completed, same checkpoint", at(mlv1.StateCompleted, "c-6"), at(mlv1.StateCompleted, "c-6"), false},
	}
	for _, tc := range cases {
		if got := statusControllerEvents.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: passed = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSettledEpochIsNoNewEpoch: a finished run's epoch settled past the one its metrics were read at logs
// nothing more to MLflow (the metrics are the last epoch's read, already logged).
func TestSettledEpochIsNoNewEpoch(t *testing.T) {
	tj := &mlv1.TrainingJob{Status: mlv1.TrainingJobStatus{State: mlv1.StateCompleted, CurrentEpoch: 6,
		Metrics: &mlv1.TrainingMetrics{Loss: ptr.To(0.1), Epoch: 5}}}
	if newEpoch(tj, &mlv1.MLflowStatus{LoggedEpoch: 5, RunStatus: "RUNNING"}) {
		t.Error("epoch 5's metrics would be logged again as epoch 6")
	}
	if !newEpoch(tj, &mlv1.MLflowStatus{LoggedEpoch: 4, RunStatus: "RUNNING"}) {
		t.Error("epoch 5's metrics, not logged yet, would not be logged")
	}
}
