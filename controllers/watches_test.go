package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

func TestSpecOrState(t *testing.T) {
	base := &mlv1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Generation: 1},
		Status: mlv1.TrainingJobStatus{State: mlv1.StateRunning, Progress: "10%",
			Checkpoint: &mlv1.CheckpointStatus{Latest: "s3://b/ml/a/checkpoint-epoch-2", Count: 1}}}
	base.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Storage: &mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "b"}}
	change := func(f func(*mlv1.TrainingJob)) *mlv1.TrainingJob { n := base.DeepCopy(); f(n); return n }
	cases := []struct {
		name string
		new  *mlv1.TrainingJob
		want bool
	}{
		{name: "progress only", new: change(func(n *mlv1.TrainingJob) { n.Status.Progress = "20%" }), want: false},
		{name: "workers only", new: change(func(n *mlv1.TrainingJob) { n.Status.Workers.Active = 3 }), want: false},
		{name: "checkpoint count only", new: change(func(n *mlv1.TrainingJob) { n.Status.Checkpoint.Count = 2 }), want: false},
		{name: "a newer checkpoint (the CheckpointController moves RESUME_FROM)",
			new:  change(func(n *mlv1.TrainingJob) { n.Status.Checkpoint.Latest = "s3://b/ml/a/checkpoint-epoch-4" }),
			want: false},
		{name: "state", new: change(func(n *mlv1.TrainingJob) { n.Status.State = mlv1.StateCompleted }), want: true},
		// A gang restart decided before every worker ran keeps the state (Initializing) but not the attempt:
		// the JobController must come back to replace the Job (found by the chaos suite).
		{name: "attempt", new: change(func(n *mlv1.TrainingJob) { n.Status.Attempt = 1 }), want: true},
		{name: "spec", new: change(func(n *mlv1.TrainingJob) { n.Generation = 2 }), want: true},
		{name: "labels", new: change(func(n *mlv1.TrainingJob) { n.Labels = map[string]string{"a": "b"} }), want: true},
		{name: "deleting", new: change(func(n *mlv1.TrainingJob) { now := metav1.Now(); n.DeletionTimestamp = &now }), want: true},
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
		{name: "running, newer checkpoint", old: at(mlv1.StateRunning, "c-1"), new: at(mlv1.StateRunning, "c-2"), want: false},
		{name: "completed, newer checkpoint", old: at(mlv1.StateCompleted, "c-5"), new: at(mlv1.StateCompleted, "c-6"), want: true},
		{name: "failed, newer checkpoint", old: at(mlv1.StateFailed, "c-5"), new: at(mlv1.StateFailed, "c-6"), want: true},
		{name: "completed, same checkpoint", old: at(mlv1.StateCompleted, "c-6"), new: at(mlv1.StateCompleted, "c-6"), want: false},
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

// TestPredicatesSeeTheCachedJob: the watches' predicates read TrainingJobs as the cache holds them,
// defaulted by its transform: a job as a user writes it (no monitoring, networking or failurePolicy section)
// passes through every predicate, tracked by the operator's default server or not, without a panic.
func TestPredicatesSeeTheCachedJob(t *testing.T) {
	cases := []struct {
		name        string
		opts        builders.Options
		wantTracked bool
	}{
		{name: "no default tracking server", wantTracked: false},
		{name: "the operator's default tracking server", opts: builders.Options{MLflowTrackingURI: "http://mlflow:5000"}, wantTracked: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw := &mlv1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Generation: 1},
				Spec: mlv1.TrainingJobSpec{NumWorkers: 2, Image: "me/train:1", Command: []string{"python3", "train.py"}}}
			obj, err := defaultTrainingJob(raw)
			if err != nil {
				t.Fatal(err)
			}
			tj := obj.(*mlv1.TrainingJob)
			newer := tj.DeepCopy()
			newer.Generation = 2
			tracking := trackingEvents(tc.opts)
			for _, p := range []predicate.Predicate{specOrState, jobControllerEvents, statusControllerEvents, tracking} {
				p.Create(event.CreateEvent{Object: tj})
				p.Update(event.UpdateEvent{ObjectOld: tj, ObjectNew: newer})
				p.Delete(event.DeleteEvent{Object: tj})
			}
			if got := tracking.Create(event.CreateEvent{Object: tj}); got != tc.wantTracked {
				t.Errorf("tracked %v, want %v", got, tc.wantTracked)
			}
		})
	}
}
