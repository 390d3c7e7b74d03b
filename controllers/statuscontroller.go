package controllers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// StatusReconciler reads rank 0's progress endpoint of every Running TrainingJob once per interval and
// puts it into the status and the per-job gauges, and applies spec.successPolicy.
//
// Cost is bounded by the controller's work queue: a job is queued at most once, Workers reconciles run at
// a time (the global limit), each scrape has Timeout, and nothing runs per job between scrapes (the next
// one is a RequeueAfter). Gauges change on every scrape; the status is written only when what rank 0
// reported changed, so at most once per job per interval.
type StatusReconciler struct {
	client.Client
	Recorder events.EventRecorder
	Clock    clock.Clock
	// Interval is the default time between scrapes; monitoring.scrapeIntervalSeconds overrides it.
	Interval time.Duration
	// Timeout bounds one scrape.
	Timeout time.Duration
	// Workers is how many scrapes may run at once.
	Workers int
	HTTP    *http.Client

	mu   sync.Mutex
	jobs map[types.NamespacedName]*scrapeState
}

// scrapeState is what the reconciler remembers of a job between scrapes (lost on restart, harmlessly).
type scrapeState struct {
	uid    types.UID
	last   time.Time
	window *rateWindow
	agent  checkpoint.AgentStatus
}

// maxBody bounds how much of rank 0's answer is read.
const maxBody = 4 << 20

// Reconcile scrapes one job when its interval has passed.
func (r *StatusReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	tj := &mlv1.TrainingJob{}
	if err := r.Get(ctx, req.NamespacedName, tj); apierrors.IsNotFound(err) {
		r.forget(req.NamespacedName)
		return reconcile.Result{}, nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	now := r.Clock.Now()
	setAllocation(tj, now)
	if tj.Status.State != mlv1.StateRunning || (!builders.MonitoringEnabled(tj) && !builders.CheckpointEnabled(tj)) {
		return reconcile.Result{}, nil
	}
	state, wait := r.due(tj, now)
	if wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	st := tj.Status.DeepCopy()
	ip, err := r.rank0IP(ctx, tj)
	if builders.MonitoringEnabled(tj) {
		r.observeProgress(ctx, tj, ip, err, st, state, now)
	}
	if ip != "" && builders.CheckpointEnabled(tj) {
		r.observeCheckpoints(ctx, tj, ip, st, state, now)
	}
	// The next scrape is one interval after this one started, not after it ended, so the period does not
	// drift by the scrape's and the write's own time.
	next := max(state.last.Add(r.interval(tj)).Sub(r.Clock.Now()), time.Millisecond)
	return reconcile.Result{RequeueAfter: next}, r.writeStatus(ctx, tj, st)
}

// due returns the job's scrape state and how long until its next scrape (0: now, and marks it taken).
func (r *StatusReconciler) due(tj *mlv1.TrainingJob, now time.Time) (*scrapeState, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := client.ObjectKeyFromObject(tj)
	s := r.jobs[key]
	if s == nil || s.uid != tj.UID {
		s = &scrapeState{uid: tj.UID}
		r.jobs[key] = s
	}
	if wait := s.last.Add(r.interval(tj)).Sub(now); !s.last.IsZero() && wait > 0 {
		return s, wait
	}
	s.last = now
	return s, 0
}

func (r *StatusReconciler) interval(tj *mlv1.TrainingJob) time.Duration {
	if m := tj.Spec.Monitoring; m != nil && m.ScrapeIntervalSeconds != nil {
		return time.Duration(*m.ScrapeIntervalSeconds) * time.Second
	}
	return r.Interval
}

// observeProgress scrapes rank 0's progress (at ip, unless ipErr says why there is none) into st.
func (r *StatusReconciler) observeProgress(ctx context.Context, tj *mlv1.TrainingJob, ip string, ipErr error, st *mlv1.TrainingJobStatus, s *scrapeState, now time.Time) {
	var sample Sample
	err := ipErr
	if err == nil {
		sample, err = r.scrape(ctx, tj, ip)
	}
	if err != nil {
		ApplyScrapeError(st, err, metav1.NewTime(now))
		return
	}
	r.observe(ctx, tj, st, s, sample, now)
}

// observe updates the gauges on every scrape, the status when rank 0's figures changed, and applies the
// success policy.
func (r *StatusReconciler) observe(ctx context.Context, tj *mlv1.TrainingJob, st *mlv1.TrainingJobStatus, s *scrapeState, sample Sample, now time.Time) {
	setProgressGauges(tj, sample)
	f, ok := sample.Fraction(specEpochs(tj))
	r.mu.Lock()
	if s.window == nil && ok {
		s.window = &rateWindow{at: now, fraction: f}
	}
	w := rateWindow{at: now, fraction: f}
	if s.window != nil {
		w = *s.window
	}
	r.mu.Unlock()
	ApplySample(st, tj, sample, w, metav1.NewTime(now))
	if d := decideSuccess(tj, st, sample); d.done {
		ph := phase{mlv1.StateCompleted, d.reason, d.message}
		st.State = ph.state
		setConditions(st, true, ph, metav1.NewTime(now))
		setTimes(st, nil, ph, metav1.NewTime(now))
		settleProgress(st, ph)
		ctrl.LoggerFrom(ctx).Info("success policy met", "trainingJob", klog.KObj(tj), "reason", d.reason, "message", d.message)
	}
}

// scrape reads rank 0's progress endpoint.
func (r *StatusReconciler) scrape(ctx context.Context, tj *mlv1.TrainingJob, ip string) (Sample, error) {
	var s Sample
	err := r.get(ctx, ip, builders.MetricsPort(tj), "/metrics", func(body io.Reader) error {
		var err error
		s, err = ParseSample(body)
		return err
	})
	return s, err
}

// get GETs http://ip:port/path within the scrape timeout and hands the body (at most maxBody) to read.
func (r *StatusReconciler) get(ctx context.Context, ip string, port int32, path string, read func(io.Reader) error) error {
	return r.call(ctx, http.MethodGet, ip, port, path, read)
}

// call sends a bodiless request to http://ip:port/path within the scrape timeout and hands the answer's
// body (at most maxBody) to read.
func (r *StatusReconciler) call(ctx context.Context, method, ip string, port int32, path string, read func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	url := "http://" + net.JoinHostPort(ip, strconv.Itoa(int(port))) + path
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return err
	}
	resp, err := r.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return read(io.LimitReader(resp.Body, maxBody))
}

// rank0IP is the pod IP of rank 0's running pod.
func (r *StatusReconciler) rank0IP(ctx context.Context, tj *mlv1.TrainingJob) (string, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(tj.Namespace), client.MatchingLabels{builders.NameLabel: tj.Name, builders.RankLabel: "0"}); err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			return p.Status.PodIP, nil
		}
	}
	return "", errors.New("rank 0 has no running pod")
}

// writeStatus writes st when it differs; a conflict is left to the next scrape.
func (r *StatusReconciler) writeStatus(ctx context.Context, tj *mlv1.TrainingJob, st *mlv1.TrainingJobStatus) error {
	if apiequality.Semantic.DeepEqual(tj.Status, *st) {
		return nil
	}
	from, old := tj.Status.State, tj.Status
	tj.Status = *st
	if err := r.Status().Update(ctx, tj); apierrors.IsConflict(err) {
		return nil // the next scrape, an interval later, computes it again
	} else if err != nil {
		return fmt.Errorf("updating progress of %s: %w", klog.KObj(tj), err)
	}
	if from != st.State {
		recordTransition(ctx, r.Recorder, tj, from)
	}
	if c := conditionReason(*st, ConditionCheckpointStorage); c == "StorageError" && conditionReason(old, ConditionCheckpointStorage) != c {
		r.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, c, "Checkpoint", "%s", conditionMessage(*st, ConditionCheckpointStorage))
	}
	return nil
}

// forget drops a deleted job's memory and series.
func (r *StatusReconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	delete(r.jobs, key)
	r.mu.Unlock()
	metrics.DeleteJob(key.Namespace, key.Name)
}

// setProgressGauges sets the per-job gauges rank 0's figures feed.
func setProgressGauges(tj *mlv1.TrainingJob, s Sample) {
	l := []string{tj.Namespace, tj.Name}
	if f, ok := s.Fraction(specEpochs(tj)); ok {
		metrics.ProgressPercent.WithLabelValues(l...).Set(f * 100)
	}
	setIf(metrics.CurrentEpoch.WithLabelValues(l...), s.Epoch)
	setIf(metrics.Loss.WithLabelValues(l...), s.Loss)
	setIf(metrics.Accuracy.WithLabelValues(l...), s.Accuracy)
	setIf(metrics.GPUUtilization.WithLabelValues(l...), s.GPUUtilization)
}

type gaugeSetter interface{ Set(float64) }

func setIf(g gaugeSetter, v *float64) {
	if v != nil {
		g.Set(*v)
	}
}

// setAllocation sets the gauges derived from the status: workers and GPUs held, and the run's duration.
func setAllocation(tj *mlv1.TrainingJob, now time.Time) {
	l := []string{tj.Namespace, tj.Name}
	active := tj.Status.Workers.Active
	if tj.Status.State == mlv1.StateCompleted || tj.Status.State == mlv1.StateFailed || tj.Status.State == mlv1.StateSuspended {
		active = 0
	}
	metrics.AllocatedWorkers.WithLabelValues(l...).Set(float64(active))
	metrics.AllocatedGPUs.WithLabelValues(l...).Set(float64(active * ptr.Deref(tj.Spec.GPUsPerWorker, 1)))
	if start := tj.Status.StartTime; start != nil {
		end := now
		if c := tj.Status.CompletionTime; c != nil {
			end = c.Time
		}
		metrics.DurationSeconds.WithLabelValues(l...).Set(end.Sub(start.Time).Seconds())
	}
}

// SetupWithManager registers the controller; Workers bounds concurrent scrapes.
func (r *StatusReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.jobs = map[types.NamespacedName]*scrapeState{}
	return ctrl.NewControllerManagedBy(mgr).
		For(&mlv1.TrainingJob{}, builder.WithPredicates(specOrState)).
		Named(statusController).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Workers}).
		Complete(metrics.Instrument(statusController, r))
}
