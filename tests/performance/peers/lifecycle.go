package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
)

// workers is the size of every job of the peer comparison.
const workers = 2

// peerResult is one operator at one client rate with n jobs; durations in seconds.
type peerResult struct {
	Operator       string             `json:"operator"`
	Version        string             `json:"version"`
	Rate           string             `json:"rate"`
	Jobs           int                `json:"jobs"`
	CeilingS       float64            `json:"ceilingSeconds"`
	WiredS         float64            `json:"wiredSeconds"`
	Ratio          float64            `json:"wiredToCeiling"`
	BurstToPods    [2]float64         `json:"burstSubmitToPodsP50P99Seconds"`
	IdleToPods     [2]float64         `json:"idleSubmitToPodsP50P99Seconds"`
	LifecycleS     float64            `json:"lifecycleSeconds"`
	Writes         float64            `json:"operatorWritesPerLifecycle"`
	WritesByKind   map[string]float64 `json:"operatorWritesPerLifecycleByKind"`
	Events         float64            `json:"eventsPerLifecycle"`
	Conflicts      int                `json:"conflicts"`
	ControllerMgr  float64            `json:"kubeControllerManagerWritesPerLifecycle"`
	CPUSeconds     float64            `json:"operatorCPUSeconds"`
	PeakRSSMiB     float64            `json:"operatorPeakRSSMiB"`
	RestartS       [3]float64         `json:"failureToGangRunningSeconds"`
	RestartedPods  int                `json:"podsReplacedByRestart"`
	RestartFailure string             `json:"restartFailure,omitempty"`
	// Error is why the run stopped, when it did: its figures are those measured before.
	Error string `json:"error,omitempty"`
}

func (p peerResult) row() string {
	if p.Error != "" {
		return fmt.Sprintf("| %s | %s | %d | %.2f | stopped: %s | | | | | | | | | | | |", p.Operator, p.Rate, p.Jobs, p.CeilingS, p.Error)
	}
	return fmt.Sprintf("| %s | %s | %d | %.2f | %.2f | %.2fx | %.3f / %.3f | %.3f / %.3f | "+
		"%.1f | %.1f | %.1f | %.1f | %d | %.1f | %.1f | %s |",
		p.Operator, p.Rate, p.Jobs, p.CeilingS, p.WiredS, p.Ratio, p.BurstToPods[0], p.BurstToPods[1], p.IdleToPods[0], p.IdleToPods[1],
		p.LifecycleS, p.Writes, p.ControllerMgr, p.Events, p.Conflicts, p.CPUSeconds, p.PeakRSSMiB, p.restart())
}

func (p peerResult) restart() string {
	if p.RestartFailure != "" {
		return p.RestartFailure
	}
	return fmt.Sprintf("%.2f / %.2f / %.2f (%d pods new)", p.RestartS[0], p.RestartS[1], p.RestartS[2], p.RestartedPods)
}

// measurePeer runs the lifecycle of n jobs of 2 workers under op at rt, on a fresh control plane.
func measurePeer(ctx context.Context, c config, op *operator, rt rate, n int) (res peerResult, err error) {
	res = peerResult{Operator: op.name, Version: op.version, Rate: rt.name, Jobs: n}
	r, err := startRun(ctx, c, func(p *corev1.Pod) string { return p.Labels[op.jobLabel] }, 0, op.name == ours().name, rt.kcm)
	label := fmt.Sprintf("%s-%s-%d", strings.Fields(op.name)[len(strings.Fields(op.name))-1], strings.Fields(rt.name)[0], n)
	defer func() { r.stop(label) }()
	if err != nil {
		return res, err
	}
	time.Sleep(warmUp)
	d, err := r.ceiling(ctx, n)
	if err != nil {
		return res, fmt.Errorf("ceiling: %w", err)
	}
	res.CeilingS = d.Seconds()
	if err := op.install(ctx, r); err != nil {
		return res, fmt.Errorf("installing %s: %w", op.name, err)
	}
	if r.procs, err = op.start(r, rt); err != nil {
		return res, err
	}
	if err := r.watchFinished(ctx, op); err != nil {
		return res, err
	}
	if err := r.warmUpOperator(ctx, op); err != nil {
		return res, err
	}
	cpu0, _ := r.cpuAndRSS()
	start := time.Now()
	if err := r.burst(ctx, op, n, &res); err != nil {
		return res, err
	}
	if err := benchkit.Parallel(n, clients, func(i int) error { return r.finishJob(ctx, jobName(i)) }); err != nil {
		return res, err
	}
	if err := waitFor(ctx, 10*time.Minute, "every job finished", func() bool { return r.allFinished(n) }); err != nil {
		return res, err
	}
	res.LifecycleS = time.Since(start).Seconds()
	cpu1, rss := r.cpuAndRSS()
	res.CPUSeconds, res.PeakRSSMiB = (cpu1 - cpu0).Seconds(), rss/(1<<20)
	time.Sleep(3 * time.Second) // the last writes reach the audit log
	if err := r.countWrites(op, start, time.Now(), n, &res); err != nil {
		return res, err
	}
	if res.IdleToPods, err = r.idleSubmissions(ctx, op, 20); err != nil {
		return res, err
	}
	r.restarts(ctx, op, &res)
	return res, nil
}

// warmUpOperator submits one job and plays it to the end: the operator is started, its caches synced and
// its path works before anything is measured.
func (r *run) warmUpOperator(ctx context.Context, op *operator) error {
	if err := r.submit(ctx, op, "warm-up", workers); err != nil {
		return err
	}
	running := func() bool { n, _ := r.gang("warm-up", time.Time{}); return n == workers }
	if err := waitFor(ctx, 3*time.Minute, op.name+" running a first job", running); err != nil {
		return err
	}
	if err := r.finishJob(ctx, "warm-up"); err != nil {
		return err
	}
	return waitFor(ctx, time.Minute, op.name+" finishing a first job", func() bool { _, ok := r.finishedAt("warm-up"); return ok })
}

// burst submits n jobs at once (clients at a time) and waits until every job's pods exist (wired) and run.
func (r *run) burst(ctx context.Context, op *operator, n int, res *peerResult) error {
	start := time.Now()
	submitted := make([]time.Time, n)
	if err := benchkit.Parallel(n, clients, func(i int) error {
		submitted[i] = time.Now()
		return r.submit(ctx, op, jobName(i), workers)
	}); err != nil {
		return err
	}
	if err := waitFor(ctx, 10*time.Minute, "every job's pods created", func() bool { return r.allCreated(n) }); err != nil {
		return err
	}
	lat := make([]time.Duration, n)
	var last time.Time
	for i := range n {
		at := r.created(jobName(i), workers)
		lat[i] = at.Sub(submitted[i])
		if at.After(last) {
			last = at
		}
	}
	res.WiredS = last.Sub(start).Seconds()
	res.Ratio = res.WiredS / res.CeilingS
	q := benchkit.Quantiles(lat)
	res.BurstToPods = [2]float64{q[0].Seconds(), q[1].Seconds()}
	return waitFor(ctx, 10*time.Minute, "every job's pods running", func() bool {
		for i := range n {
			if got, _ := r.gang(jobName(i), time.Time{}); got < workers {
				return false
			}
		}
		return true
	})
}

func (r *run) allCreated(n int) bool {
	for i := range n {
		if r.created(jobName(i), workers).IsZero() {
			return false
		}
	}
	return true
}

func (r *run) allFinished(n int) bool {
	for i := range n {
		if _, ok := r.finishedAt(jobName(i)); !ok {
			return false
		}
	}
	return true
}

// countWrites puts the operator's writes per lifecycle (its processes' users) and kube-controller-manager's
// into res, from the audit log.
func (r *run) countWrites(op *operator, from, to time.Time, n int, res *peerResult) error {
	audit := filepath.Join(r.dir, "audit.log")
	w, err := benchkit.AuditWrites(audit, from, to, func(u string) bool { return slices.Contains(op.users, u) })
	if err != nil {
		return err
	}
	res.Writes, res.Events, res.Conflicts = float64(w.Total)/float64(n), float64(w.Events)/float64(n), w.Conflicts
	res.WritesByKind = map[string]float64{}
	for k, v := range w.ByKind {
		res.WritesByKind[k] = float64(v) / float64(n)
	}
	kcm, err := benchkit.AuditWrites(audit, from, to, func(u string) bool { return u == "kube-controller-manager" })
	res.ControllerMgr = float64(kcm.Total) / float64(n)
	return err
}

// idleSubmissions times submit → every pod created for jobs submitted one at a time on the idle system.
func (r *run) idleSubmissions(ctx context.Context, op *operator, count int) ([2]float64, error) {
	lat := make([]time.Duration, 0, count)
	for i := range count {
		name := fmt.Sprintf("idle-%02d", i)
		start := time.Now()
		if err := r.submit(ctx, op, name, workers); err != nil {
			return [2]float64{}, err
		}
		if err := waitFor(ctx, time.Minute, name+"'s pods", func() bool { return !r.created(name, workers).IsZero() }); err != nil {
			return [2]float64{}, err
		}
		lat = append(lat, r.created(name, workers).Sub(start))
	}
	q := benchkit.Quantiles(lat)
	return [2]float64{q[0].Seconds(), q[1].Seconds()}, nil
}

// restarts fails one rank of a running job (exit 137, as a kill) three times, each on its own job, and
// times the failure until the job again runs all its workers with at least one new pod: p50, p99 and max
// of the three. A peer that does not restart is reported, not fatal.
func (r *run) restarts(ctx context.Context, op *operator, res *peerResult) {
	var lat []time.Duration
	for i := range 3 {
		name := fmt.Sprintf("restart-%d", i)
		d, replaced, err := r.restartOnce(ctx, op, name)
		if err != nil {
			res.RestartFailure = err.Error()
			return
		}
		lat, res.RestartedPods = append(lat, d), replaced
	}
	q := benchkit.Quantiles(lat)
	res.RestartS = [3]float64{q[0].Seconds(), q[1].Seconds(), q[2].Seconds()}
}

func (r *run) restartOnce(ctx context.Context, op *operator, name string) (time.Duration, int, error) {
	if err := r.submit(ctx, op, name, workers); err != nil {
		return 0, 0, err
	}
	if err := waitFor(ctx, time.Minute, name+" running", func() bool { n, _ := r.gang(name, time.Time{}); return n == workers }); err != nil {
		return 0, 0, err
	}
	recs := r.kl.records(name)
	slices.SortFunc(recs, func(a, b podRecord) int { return strings.Compare(b.pod.Name, a.pod.Name) }) // the highest rank
	failed := time.Now()
	if err := r.kl.end(ctx, recs[0].pod, 137); err != nil {
		return 0, 0, err
	}
	var replaced int
	err := waitFor(ctx, 2*time.Minute, name+" running again after a rank's failure", func() bool {
		var running int
		running, replaced = r.gang(name, failed)
		return running == workers && replaced > 0
	})
	return time.Since(failed), replaced, err
}
