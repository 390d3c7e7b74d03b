package tracking_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking"
	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking/mlflow"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

func TestRunTags(t *testing.T) {
	tj := tjtest.NewTJ("vision", "resnet").Workers(4).GPUs(2).With(func(tj *mlv1.TrainingJob) {
		tj.UID, tj.Spec.Dataset = "u-1", ""
	}).Obj()
	want := []mlflow.Tag{
		{Key: "trainingjob.uid", Value: "u-1"},
		{Key: "trainingjob.namespace", Value: "vision"},
		{Key: "trainingjob.name", Value: "resnet"},
		{Key: "trainingjob.framework", Value: "pytorch"},
		{Key: "trainingjob.model", Value: tj.Spec.Model},
		{Key: "trainingjob.image", Value: "default:pytorch"},
		{Key: "trainingjob.num_workers", Value: "4"},
		{Key: "trainingjob.gpus_per_worker", Value: "2"},
		{Key: "trainingjob.kubectl", Value: "kubectl get trainingjob resnet -n vision"},
		{Key: "mlflow.source.type", Value: "JOB"},
		{Key: "mlflow.source.name", Value: "trainingjob/vision/resnet"},
	}
	opts := builders.Options{DefaultImages: map[mlv1.Framework]string{mlv1.FrameworkPyTorch: "default:pytorch"}}
	if diff := cmp.Diff(want, tracking.RunTags(tj, opts)); diff != "" {
		t.Errorf("tags, an empty dataset left out (-want +got):\n%s", diff)
	}
}

func TestParams(t *testing.T) {
	cases := []struct {
		name string
		hp   *mlv1.Hyperparameters
		want []mlflow.Tag
	}{
		{name: "none", hp: nil, want: nil},
		{name: "every field under its spec name, then additionalParams, sorted; a named one wins", hp: &mlv1.Hyperparameters{
			LearningRate: ptr.To(0.001), BatchSize: ptr.To[int32](64), Epochs: ptr.To[int32](10), WarmupSteps: ptr.To[int32](0),
			GradientAccumulationSteps: ptr.To[int32](4), Optimizer: "adamw", MixedPrecision: ptr.To(true),
			AdditionalParams: map[string]string{"dropout": "0.1", "epochs": "99"},
		}, want: []mlflow.Tag{
			{Key: "batchSize", Value: "64"}, {Key: "dropout", Value: "0.1"}, {Key: "epochs", Value: "10"},
			{Key: "gradientAccumulationSteps", Value: "4"}, {Key: "learningRate", Value: "0.001"}, {Key: "mixedPrecision", Value: "true"},
			{Key: "optimizer", Value: "adamw"}, {Key: "warmupSteps", Value: "0"},
		}},
		{name: "a value past MLflow's 6,000 bytes is cut at a character's boundary", hp: &mlv1.Hyperparameters{
			AdditionalParams: map[string]string{"notes": strings.Repeat("a", 5999) + "é"},
		}, want: []mlflow.Tag{{Key: "notes", Value: strings.Repeat("a", 5999)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) { tj.Spec.Hyperparameters = tc.hp }).Obj()
			if diff := cmp.Diff(tc.want, tracking.Params(tj)); diff != "" {
				t.Errorf("params (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEpochMetrics(t *testing.T) {
	read := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	now := read.Add(time.Minute)
	cases := []struct {
		name string
		st   mlv1.TrainingJobStatus
		want []mlflow.Metric
	}{
		{name: "nothing reported", st: mlv1.TrainingJobStatus{CurrentEpoch: 3}, want: nil},
		{name: "every known metric and the numeric custom ones at step = the epoch they were read at " +
			"(a finished run's epoch is settled past it), stamped when read", st: mlv1.TrainingJobStatus{
			CurrentEpoch: 4, LastProgressTime: &metav1.Time{Time: read},
			Metrics: &mlv1.TrainingMetrics{Loss: ptr.To(0.5), Accuracy: ptr.To(0.9), LearningRate: ptr.To(0.01), Throughput: ptr.To(1200.0),
				GPUUtilization: ptr.To(87.5), Custom: map[string]string{"f1": "0.8", "phase": "warmup", "loss": "7"}, Epoch: 3},
		}, want: []mlflow.Metric{
			{Key: "accuracy", Value: 0.9, Timestamp: read.UnixMilli(), Step: 3},
			{Key: "f1", Value: 0.8, Timestamp: read.UnixMilli(), Step: 3},
			{Key: "gpu_utilization", Value: 87.5, Timestamp: read.UnixMilli(), Step: 3},
			{Key: "learning_rate", Value: 0.01, Timestamp: read.UnixMilli(), Step: 3},
			{Key: "loss", Value: 0.5, Timestamp: read.UnixMilli(), Step: 3},
			{Key: "samples_per_second", Value: 1200, Timestamp: read.UnixMilli(), Step: 3},
		}},
		{name: "no read time: now", st: mlv1.TrainingJobStatus{Metrics: &mlv1.TrainingMetrics{Loss: ptr.To(1.0)}},
			want: []mlflow.Metric{{Key: "loss", Value: 1, Timestamp: now.UnixMilli()}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tracking.EpochMetrics(&tc.st, now)); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunEndAndLinks(t *testing.T) {
	type endAndLink struct {
		Completed, Failed, Suspended, Running string // the run's final status for each state
		URL                                   string
	}
	got := endAndLink{
		Completed: tracking.FinalStatus(mlv1.StateCompleted),
		Failed:    tracking.FinalStatus(mlv1.StateFailed),
		Suspended: tracking.FinalStatus(mlv1.StateSuspended),
		Running:   tracking.FinalStatus(mlv1.StateRunning),
		URL:       tracking.RunURL("http://mlflow:5000/", "3", "abc"),
	}
	want := endAndLink{Completed: "FINISHED", Failed: "FAILED", Suspended: "", Running: "", URL: "http://mlflow:5000/#/experiments/3/runs/abc"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("final statuses and link (-want +got):\n%s", diff)
	}
	st := &mlv1.TrainingJobStatus{Checkpoint: &mlv1.CheckpointStatus{Latest: "s3://b/run/checkpoint-epoch-4", LatestEpoch: 4}}
	wantTags := []mlflow.Tag{
		{Key: tracking.CheckpointTag, Value: "s3://b/run/checkpoint-epoch-4"}, {Key: tracking.CheckpointEpochTag, Value: "4"},
	}
	if diff := cmp.Diff(wantTags, tracking.CheckpointTags(st)); diff != "" {
		t.Errorf("checkpoint tags (-want +got):\n%s", diff)
	}
	if got := tracking.LoggedEpoch([]mlflow.Tag{{Key: "x", Value: "1"}, {Key: tracking.LoggedEpochTag, Value: "7"}}); got != 7 {
		t.Errorf("LoggedEpoch = %d, want 7", got)
	}
}
