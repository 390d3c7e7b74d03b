package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// fakeRank0 plays rank 0's progress endpoint on a loopback address: the tests set the rank-0 pod's IP to
// it and the job's metricsPort to its port.
type fakeRank0 struct {
	srv    *httptest.Server
	ip     string
	port   int32
	mu     sync.Mutex
	values map[string]float64
}

func newFakeRank0(t *testing.T) *fakeRank0 {
	t.Helper()
	f := &fakeRank0{values: map[string]float64{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		names := make([]string, 0, len(f.values))
		for n := range f.values {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(w, "# TYPE %s gauge\n%s %g\n", n, n, f.values[n])
		}
	}))
	t.Cleanup(f.srv.Close)
	host, port, _ := net.SplitHostPort(f.srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	f.ip, f.port = host, int32(p)
	return f
}

func (f *fakeRank0) set(kv map[string]float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, v := range kv {
		f.values[k] = v
	}
}

// startMonitoredJob creates a 2-worker, 1-GPU-each TrainingJob whose rank 0 is f, and makes it Running.
func startMonitoredJob(t *testing.T, ns, name string, f *fakeRank0, mutate func(*mlv1.TrainingJob)) *mlv1.TrainingJob {
	t.Helper()
	tj := tjtest.NewTJ(ns, name).Workers(2).GPUs(1).Epochs(10).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Monitoring = &mlv1.MonitoringSpec{MetricsPort: f.port}
		if mutate != nil {
			mutate(tj)
		}
	}).Obj()
	if err := env.Client.Create(context.Background(), tj); err != nil {
		t.Fatal(err)
	}
	pods := workerPods(t, tj, 2)
	for i := range pods {
		setPodStatus(t, &pods[i], corev1.PodRunning, running(), 0)
		if pods[i].Labels[names.RankLabel] == "0" {
			setPodIP(t, &pods[i], f.ip)
		}
	}
	return waitForState(t, client.ObjectKeyFromObject(tj), mlv1.StateRunning)
}

func setPodIP(t *testing.T, pod *corev1.Pod, ip string) {
	t.Helper()
	eventually(t, "pod IP write", func(ctx context.Context) error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		return env.Client.Status().Update(ctx, pod)
	})
}

// series returns the operator's series of a name whose labels include want, by their other labels.
func series(t *testing.T, name string, want map[string]string) map[string]float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			var rest []string
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metric
				}
				delete(labels, k)
			}
			for k, v := range labels {
				rest = append(rest, k+"="+v)
			}
			sort.Strings(rest)
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out[strings.Join(rest, ",")] = v
		}
	}
	return out
}

func jobSeries(t *testing.T, name string, tj *mlv1.TrainingJob) (float64, bool) {
	t.Helper()
	v, ok := series(t, name, map[string]string{"namespace": tj.Namespace, "training_job": tj.Name})[""]
	return v, ok
}

func getTJ(ctx context.Context, tj *mlv1.TrainingJob) (*mlv1.TrainingJob, error) {
	got := &mlv1.TrainingJob{}
	return got, env.Client.Get(ctx, client.ObjectKeyFromObject(tj), got)
}

// TestProgressInStatusAndMetrics: rank 0's figures reach the status, the printer columns and the
// operator's gauges; new figures replace them; when rank 0 stops answering the status keeps the last
// values and says progress is stale; deleting the job removes its series.
func TestProgressInStatusAndMetrics(t *testing.T) {
	ns := startStack(t)
	rank0 := newFakeRank0(t)
	rank0.set(map[string]float64{
		"training_epoch": 3, "training_epochs_total": 10, "training_loss": 0.5, "training_accuracy": 0.8,
		"training_learning_rate": 0.01, "training_samples_per_second": 1200, "DCGM_FI_DEV_GPU_UTIL": 75,
		"training_perplexity": 12.5, "go_goroutines": 7,
	})
	tj := startMonitoredJob(t, ns, "progress", rank0, nil)

	eventually(t, "progress 30% in status", func(ctx context.Context) error {
		got, err := getTJ(ctx, tj)
		if err != nil {
			return err
		}
		want := mlv1.TrainingMetrics{Loss: ptr.To(0.5), Accuracy: ptr.To(0.8), LearningRate: ptr.To(0.01), Throughput: ptr.To(1200.0),
			GPUUtilization: ptr.To(75.0), Custom: map[string]string{"training_perplexity": "12.5"}, Epoch: 3,
			Display: &mlv1.MetricsDisplay{Loss: "0.5", Accuracy: "80.0%"}}
		if got.Status.Progress != "30%" || got.Status.CurrentEpoch != 3 || got.Status.Metrics == nil || got.Status.LastProgressTime == nil {
			return fmt.Errorf("status progress %q epoch %d metrics %+v", got.Status.Progress, got.Status.CurrentEpoch, got.Status.Metrics)
		}
		if diff := cmp.Diff(want, *got.Status.Metrics); diff != "" {
			return fmt.Errorf("metrics (-want +got):\n%s", diff)
		}
		if c := condition(got, mlv1.ConditionProgressReported); c.Reason != "Scraped" {
			return fmt.Errorf("ProgressReported %+v", c)
		}
		return nil
	})
	row := table(t, ns).Rows[0].Cells // NAME STATE PROGRESS EPOCH AGE WORKERS LOSS ACCURACY ETA RESTARTS
	if diff := cmp.Diff([]any{"progress", "Running", "30%", float64(3)}, row[:4]); diff != "" {
		t.Errorf("kubectl get tj columns (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]any{"0.5", "80.0%"}, row[6:8]); diff != "" { // as a person reads them
		t.Errorf("kubectl get tj -o wide LOSS, ACCURACY (-want +got):\n%s", diff)
	}
	wantGauges := map[string]float64{
		"trainingjob_progress_percent": 30, "trainingjob_current_epoch": 3, "trainingjob_loss": 0.5, "trainingjob_accuracy": 0.8,
		"trainingjob_gpu_utilization_percent": 75, "trainingjob_allocated_workers": 2, "trainingjob_allocated_gpus": 2,
	}
	eventually(t, "per-job gauges", func(ctx context.Context) error {
		for name, want := range wantGauges {
			if got, ok := jobSeries(t, name, tj); !ok || got != want {
				return fmt.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
			}
		}
		if _, ok := jobSeries(t, "trainingjob_duration_seconds", tj); !ok {
			return fmt.Errorf("no trainingjob_duration_seconds")
		}
		if got := series(t, "trainingjob_total", map[string]string{"namespace": ns})["state=Running"]; got != 1 {
			return fmt.Errorf("trainingjob_total{state=Running} = %v", got)
		}
		return nil
	})
	for _, c := range []string{"trainingjob", "trainingjob-status"} {
		got := series(t, "trainingjob_reconciliation_total", map[string]string{"controller": c})
		if got["result=success"]+got["result=requeue"] == 0 {
			t.Errorf("trainingjob_reconciliation_total{controller=%q} = %v", c, got)
		}
	}

	rank0.set(map[string]float64{"training_epoch": 6, "training_loss": 0.3})
	eventually(t, "progress 60% with an ETA", func(ctx context.Context) error {
		got, err := getTJ(ctx, tj)
		if err != nil {
			return err
		}
		if v, _ := jobSeries(t, "trainingjob_progress_percent", tj); got.Status.Progress != "60%" || got.Status.ETA == "" || v != 60 {
			return fmt.Errorf("progress %q eta %q gauge %v", got.Status.Progress, got.Status.ETA, v)
		}
		return nil
	})

	rank0.srv.Close()
	eventually(t, "stale progress condition", func(ctx context.Context) error {
		got, err := getTJ(ctx, tj)
		if err != nil {
			return err
		}
		c := condition(got, mlv1.ConditionProgressReported)
		if c.Status != "False" || c.Reason != "ScrapeFailed" || !strings.Contains(c.Message, "progress is stale (last reported at ") {
			return fmt.Errorf("ProgressReported %+v", c)
		}
		if got.Status.Progress != "60%" || *got.Status.Metrics.Loss != 0.3 || got.Status.State != mlv1.StateRunning {
			return fmt.Errorf("last values not kept: %q %v %s", got.Status.Progress, got.Status.Metrics.Loss, got.Status.State)
		}
		return nil
	})

	if err := env.Client.Delete(context.Background(), tj); err != nil {
		t.Fatal(err)
	}
	eventually(t, "per-job series deleted", func(ctx context.Context) error {
		for name := range wantGauges {
			if v, ok := jobSeries(t, name, tj); ok {
				return fmt.Errorf("%s still exported (%v)", name, v)
			}
		}
		return nil
	})
}

// TestTargetReached: rank 0's accuracy reaches successPolicy.targetAccuracy: the job is Completed with
// reason TargetReached, an event says so, and its workers are stopped (the Job is suspended).
func TestTargetReached(t *testing.T) {
	ns := startStack(t)
	rank0 := newFakeRank0(t)
	rank0.set(map[string]float64{"training_epoch": 2, "training_accuracy": 0.7})
	before := series(t, "trainingjob_completed_total", nil)["result=TargetReached"]
	tj := startMonitoredJob(t, ns, "target", rank0, func(tj *mlv1.TrainingJob) {
		tj.Spec.SuccessPolicy = &mlv1.SuccessPolicy{TargetAccuracy: ptr.To(0.9)}
	})
	eventually(t, "epoch 2 seen", func(ctx context.Context) error {
		got, err := getTJ(ctx, tj)
		if err == nil && got.Status.CurrentEpoch != 2 {
			err = fmt.Errorf("epoch %d", got.Status.CurrentEpoch)
		}
		return err
	})
	rank0.set(map[string]float64{"training_epoch": 4, "training_accuracy": 0.95})
	got := waitForState(t, client.ObjectKeyFromObject(tj), mlv1.StateCompleted)
	assertStoppedBy(t, got, "TargetReached", "accuracy 0.95 reached targetAccuracy 0.9")
	if after := series(t, "trainingjob_completed_total", nil)["result=TargetReached"]; after != before+1 {
		t.Errorf("trainingjob_completed_total{result=TargetReached} went from %v to %v", before, after)
	}
	// A finished job keeps its figures in its status; the series of rank 0's figures and of the hang watch
	// go (nothing is kept per finished job), those read from the status stay.
	eventually(t, "the finished job's progress series dropped", func(ctx context.Context) error {
		for _, name := range []string{"trainingjob_accuracy", "trainingjob_current_epoch", "trainingjob_seconds_since_progress"} {
			if v, ok := jobSeries(t, name, tj); ok {
				return fmt.Errorf("%s still exported (%v)", name, v)
			}
		}
		if v, ok := jobSeries(t, "trainingjob_allocated_workers", tj); !ok || v != 0 {
			return fmt.Errorf("trainingjob_allocated_workers = %v (present %v), want 0", v, ok)
		}
		return nil
	})
}

// TestEarlyStopped: the loss does not improve for earlyStoppingPatience epochs: Completed, EarlyStopped.
func TestEarlyStopped(t *testing.T) {
	ns := startStack(t)
	rank0 := newFakeRank0(t)
	tj := startMonitoredJob(t, ns, "patience", rank0, func(tj *mlv1.TrainingJob) {
		tj.Spec.SuccessPolicy = &mlv1.SuccessPolicy{EarlyStoppingPatience: ptr.To[int32](2)}
	})
	for _, step := range []struct {
		epoch int
		loss  float64
	}{{epoch: 1, loss: 0.5}, {epoch: 2, loss: 0.4}, {epoch: 3, loss: 0.45}} {
		rank0.set(map[string]float64{"training_epoch": float64(step.epoch), "training_loss": step.loss})
		eventually(t, fmt.Sprintf("epoch %d seen", step.epoch), func(ctx context.Context) error {
			got, err := getTJ(ctx, tj)
			if err == nil && (got.Status.CurrentEpoch != int32(step.epoch) || got.Status.State != mlv1.StateRunning) {
				err = fmt.Errorf("epoch %d state %s", got.Status.CurrentEpoch, got.Status.State)
			}
			return err
		})
	}
	rank0.set(map[string]float64{"training_epoch": 4, "training_loss": 0.41})
	got := waitForState(t, client.ObjectKeyFromObject(tj), mlv1.StateCompleted)
	assertStoppedBy(t, got, "EarlyStopped", "loss did not improve for 2 epochs (best 0.4 at epoch 2)")
}

// assertStoppedBy checks the Completed condition, the transition event and that the Job was suspended.
func assertStoppedBy(t *testing.T, tj *mlv1.TrainingJob, reason, message string) {
	t.Helper()
	type completed struct {
		Status, Reason, Message string
	}
	c := condition(tj, mlv1.ConditionCompleted)
	want := completed{Status: "True", Reason: reason, Message: message}
	if diff := cmp.Diff(want, completed{Status: string(c.Status), Reason: c.Reason, Message: c.Message}); diff != "" {
		t.Errorf("Completed condition %+v (-want +got):\n%s", c, diff)
	}
	if tj.Status.CompletionTime == nil {
		t.Errorf("no completionTime")
	}
	eventually(t, "workers stopped", func(ctx context.Context) error {
		job := &batchv1.Job{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: tj.Namespace, Name: names.JobName(tj)}, job); err != nil {
			return err
		}
		if !ptr.Deref(job.Spec.Suspend, false) {
			return fmt.Errorf("job not suspended")
		}
		return nil
	})
	eventually(t, "a Completed event naming "+reason, func(ctx context.Context) error {
		notes, err := eventNotes(ctx, tj)
		if err != nil {
			return err
		}
		for _, n := range notes {
			if strings.Contains(n, "Running -> Completed: "+reason+": "+message) {
				return nil
			}
		}
		return fmt.Errorf("events %v", notes)
	})
}
