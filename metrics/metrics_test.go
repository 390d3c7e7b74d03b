package metrics

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

// The names the issue fixes; dashboards and alerts are built on them.
func TestNames(t *testing.T) {
	want := []string{
		"trainingjob_accuracy", "trainingjob_allocated_gpus", "trainingjob_allocated_workers", "trainingjob_badput_seconds_total",
		"trainingjob_checkpoint_created_total", "trainingjob_checkpoint_deleted_total", "trainingjob_checkpoint_size_bytes",
		"trainingjob_completed_total",
		"trainingjob_created_total", "trainingjob_current_epoch", "trainingjob_duration_seconds", "trainingjob_failed_total",
		"trainingjob_goodput_ratio", "trainingjob_goodput_reclassified_seconds_total", "trainingjob_goodput_seconds_total",
		"trainingjob_gpu_seconds_total",
		"trainingjob_gpu_utilization_percent", "trainingjob_hang_timeout_seconds", "trainingjob_loss", "trainingjob_progress_percent",
		"trainingjob_reconciliation_duration_seconds_bucket", "trainingjob_reconciliation_duration_seconds_count",
		"trainingjob_reconciliation_duration_seconds_sum", "trainingjob_reconciliation_errors_total", "trainingjob_reconciliation_total",
		"trainingjob_restarts", "trainingjob_seconds_since_progress", "trainingjob_status_writes_total", "trainingjob_status_writes_waiting",
		"trainingjob_total", "trainingjob_waiting_since_timestamp_seconds",
	}
	if diff := cmp.Diff(want, Names()); diff != "" {
		t.Errorf("exported names (-want +got):\n%s", diff)
	}
}

func TestDeleteJob(t *testing.T) {
	Loss.WithLabelValues("ml", "a").Set(1)
	Loss.WithLabelValues("ml", "b").Set(2)
	HangTimeout.WithLabelValues("ml", "a").Set(8)
	DeleteJob("ml", "a")
	if n := testutil.CollectAndCount(Loss); n != 1 {
		t.Errorf("%d loss series left, want only job b's", n)
	}
	if n := testutil.CollectAndCount(HangTimeout); n != 0 {
		t.Errorf("%d hang_timeout series left", n)
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

// TestGoodputSeries: the goodput series are the status's figures, for the jobs that have them: the goodput
// counter every second counted productive (productive plus reclassified), the reclassified counter and lost
// work without the last restart's estimate while it may still be corrected.
func TestGoodputSeries(t *testing.T) {
	s := runtime.NewScheme()
	_ = mlv1.AddToScheme(s)
	accounted := &mlv1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "a"}, Status: mlv1.TrainingJobStatus{
		State: mlv1.StateRunning, Goodput: &mlv1.GoodputStatus{ProductiveSeconds: 300, SinceCheckpointSeconds: 40, GPUSeconds: 3200,
			ReclassifiedSeconds: 45, Category: mlv1.GoodputProductive,
			LostWorkEstimate: &mlv1.LostWorkEstimate{Attempt: 1, Seconds: 4, MaxSeconds: 20},
			BadputSeconds:    mlv1.BadputSeconds{Queued: 60, Restart: 30, LostWork: 10}}}}
	fresh := &mlv1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "b"}}
	accounted.Default() // the cache holds jobs defaulted
	fresh.Default()
	SetStateReader(fake.NewClientBuilder().WithScheme(s).WithObjects(accounted, fresh).Build())
	defer SetStateReader(nil)
	want := `
# HELP trainingjob_badput_seconds_total Seconds of the job's wall time that did not train the model, by category: ` +
		`queued, scheduling, startup, restart, lost_work (once known), hang, checkpoint.
# TYPE trainingjob_badput_seconds_total counter
trainingjob_badput_seconds_total{category="checkpoint",namespace="ml",training_job="a"} 0
trainingjob_badput_seconds_total{category="hang",namespace="ml",training_job="a"} 0
trainingjob_badput_seconds_total{category="lost_work",namespace="ml",training_job="a"} 6
trainingjob_badput_seconds_total{category="queued",namespace="ml",training_job="a"} 60
trainingjob_badput_seconds_total{category="restart",namespace="ml",training_job="a"} 30
trainingjob_badput_seconds_total{category="scheduling",namespace="ml",training_job="a"} 0
trainingjob_badput_seconds_total{category="startup",namespace="ml",training_job="a"} 0
# HELP trainingjob_goodput_ratio Productive time over all accounted time of the job, 0 to 1 (status.goodput.percent).
# TYPE trainingjob_goodput_ratio gauge
trainingjob_goodput_ratio{namespace="ml",training_job="a"} 0.75
# HELP trainingjob_goodput_reclassified_seconds_total ` + reclassifiedHelp + `
# TYPE trainingjob_goodput_reclassified_seconds_total counter
trainingjob_goodput_reclassified_seconds_total{namespace="ml",training_job="a"} 41
# HELP trainingjob_goodput_seconds_total ` + goodputHelp + `
# TYPE trainingjob_goodput_seconds_total counter
trainingjob_goodput_seconds_total{namespace="ml",training_job="a"} 345
# HELP trainingjob_gpu_seconds_total GPU-seconds held by the job's running workers.
# TYPE trainingjob_gpu_seconds_total counter
trainingjob_gpu_seconds_total{namespace="ml",training_job="a"} 3200
`
	if err := testutil.CollectAndCompare(states, strings.NewReader(want), "trainingjob_badput_seconds_total", "trainingjob_goodput_ratio",
		"trainingjob_goodput_reclassified_seconds_total", "trainingjob_goodput_seconds_total", "trainingjob_gpu_seconds_total"); err != nil {
		t.Error(err)
	}
	// Once the run is over, what is left of the estimate is known.
	over := accounted.Status.Goodput.DeepCopy()
	over.Category = ""
	if c := derive.Counters(over); c.Badput.LostWork != 10 || c.Reclassified != 45 || c.Goodput != 345 {
		t.Errorf("counters of a finished run %+v, want lost work 10, reclassified 45, goodput 345", c)
	}
}

// TestStatusSeries: the series of a job's status are read from the cache at every scrape, for every job.
func TestStatusSeries(t *testing.T) {
	s := runtime.NewScheme()
	_ = mlv1.AddToScheme(s)
	created := metav1.NewTime(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	job := func(name string, gpus int32, st mlv1.TrainingJobStatus) *mlv1.TrainingJob {
		tj := &mlv1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, CreationTimestamp: created},
			Spec: mlv1.TrainingJobSpec{GPUsPerWorker: ptr.To(gpus)}, Status: st}
		tj.Default()
		return tj
	}
	start, end := metav1.NewTime(created.Add(time.Minute)), metav1.NewTime(created.Add(91*time.Second))
	SetStateReader(fake.NewClientBuilder().WithScheme(s).WithObjects(
		job("done", 4, mlv1.TrainingJobStatus{State: mlv1.StateCompleted, Workers: mlv1.WorkerCounts{Active: 2}, RestartCount: 1,
			StartTime: &start, CompletionTime: &end}),
		job("queued", 1, mlv1.TrainingJobStatus{State: mlv1.StatePending}),
		job("running", 4, mlv1.TrainingJobStatus{State: mlv1.StateRunning, Workers: mlv1.WorkerCounts{Active: 2}}),
	).Build())
	defer SetStateReader(nil)
	want := `
# HELP trainingjob_allocated_gpus GPUs held by the job's running workers.
# TYPE trainingjob_allocated_gpus gauge
trainingjob_allocated_gpus{namespace="ml",training_job="done"} 0
trainingjob_allocated_gpus{namespace="ml",training_job="queued"} 0
trainingjob_allocated_gpus{namespace="ml",training_job="running"} 8
# HELP trainingjob_duration_seconds Seconds since the job's workers started (until it finished).
# TYPE trainingjob_duration_seconds gauge
trainingjob_duration_seconds{namespace="ml",training_job="done"} 31
# HELP trainingjob_restarts Restarts counted against the job's failurePolicy.backoffLimit (status.restartCount).
# TYPE trainingjob_restarts gauge
trainingjob_restarts{namespace="ml",training_job="done"} 1
trainingjob_restarts{namespace="ml",training_job="queued"} 0
trainingjob_restarts{namespace="ml",training_job="running"} 0
# HELP trainingjob_waiting_since_timestamp_seconds When the job's workers started waiting (Pending or Initializing: ` +
		`not scheduled, pulling images, restarting), as a Unix time; 0 while they run or the job is over.
# TYPE trainingjob_waiting_since_timestamp_seconds gauge
trainingjob_waiting_since_timestamp_seconds{namespace="ml",training_job="done"} 0
trainingjob_waiting_since_timestamp_seconds{namespace="ml",training_job="queued"} 1.7957736e+09
trainingjob_waiting_since_timestamp_seconds{namespace="ml",training_job="running"} 0
`
	if err := testutil.CollectAndCompare(states, strings.NewReader(want), "trainingjob_allocated_gpus", "trainingjob_duration_seconds",
		"trainingjob_restarts", "trainingjob_waiting_since_timestamp_seconds"); err != nil {
		t.Error(err)
	}
}

// TestGoodputCountersFloor: a scrape never exports a goodput counter below the last one: a scrape during
// the JobController's reconcile counted the old category a few milliseconds past the accounting it writes.
func TestGoodputCountersFloor(t *testing.T) {
	s := runtime.NewScheme()
	_ = mlv1.AddToScheme(s)
	job := func(scheduling float64) *mlv1.TrainingJob {
		tj := &mlv1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "a", UID: "u1"}, Status: mlv1.TrainingJobStatus{
			State:   mlv1.StateCompleted,
			Goodput: &mlv1.GoodputStatus{ProductiveSeconds: 100, BadputSeconds: mlv1.BadputSeconds{Scheduling: scheduling}}}}
		tj.Default()
		return tj
	}
	SetStateReader(fake.NewClientBuilder().WithScheme(s).WithObjects(job(2.05)).Build())
	defer SetStateReader(nil)
	want := func(v string) string {
		return `
# HELP trainingjob_badput_seconds_total Seconds of the job's wall time that did not train the model, by category: ` +
			`queued, scheduling, startup, restart, lost_work (once known), hang, checkpoint.
# TYPE trainingjob_badput_seconds_total counter
trainingjob_badput_seconds_total{category="checkpoint",namespace="ml",training_job="a"} 0
trainingjob_badput_seconds_total{category="hang",namespace="ml",training_job="a"} 0
trainingjob_badput_seconds_total{category="lost_work",namespace="ml",training_job="a"} 0
trainingjob_badput_seconds_total{category="queued",namespace="ml",training_job="a"} 0
trainingjob_badput_seconds_total{category="restart",namespace="ml",training_job="a"} 0
trainingjob_badput_seconds_total{category="scheduling",namespace="ml",training_job="a"} ` + v + `
trainingjob_badput_seconds_total{category="startup",namespace="ml",training_job="a"} 0
`
	}
	if err := testutil.CollectAndCompare(states, strings.NewReader(want("2.05")), "trainingjob_badput_seconds_total"); err != nil {
		t.Error(err)
	}
	SetStateReader(fake.NewClientBuilder().WithScheme(s).WithObjects(job(2)).Build()) // accounted to before the last scrape
	if err := testutil.CollectAndCompare(states, strings.NewReader(want("2.05")), "trainingjob_badput_seconds_total"); err != nil {
		t.Errorf("a counter went back: %v", err)
	}
	SetStateReader(fake.NewClientBuilder().WithScheme(s).WithObjects(job(3)).Build())
	if err := testutil.CollectAndCompare(states, strings.NewReader(want("3")), "trainingjob_badput_seconds_total"); err != nil {
		t.Error(err)
	}
}
