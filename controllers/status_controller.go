package controllers

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// StatusReconciler is the StatusController. It reads rank 0's progress endpoint of every Running
// TrainingJob once per interval into the status and per-job gauges, and gives the success policy's
// verdict (SuccessPolicyMet). It writes only the progress fields.
//
// Its cost is bounded: a job is queued at most once, Workers reconciles run at a time, each scrape
// has Timeout, and the status is written only when rank 0's report changed.
type StatusReconciler struct {
	// writes remembers this process's status writes, shared by the four controllers (statusWrites).
	writes *statusWrites
	client.Client
	Clock clock.Clock
	// Interval is the default time between scrapes; monitoring.scrapeIntervalSeconds overrides it.
	Interval time.Duration
	// Timeout bounds one scrape.
	Timeout time.Duration
	// Workers is how many scrapes may run at once.
	Workers int
	HTTP    *http.Client
	// Logs reads the ranks' last log lines for a hang's message; nil leaves them out.
	Logs     LogReader
	Recorder events.EventRecorder

	// jobs paces the scrapes and remembers, per job, the last sample and where progress was first
	// seen.
	jobs poller[progressState]
}

// progressState is what the StatusController remembers of a job between scrapes.
type progressState struct {
	// window is where progress was first seen in this process, for the ETA.
	window *derive.RateWindow
	// sample is the last scrape's, taken at at; nil after a failed scrape.
	sample *derive.Sample
	at     time.Time
	// pace follows the epochs of the current attempt, for the default stall timeout.
	pace epochPace
	// endpointErr is why rank 0's own endpoint gave nothing at the last read (nil: it answered).
	endpointErr error
	// noSource: the last read found no progress source (derive.ApplyNoSource).
	noSource bool
	// noticed is the attempt (plus one) whose lack of a progress source an event has told.
	noticed int32
	// endpoint is the attempt (plus one) whose rank 0 served its own figures; later reads keep to it.
	endpoint int32
}

// startupInterval is the time between scrapes of a running attempt whose rank 0 has not advanced
// yet; its first progress ends its startup in the goodput accounting.
const startupInterval = 500 * time.Millisecond

// startupWatch is how long after all workers run the operator keeps reading rank 0 every
// startupInterval while it shows no progress. A late first figure is then still seen within
// startupInterval.
const startupWatch = 2 * time.Minute

// startingUp reports whether the running attempt is read at the startup pace: no progress yet, and
// a known source or workers running for less than startupWatch.
func startingUp(tj *mlv1.TrainingJob, now time.Time) bool {
	if derive.ProgressedInAttempt(&tj.Status) {
		return false
	}
	running, ok := derive.RunningSince(tj.Status)
	return !derive.ProgressUnknown(&tj.Status) || ok && now.Sub(running) < startupWatch
}

// maxBody bounds how much of rank 0's answer is read, and maxHeaderBytes its headers (net/http's
// default is 10 MB).
const (
	maxBody        = 4 << 20
	maxHeaderBytes = 64 << 10
)

// Reconcile keeps a job's progress and hang watch in its status and series; the JobController keeps
// goodput. Its steps:
//  1. get the TrainingJob (a deleted one's remembered state and series are dropped);
//  2. wait while the cache has not seen this process's last status write;
//  3. settle what the status alone gives: the planned epochs and a finished run's progress, and
//     drop a finished run's series and reads;
//  4. read rank 0's progress when its interval has passed (a Running job with monitoring on);
//  5. watch for a hang (the Stalled condition);
//  6. write the status, once, when it changed, and tell of a hang it declared.
func (r *StatusReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	// 1. Get the TrainingJob.
	tj := &mlv1.TrainingJob{}
	if found, err := getManagedTrainingJob(ctx, r.Client, req.NamespacedName, tj); !found || err != nil {
		if !found && err == nil {
			r.jobs.forget(req.NamespacedName)
			metrics.DeleteJob(req.Namespace, req.Name)
		}
		return reconcile.Result{}, err
	}
	// 2. Wait for the cache to see our last status write.
	if r.writes.behind(tj) {
		return reconcile.Result{RequeueAfter: cacheLag}, nil
	}
	// 3. Settle what the status alone gives.
	now := r.Clock.Now()
	if tj.Status.State == mlv1.StateCompleted || tj.Status.State == mlv1.StateFailed {
		r.jobs.forget(req.NamespacedName)
		metrics.DeleteProgress(tj.Namespace, tj.Name)
	}
	old := *tj.Status.DeepCopy()
	// With monitoring off, no progress is known and nothing is written.
	if tj.MonitoringEnabled() {
		derive.PlannedEpochs(&tj.Status, tj)
		derive.SettleProgress(&tj.Status, metav1.NewTime(now))
	}
	var res reconcile.Result
	// 4. Read rank 0's progress when due.
	if tj.Status.State == mlv1.StateRunning && tj.MonitoringEnabled() {
		res = r.scrapeWhenDue(ctx, tj, now)
	}
	// 5. Watch for a hang.
	hung := r.watchHang(ctx, tj, now)
	// 6. Write the status.
	written, wres, err := applyStatus(ctx, r.Client, r.writes, tj, old, statusController)
	if hung && written && r.Recorder != nil {
		c := meta.FindStatusCondition(tj.Status.Conditions, mlv1.ConditionStalled)
		r.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, c.Reason, "Hang", "%s", c.Message)
		ctrl.LoggerFrom(ctx).V(1).Info("The run hangs", "reason", c.Reason, "message", c.Message)
	}
	return result(minResult(res, wres), err)
}

// scrapeWhenDue scrapes rank 0 once the job's interval has passed, and puts the last sample into
// tj.Status even when not due, so a write lost to a conflict is retried next reconcile. It returns
// when to come back.
func (r *StatusReconciler) scrapeWhenDue(ctx context.Context, tj *mlv1.TrainingJob, now time.Time) reconcile.Result {
	every := interval(tj, r.Interval)
	if startingUp(tj, now) {
		// The end of startup (goodput) is seen to within startupInterval.
		every = min(every, startupInterval)
	}
	wait, state := r.jobs.due(tj, now, every)
	if wait == 0 {
		r.scrapeInto(ctx, tj, state, now)
		wait = r.jobs.next(tj, r.Clock.Now(), every)
	}
	var last progressState
	r.jobs.with(state, func(s *progressState) { last = *s })
	switch {
	case last.noSource:
		derive.ApplyNoSource(&tj.Status, tj, last.endpointErr, metav1.NewTime(last.at))
	case last.sample != nil:
		r.observe(ctx, tj, *last.sample, last.window, last.at)
	}
	r.noSourceEvent(tj, state, now)
	return reconcile.Result{RequeueAfter: wait}
}

// scrapeInto reads rank 0's progress into the job's remembered state.
func (r *StatusReconciler) scrapeInto(ctx context.Context, tj *mlv1.TrainingJob, state *progressState, now time.Time) {
	endpointOnly := false
	r.jobs.with(state, func(s *progressState) { endpointOnly = s.endpoint == tj.Status.Attempt+1 })
	sample, endpointErr, err := r.scrape(ctx, tj, endpointOnly)
	// A program that never reported, with no supervisor to read its output, has no source; its
	// endpoint's error says why.
	noSource := err != nil && tj.Status.LastProgressTime == nil && !builders.Supervised(tj) || err == nil && !sample.Reports()
	r.jobs.with(state, func(s *progressState) { s.sample, s.at, s.endpointErr, s.noSource = nil, now, endpointErr, noSource })
	if err != nil {
		if !noSource {
			derive.ApplyScrapeError(&tj.Status, err, metav1.NewTime(now))
		}
		return
	}
	setProgressGauges(tj, sample)
	r.jobs.with(state, func(s *progressState) {
		if !sample.FromOutput && sample.Reports() {
			s.endpoint = tj.Status.Attempt + 1
		}
		s.sample = &sample
		running, _ := derive.RunningSince(tj.Status)
		s.pace.observe(tj.Status.Attempt, sample, now, running)
		if f, ok := sample.Fraction(derive.SpecEpochs(tj)); s.window == nil && ok {
			s.window = &derive.RateWindow{At: now, Fraction: f}
		}
	})
}

// observe puts a sample taken at at into the status when rank 0's figures changed, and applies the
// success policy.
func (r *StatusReconciler) observe(ctx context.Context, tj *mlv1.TrainingJob, sample derive.Sample, window *derive.RateWindow,
	at time.Time) {
	w := derive.RateWindow{At: at}
	if window != nil {
		w = *window
	}
	derive.ApplySample(&tj.Status, tj, sample, w, metav1.NewTime(at))
	if d := derive.DecideSuccess(tj, &tj.Status, sample); derive.ApplySuccess(&tj.Status, d, metav1.NewTime(at)) {
		ctrl.LoggerFrom(ctx).Info("success policy met", "reason", d.Reason, "message", d.Message)
	}
}

// scrape reads rank 0's progress (readProgress).
func (r *StatusReconciler) scrape(ctx context.Context, tj *mlv1.TrainingJob, endpointOnly bool) (sample derive.Sample,
	endpointErr, err error) {
	addr, err := rank0Addr(ctx, r.Client, tj, tj.MetricsPort())
	if err != nil {
		return derive.Sample{}, nil, err
	}
	ip, _, _ := net.SplitHostPort(addr)
	return r.readProgress(ctx, tj, ip, endpointOnly)
}

// readEndpoint GETs a rank's progress endpoint within the scrape timeout and parses at most maxBody
// of the answer. A non-200 answer is an error naming its code. The client follows no redirect, so
// rank 0 cannot redirect the operator.
func (r *StatusReconciler) readEndpoint(ctx context.Context, url string) (derive.Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return derive.Sample{}, err
	}
	resp, err := r.HTTP.Do(req)
	if err != nil {
		return derive.Sample{}, unwrapURLError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return derive.Sample{}, fmt.Errorf("answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	return derive.ParseSample(io.LimitReader(resp.Body, maxBody))
}

// endpointClient returns the client for reading ranks and ordering supervisors. It follows no
// redirect and keeps at most two idle connections per address.
func endpointClient(interval time.Duration) *http.Client {
	return &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: 2 * interval, DisableCompression: true,
			MaxResponseHeaderBytes: maxHeaderBytes},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// setProgressGauges sets the per-job gauges rank 0's figures feed.
func setProgressGauges(tj *mlv1.TrainingJob, s derive.Sample) {
	l := []string{tj.Namespace, tj.Name}
	if f, ok := s.Fraction(derive.SpecEpochs(tj)); ok {
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

// SetupWithManager registers the controller; Workers bounds concurrent scrapes.
func (r *StatusReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&mlv1.TrainingJob{}, builder.WithPredicates(statusControllerEvents)).
		Named(statusController).
		WithOptions(controllerOptions(r.Workers)).
		Complete(metrics.Instrument(statusController, r))
}

// checkpointSeconds returns the current attempt's rank 0 reported time spent saving checkpoints, or
// nil when none is reported or the sample predates the workers. Setup wires it into the
// JobController's goodput.
func (r *StatusReconciler) checkpointSeconds(tj *mlv1.TrainingJob) *float64 {
	s, ok := r.jobs.peek(tj)
	running := meta.FindStatusCondition(tj.Status.Conditions, mlv1.ConditionRunning)
	if !ok || s.sample == nil || tj.Status.State != mlv1.StateRunning || running == nil || s.at.Before(running.LastTransitionTime.Time) {
		return nil
	}
	return s.sample.CheckpointSeconds
}
