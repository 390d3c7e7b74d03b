package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/cluster"
	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
)

const ns = "bench"

// endpoint is one job's rank 0: it serves training_epoch and counts scrapes.
type endpoint struct {
	port     int32
	epoch    atomic.Int64
	requests atomic.Int64
}

type result struct {
	gauge, status      []time.Duration
	writesPerJobMinute float64
	scrapesPerInterval float64
	cpuPerScrape       time.Duration
	sustained          sustained
}

// sustained is the steady state under a flood of figures: every job's changes at every interval.
type sustained struct {
	writesPerSecond, wantedPerSecond float64
	longest                          []time.Duration // each job's longest time without a status write
	never                            int             // jobs not written at all
	// readsPerInterval is rank 0's reads per job per interval; heapMiB the manager's heap in use at the end.
	readsPerInterval, heapMiB float64
}

func (s sustained) row(n int) string {
	q := benchkit.Quantiles(s.longest)
	return fmt.Sprintf("| %d | %.1f | %.1f | %s | %s | %s | %d | %.2f | %.1f |", n, s.writesPerSecond, s.wantedPerSecond, q[0], q[1], q[2],
		s.never, s.readsPerInterval, s.heapMiB)
}

func (r result) row(n int) string {
	g, s := benchkit.Quantiles(r.gauge), benchkit.Quantiles(r.status)
	return fmt.Sprintf("| %d | %s | %s | %s | %s | %s | %s | %.1f | %.2f | %s |", n, g[0], g[1], g[2], s[0], s[1], s[2],
		r.writesPerJobMinute, r.scrapesPerInterval, r.cpuPerScrape.Round(time.Microsecond))
}

// bench is one measurement: a control plane, the manager and n endpoints.
type bench struct {
	c         config
	mgr       *cluster.Process
	n         int
	k         client.WithWatch
	eps       []*endpoint
	metrics   string
	mu        sync.Mutex
	round     int64
	changed   []time.Time
	gaugeAt   []time.Time
	statusAt  []time.Time
	gauge     []time.Duration
	status    []time.Duration
	modified  atomic.Int64
	measuring atomic.Bool
	// writtenAt is each job's last status write, and longest its longest time without one, while sustaining.
	writtenAt  []time.Time
	gaps       []time.Duration
	sustaining bool
}

func measure(ctx context.Context, c config, n int) (result, error) {
	dir, err := os.MkdirTemp("", "progress-bench-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	cl, err := cluster.Start(cluster.Options{Assets: c.assets, Dir: dir})
	if err != nil {
		return result{}, err
	}
	defer cl.Stop()
	b := &bench{c: c, n: n}
	// The endpoints' ports first: one of them would take a free address picked before them.
	for range n {
		ep, err := serve()
		if err != nil {
			return result{}, err
		}
		ep.epoch.Store(1)
		b.eps = append(b.eps, ep)
	}
	b.metrics = benchkit.FreeAddr()
	if b.k, err = client.NewWithWatch(cl.Config, client.Options{Scheme: controllers.NewScheme()}); err != nil {
		return result{}, err
	}
	// Plain HTTP: the benchmark times the series' freshness, not the scraper's reviews.
	mgr, err := cluster.StartProcess(c.manager, []string{"--kubeconfig=" + cl.Kubeconfig, "--metrics-bind-address=" + b.metrics,
		"--metrics-insecure-http", "--health-probe-bind-address=0", "--progress-interval=" + c.interval.String(), "--zap-log-level=error",
		fmt.Sprintf("--status-write-qps=%g", orDefaultQPS(c.statusQPS))},
		filepath.Join(dir, "manager.log"))
	if err != nil {
		return result{}, err
	}
	defer mgr.Stop()
	b.mgr = mgr
	if err := b.setUp(ctx); err != nil {
		return result{}, err
	}
	return b.run(ctx, mgr.Pid())
}

// setUp creates the jobs and their rank-0 pods and waits until every job runs
// and its first figure reached the status.
func (b *bench) setUp(ctx context.Context) error {
	if err := b.k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	if err := benchkit.Parallel(b.n, 8, b.createJob); err != nil {
		return err
	}
	if err := benchkit.Parallel(b.n, 8, b.createPod); err != nil {
		return err
	}
	// Every job's first figure is a routine write: at 10,000 jobs the budget alone takes minutes.
	wait := 5*time.Minute + time.Duration(float64(b.n)/max(orDefaultQPS(b.c.statusQPS), 1)*float64(time.Second))
	return b.waitFor(ctx, wait, "every job Running at epoch 1", func(tj *mlv1.TrainingJob) bool {
		return tj.Status.State == mlv1.StateRunning && tj.Status.CurrentEpoch == 1
	})
}

func serve() (*endpoint, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ep := &endpoint{port: int32(l.Addr().(*net.TCPAddr).Port)}
	go func() {
		_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			ep.requests.Add(1)

			fmt.Fprintf(w, "# TYPE training_epoch gauge\ntraining_epoch %d\ntraining_epochs_total 100000\ntraining_loss 0.5\n", ep.epoch.Load())
		}))
	}()
	return ep, nil
}

func jobName(i int) string { return fmt.Sprintf("job-%04d", i) }

func (b *bench) createJob(i int) error {
	tj := &mlv1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: jobName(i), Namespace: ns},
		Spec: mlv1.TrainingJobSpec{Model: "m", Dataset: "d", NumWorkers: 1, GPUsPerWorker: ptr.To[int32](0), Image: "bench:1",
			Command: []string{"train"}, Monitoring: &mlv1.MonitoringSpec{MetricsPort: b.eps[i].port}},
	}
	return b.k.Create(context.Background(), tj)
}

// createPod plays Kubernetes' Job controller and the kubelet for rank 0: a Running pod at the endpoint's address.
func (b *bench) createPod(i int) error {
	ctx := context.Background()
	// The labels Kubernetes' Job controller gives a pod of the first attempt's Job: the operator finds rank 0 by them.
	labels := map[string]string{names.NameLabel: jobName(i), names.RankLabel: "0", names.AttemptLabel: "0"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: jobName(i) + "-worker-0", Namespace: ns, Labels: labels,
			Annotations: map[string]string{names.RankAnnotation: "0"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: names.ContainerName, Image: "bench:1"}}},
	}
	if err := b.k.Create(ctx, pod); err != nil {
		return err
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: names.ContainerName, Image: "bench:1", Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
	return b.k.Status().Update(ctx, pod)
}

func (b *bench) waitFor(ctx context.Context, timeout time.Duration, what string, ok func(*mlv1.TrainingJob) bool) error {
	deadline := time.Now().Add(timeout)
	for {
		list := &mlv1.TrainingJobList{}
		if err := b.k.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		good := 0
		for i := range list.Items {
			if ok(&list.Items[i]) {
				good++
			}
		}
		if good == b.n {
			return nil
		}
		if exited, err := b.mgr.Exited(); exited {
			return fmt.Errorf("%s: the manager exited (%v), see %s", what, err, b.mgr.Log)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d after %s", what, good, b.n, timeout)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// run changes every job's epoch once per round at a random moment within an interval and records when
// the gauge and the status show it.
func (b *bench) run(ctx context.Context, pid int) (result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := b.k.Watch(ctx, &mlv1.TrainingJobList{}, client.InNamespace(ns))
	if err != nil {
		return result{}, err
	}
	go b.watchStatus(w)
	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	go b.pollGauges(pollCtx)
	req0, t0 := b.requests(), time.Now()
	b.measuring.Store(true)
	for r := 2; r < 2+b.c.rounds; r++ {
		if err := b.roundOf(int64(r)); err != nil {
			return result{}, err
		}
	}
	b.measuring.Store(false)
	elapsed := time.Since(t0)
	fmt.Fprintf(os.Stderr, "progress-bench: %d scrapes of %d jobs in %s\n", b.requests()-req0, b.n, elapsed.Round(time.Millisecond))
	res := result{
		gauge: b.gauge, status: b.status,
		writesPerJobMinute: float64(b.modified.Load()) / float64(b.n) / elapsed.Minutes(),
		scrapesPerInterval: float64(b.requests()-req0) / float64(b.n) / (float64(elapsed) / float64(b.c.interval)),
	}
	// CPU is measured without the /metrics polling above (it would bill the manager for 4 exports a
	// second): for 3 intervals every job's figure changes once per interval, so each scrape also writes
	// the status — the costliest steady state.
	stopPolling()
	cpu0, req0 := benchkit.ProcCPU(pid), b.requests()
	b.churn(2+int64(b.c.rounds), 3)
	res.cpuPerScrape = (benchkit.ProcCPU(pid) - cpu0) / time.Duration(max(b.requests()-req0, 1))
	if b.c.sustain > 0 {
		res.sustained = b.sustain(2 + int64(b.c.rounds) + 3)
	}
	return res, nil
}

func orDefaultQPS(q float64) float64 {
	if q == 0 {
		return controllers.DefaultStatusWriteQPS
	}
	return q
}

// sustain changes every job's figure at every interval for c.sustain and reports the status writes per
// second and each job's longest time without a status write.
func (b *bench) sustain(from int64) sustained {
	start := time.Now()
	b.mu.Lock()
	b.writtenAt, b.gaps, b.sustaining = make([]time.Time, b.n), make([]time.Duration, b.n), true
	for j := range b.writtenAt {
		b.writtenAt[j] = start
	}
	b.mu.Unlock()
	m0, req0 := b.modified.Load(), b.requests()
	b.measuring.Store(true)
	b.churn(from, int(b.c.sustain/b.c.interval))
	b.measuring.Store(false)
	end := time.Now()
	reads := float64(b.requests()-req0) / float64(b.n) / (float64(end.Sub(start)) / float64(b.c.interval))
	var heap float64
	if m, err := benchkit.Metrics(b.metrics, ""); err == nil {
		heap = benchkit.Sum(m, "go_memstats_heap_inuse_bytes", nil) / (1 << 20)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sustaining = false
	s := sustained{writesPerSecond: float64(b.modified.Load()-m0) / end.Sub(start).Seconds(),
		wantedPerSecond: float64(b.n) / b.c.interval.Seconds(), readsPerInterval: reads, heapMiB: heap}
	for j := range b.gaps {
		if b.writtenAt[j].Equal(start) {
			s.never++
		}
		s.longest = append(s.longest, max(b.gaps[j], end.Sub(b.writtenAt[j])))
	}
	return s
}

// wrote records a status write of job j while sustaining.
func (b *bench) wrote(name string, now time.Time) {
	j, err := strconv.Atoi(strings.TrimPrefix(name, "job-"))
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil || j >= b.n || !b.sustaining {
		return
	}
	b.gaps[j] = max(b.gaps[j], now.Sub(b.writtenAt[j]))
	b.writtenAt[j] = now
}

// churn changes every job's epoch once per interval, at a random moment, for the given intervals.
func (b *bench) churn(from int64, intervals int) {
	for k := int64(0); k < int64(intervals); k++ {
		start := time.Now()
		for j, off := range rand.Perm(b.n) {
			time.Sleep(time.Until(start.Add(time.Duration(off) * b.c.interval / time.Duration(b.n))))
			b.eps[j].epoch.Store(from + k)
		}
		time.Sleep(time.Until(start.Add(b.c.interval)))
	}
}

func (b *bench) requests() int64 {
	var n int64
	for _, ep := range b.eps {
		n += ep.requests.Load()
	}
	return n
}

func (b *bench) roundOf(r int64) error {
	b.mu.Lock()
	b.round = r
	b.changed, b.gaugeAt, b.statusAt = make([]time.Time, b.n), make([]time.Time, b.n), make([]time.Time, b.n)
	b.mu.Unlock()
	start := time.Now()
	order := rand.Perm(b.n)
	offsets := make([]time.Duration, b.n)
	for i := range offsets {
		offsets[i] = time.Duration(rand.Int64N(int64(b.c.interval)))
	}
	sort.Slice(order, func(x, y int) bool { return offsets[order[x]] < offsets[order[y]] })
	for _, j := range order {
		time.Sleep(time.Until(start.Add(offsets[j])))
		b.mu.Lock()
		b.changed[j] = time.Now()
		b.eps[j].epoch.Store(r)
		b.mu.Unlock()
	}
	deadline := time.Now().Add(4*b.c.interval + 30*time.Second)
	if q := orDefaultQPS(b.c.statusQPS); q > 0 {
		deadline = deadline.Add(time.Duration(float64(b.n) / q * float64(time.Second))) // every job's turn in the budget
	}
	for time.Now().Before(deadline) {
		b.mu.Lock()
		done := 0
		for j := 0; j < b.n; j++ {
			if !b.gaugeAt[j].IsZero() && !b.statusAt[j].IsZero() {
				done++
			}
		}
		b.mu.Unlock()
		if done == b.n {
			b.collect()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("round %d: not every job's change was seen in time", r)
}

func (b *bench) collect() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for j := 0; j < b.n; j++ {
		b.gauge = append(b.gauge, b.gaugeAt[j].Sub(b.changed[j]))
		b.status = append(b.status, b.statusAt[j].Sub(b.changed[j]))
	}
}

// see records the first time job j shows the current round's epoch.
func (b *bench) see(at []time.Time, name string, epoch int64, now time.Time) {
	j, err := strconv.Atoi(strings.TrimPrefix(name, "job-"))
	if err != nil || j >= b.n {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if at == nil || epoch < b.round || !at[j].IsZero() || b.changed[j].IsZero() {
		return
	}
	at[j] = now
}

func (b *bench) watchStatus(w watch.Interface) {
	for ev := range w.ResultChan() {
		tj, ok := ev.Object.(*mlv1.TrainingJob)
		if !ok || ev.Type != watch.Modified {
			continue
		}
		now := time.Now()
		if b.measuring.Load() {
			b.modified.Add(1)
		}
		b.wrote(tj.Name, now)
		b.mu.Lock()
		at := b.statusAt
		b.mu.Unlock()
		b.see(at, tj.Name, int64(tj.Status.CurrentEpoch), now)
	}
}

// pollGauges reads the manager's /metrics as Prometheus would, every 250 ms (often enough to time the
// gauges, seldom enough not to load the manager, which shares 2 cores with everything else here).
func (b *bench) pollGauges(ctx context.Context) {
	hc := http.Client{Timeout: 5 * time.Second}
	for ctx.Err() == nil {
		resp, err := hc.Get("http://" + b.metrics + "/metrics")
		if err == nil {
			now := time.Now()
			parser := expfmt.NewTextParser(model.UTF8Validation)
			families, perr := parser.TextToMetricFamilies(resp.Body)
			resp.Body.Close()
			if f, ok := families["trainingjob_current_epoch"]; ok && perr == nil {
				b.mu.Lock()
				at := b.gaugeAt
				b.mu.Unlock()
				for _, m := range f.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "training_job" {
							b.see(at, l.GetValue(), int64(m.GetGauge().GetValue()), now)
						}
					}
				}
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
}
