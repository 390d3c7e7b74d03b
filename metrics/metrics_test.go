package metrics

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime/schema"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// The names the issue fixes; dashboards and alerts are built on them.
func TestNames(t *testing.T) {
	want := []string{
		"trainingjob_accuracy", "trainingjob_allocated_gpus", "trainingjob_allocated_workers",
		"trainingjob_checkpoint_created_total", "trainingjob_checkpoint_deleted_total", "trainingjob_checkpoint_size_bytes", "trainingjob_completed_total",
		"trainingjob_created_total", "trainingjob_current_epoch", "trainingjob_duration_seconds", "trainingjob_failed_total",
		"trainingjob_gpu_utilization_percent", "trainingjob_hang_timeout_seconds", "trainingjob_loss", "trainingjob_progress_percent",
		"trainingjob_reconciliation_duration_seconds_bucket", "trainingjob_reconciliation_duration_seconds_count",
		"trainingjob_reconciliation_duration_seconds_sum", "trainingjob_reconciliation_errors_total", "trainingjob_reconciliation_total",
		"trainingjob_restarts", "trainingjob_seconds_since_progress", "trainingjob_total", "trainingjob_waiting_since_timestamp_seconds",
	}
	if diff := cmp.Diff(want, Names()); diff != "" {
		t.Errorf("exported names (-want +got):\n%s", diff)
	}
}

func TestDeleteJob(t *testing.T) {
	Loss.WithLabelValues("ml", "a").Set(1)
	Loss.WithLabelValues("ml", "b").Set(2)
	AllocatedGPUs.WithLabelValues("ml", "a").Set(8)
	DeleteJob("ml", "a")
	if n := testutil.CollectAndCount(Loss); n != 1 {
		t.Errorf("%d loss series left, want only job b's", n)
	}
	if n := testutil.CollectAndCount(AllocatedGPUs); n != 0 {
		t.Errorf("%d allocated_gpus series left", n)
	}
	DeleteJob("ml", "b")
}

func TestCountByState(t *testing.T) {
	job := func(ns string, s mlv1.State) mlv1.TrainingJob {
		j := mlv1.TrainingJob{}
		j.Namespace, j.Status.State = ns, s
		return j
	}
	got := CountByState([]mlv1.TrainingJob{job("a", mlv1.StateRunning), job("a", mlv1.StateRunning), job("a", ""), job("b", mlv1.StateFailed)})
	if got[[2]string{"a", "Running"}] != 2 || got[[2]string{"a", "Pending"}] != 1 || got[[2]string{"b", "Failed"}] != 1 {
		t.Errorf("counts %v", got)
	}
	if n, ok := got[[2]string{"b", "Running"}]; !ok || n != 0 {
		t.Errorf("an empty state should read 0, not vanish: %v", got)
	}
}

func TestErrorType(t *testing.T) {
	gr := schema.GroupResource{Group: "ml.example.com", Resource: "trainingjobs"}
	cases := map[string]error{
		"conflict":  apierrors.NewConflict(gr, "a", nil),
		"not_found": apierrors.NewNotFound(gr, "a"),
		"invalid":   apierrors.NewBadRequest("x"),
		"forbidden": apierrors.NewForbidden(gr, "a", nil),
		"timeout":   apierrors.NewTimeoutError("x", 1),
		"other":     apierrors.NewInternalError(errors.New("boom")),
	}
	for want, err := range cases {
		if got := ErrorType(err); got != want {
			t.Errorf("ErrorType(%v) = %s, want %s", err, got, want)
		}
	}
}
