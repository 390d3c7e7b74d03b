package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/cluster"
	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
)

const (
	ns = "bench"
	// operatorUser is the manager's identity: the audit log's writes by it are the operator's.
	operatorUser = "trainingjob-operator-bench"
	// clients is how many requests the bench sends at once (submitting, playing the kubelet).
	clients = 32
)

// result is one measurement; durations in seconds, per-job figures divided by the job count.
type result struct {
	Jobs            int                `json:"jobs"`
	Run             int                `json:"run"`
	CeilingS        float64            `json:"ceilingSeconds"`
	SubmitS         float64            `json:"submitSeconds"`
	WiredS          float64            `json:"wiredSeconds"`
	Ratio           float64            `json:"wiredToCeiling"`
	SubmitToJob     [2]float64         `json:"submitToJobP50P99Seconds"`
	IdleSubmitToJob [2]float64         `json:"idleSubmitToJobP50P99Seconds"`
	LifecycleS      float64            `json:"lifecycleSeconds"`
	JobsPerS        float64            `json:"jobsPerSecond"`
	WritesByKind    map[string]float64 `json:"writesPerLifecycleByKind"`
	Writes          float64            `json:"writesPerLifecycle"`
	StatusWrites    float64            `json:"statusWritesPerLifecycle"`
	Events          float64            `json:"eventsPerLifecycle"`
	ClientWrites    float64            `json:"clientMetricWritesPerLifecycle"`
	Conflicts       int                `json:"conflicts"`
	ErrorsLogged    int                `json:"errorsLogged"`
	IdleWrites      int                `json:"idleWrites"`
	// RunningIdleWrites are the operator's writes while every job ran and nothing changed, per job and
	// minute (-running-idle long).
	RunningIdleWrites float64 `json:"runningIdleWritesPerJobMinute"`
	HeapKiBPerJob     float64 `json:"heapKiBPerJob"`
	RSSKiBPerJob      float64 `json:"rssKiBPerJob"`
	ColdStartS        float64 `json:"coldStartSeconds"`
	ColdStartWrites   int     `json:"coldStartWrites"`
}

func (r result) row() string {
	return fmt.Sprintf("| %d | %d | %.2f | %.2f | %.2f | %.2fx | %.3f / %.3f | %.3f / %.3f | "+
		"%.1f | %.0f | %.1f | %.1f | %.1f | %d | %d | %d | %.3f | %.1f | %.1f | %.2f | %d |",
		r.Jobs, r.Run, r.CeilingS, r.SubmitS, r.WiredS, r.Ratio, r.SubmitToJob[0], r.SubmitToJob[1], r.IdleSubmitToJob[0], r.IdleSubmitToJob[1],
		r.LifecycleS, r.JobsPerS, r.Writes, r.StatusWrites, r.Events, r.Conflicts, r.ErrorsLogged, r.IdleWrites, r.RunningIdleWrites,
		r.HeapKiBPerJob, r.RSSKiBPerJob, r.ColdStartS, r.ColdStartWrites)
}

// bench is one measurement: a control plane, the manager, the jobs and what was seen of them.
type bench struct {
	c       config
	n       int
	dir     string
	cl      *cluster.Cluster
	k       client.WithWatch
	mgr     *cluster.Process
	metrics string
	pprof   string
	kc      string
	runs    int
	seen    *seen
}

func measure(ctx context.Context, c config, n, run int) (result, error) {
	dir, err := os.MkdirTemp("", "scale-bench-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	cl, err := cluster.Start(cluster.Options{Assets: c.assets, Dir: dir, AuditLog: filepath.Join(dir, "audit.log")})
	if err != nil {
		return result{}, err
	}
	defer cl.Stop()
	b := &bench{c: c, n: n, dir: dir, cl: cl}
	if b.k, err = client.NewWithWatch(cl.Config, client.Options{Scheme: controllers.NewScheme()}); err != nil {
		return result{}, err
	}
	res := result{Jobs: n, Run: run}
	if err := b.prepare(ctx, &res); err != nil {
		return res, err
	}
	defer func() {
		b.mgr.Stop()
		if c.out != "" { // the first manager's log, for what it did during the lifecycle
			if data, err := os.ReadFile(filepath.Join(dir, "manager-1.log")); err == nil {
				_ = os.WriteFile(filepath.Join(c.out, fmt.Sprintf("manager-%d-%d.log", n, run)), data, 0o644)
			}
		}
	}()
	return res, b.lifecycle(ctx, &res)
}

// warmUp is how long a fresh kube-apiserver is left to finish starting before anything is measured: in
// its first seconds it serves about 3x slower (1,000 TrainingJob creates took 2.9-3.0 s right after the
// start and 1.05 s six seconds later, on the 2-core machine), which would flatter the ratio to a ceiling
// measured first.
const warmUp = 10 * time.Second

// prepare measures the ceiling, once the API server has warmed up, and starts the manager.
func (b *bench) prepare(ctx context.Context, res *result) error {
	for _, name := range []string{ns, ceilingNS} {
		if err := b.k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			return err
		}
	}
	time.Sleep(warmUp)
	d, err := b.ceiling(ctx)
	if err != nil {
		return fmt.Errorf("ceiling: %w", err)
	}
	res.CeilingS = d.Seconds()
	if b.kc, err = b.cl.UserKubeconfig("operator.kubeconfig", operatorUser, "system:masters"); err != nil {
		return err
	}
	return b.startManager(ctx)
}

// startManager starts (again) the manager and waits until it serves its metrics.
func (b *bench) startManager(ctx context.Context) error {
	b.runs++
	b.metrics, b.pprof = benchkit.FreeAddr(), benchkit.FreeAddr()
	// Plain HTTP: a scrape's TokenReview and SubjectAccessReview would count among the API writes measured.
	args := append([]string{"--kubeconfig=" + b.kc, "--metrics-bind-address=" + b.metrics, "--metrics-insecure-http",
		"--pprof-bind-address=" + b.pprof, "--health-probe-bind-address=0"}, b.c.managerArgs...)
	var err error
	if b.mgr, err = cluster.StartProcess(b.c.manager, args, filepath.Join(b.dir, fmt.Sprintf("manager-%d.log", b.runs))); err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		if _, err := benchkit.Metrics(b.metrics, ""); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the manager served no metrics within a minute")
		}
	}
	return ctx.Err()
}

// lifecycle submits the jobs, plays their workers to the end and measures everything on the way.
func (b *bench) lifecycle(ctx context.Context, res *result) error {
	time.Sleep(2 * time.Second) // caches synced, first GC done
	heap0, rss0, err := b.memory()
	if err != nil {
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	if b.seen, err = watchAll(wctx, b.k); err != nil {
		return err
	}
	profile := b.profileCPU(10 * time.Second)
	start := time.Now()
	if err := benchkit.Parallel(b.n, clients, func(i int) error { return b.submit(ctx, i) }); err != nil {
		return err
	}
	res.SubmitS = time.Since(start).Seconds()
	wired, err := b.seen.wait(5*time.Minute, "wired", func(j *jobSeen) bool { return j.wired() })
	if err != nil {
		return err
	}
	res.WiredS = wired.Sub(start).Seconds()
	res.Ratio = res.WiredS / res.CeilingS
	res.SubmitToJob = b.seen.submitToJob(0, b.n)
	if err := b.startWorkers(ctx); err != nil {
		return err
	}
	// Memory with every job Running, its Job and pod cached, once the manager has nothing left to do
	// (a reading in the middle of the burst counts the objects of reconciles in flight). The pause is not
	// part of the lifecycle's time.
	paused := time.Now()
	if err := b.settle(ctx); err != nil {
		return err
	}
	heap1, rss1, err := b.memory()
	if err != nil {
		return err
	}
	res.HeapKiBPerJob, res.RSSKiBPerJob = (heap1-heap0)/1024/float64(b.n), (rss1-rss0)/1024/float64(b.n)
	if res.RunningIdleWrites, err = b.runningIdle(); err != nil {
		return err
	}
	pause := time.Since(paused)
	if err := benchkit.Parallel(b.n, clients, func(i int) error { return b.finishWorker(ctx, i) }); err != nil {
		return err
	}
	done, err := b.seen.wait(10*time.Minute, "Completed", func(j *jobSeen) bool { return j.state == mlv1.StateCompleted })
	if err != nil {
		return err
	}
	res.LifecycleS = (done.Sub(start) - pause).Seconds()
	res.JobsPerS = float64(b.n) / res.LifecycleS
	<-profile
	return b.afterwards(ctx, res)
}

// runningIdle watches the running jobs, whose figures do not change, for -running-idle, and returns the
// operator's writes meanwhile per job and minute (0 without -running-idle).
func (b *bench) runningIdle() (float64, error) {
	if b.c.runningIdle <= 0 {
		return 0, nil
	}
	from := time.Now()
	time.Sleep(b.c.runningIdle)
	w, err := b.operatorWrites(from, time.Now())
	return float64(w.Total) / float64(b.n) / time.Since(from).Minutes(), err
}

// afterwards counts the lifecycle's writes, watches the idle jobs, restarts the manager cold and times
// single submissions on the idle system.
func (b *bench) afterwards(ctx context.Context, res *result) error {
	time.Sleep(3 * time.Second) // the last writes reach the audit log
	if err := b.countWrites(res); err != nil {
		return err
	}
	idleFrom := time.Now()
	time.Sleep(b.c.idle)
	w, err := b.operatorWrites(idleFrom, time.Now())
	if err != nil {
		return err
	}
	res.IdleWrites = w.Total
	if err := b.coldStart(ctx, res); err != nil {
		return err
	}
	res.IdleSubmitToJob, err = b.idleSubmissions(ctx, 20)
	return err
}

// settle waits until the manager's work queues have been empty for two readings a second apart.
func (b *bench) settle(ctx context.Context) error {
	for empty, deadline := 0, time.Now().Add(2*time.Minute); empty < 2; {
		m, err := benchkit.Metrics(b.metrics, "")
		if err != nil {
			return err
		}
		if empty = empty + 1; benchkit.Sum(m, "workqueue_depth", nil) > 0 {
			empty = 0
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the manager's queues did not empty within 2 minutes")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return nil
}

// memory returns the manager's heap in use (after a collection, forced through pprof) and resident set.
func (b *bench) memory() (heap, rss float64, err error) {
	resp, err := http.Get("http://" + b.pprof + "/debug/pprof/heap?gc=1")
	if err != nil {
		return 0, 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, 0, err
	}
	if b.c.out != "" {
		_ = os.WriteFile(filepath.Join(b.c.out, fmt.Sprintf("heap-%d.pprof", b.n)), body, 0o644)
	}
	m, err := benchkit.Metrics(b.metrics, "")
	if err != nil {
		return 0, 0, err
	}
	return benchkit.Sum(m, "go_memstats_heap_inuse_bytes", nil), benchkit.Sum(m, "process_resident_memory_bytes", nil), nil
}

// profileCPU records the manager's CPU profile for d into the output directory; the channel closes
// when it is written.
func (b *bench) profileCPU(d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if b.c.out == "" {
			return
		}
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", b.pprof, int(d.Seconds())))
		if err != nil {
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		_ = os.WriteFile(filepath.Join(b.c.out, fmt.Sprintf("cpu-%d.pprof", b.n)), body, 0o644)
	}()
	return done
}

func jobName(i int) string { return fmt.Sprintf("job-%05d", i) }

// trainingJob returns the job a user submits: one worker, no GPU and no progress scraping (progress writes are
// measured by tests/performance/progress); checkpoints in an S3 bucket when the run measures them (the bench's
// agent stands in for every rank 0's), none otherwise, so that every status write is the JobController's.
func trainingJob(i int, checkpoints bool) *mlv1.TrainingJob {
	ckpt := &mlv1.CheckpointSpec{Enabled: ptr.To(false)}
	if checkpoints {
		ckpt = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Storage: &mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "bench"}}
	}
	return &mlv1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: jobName(i), Namespace: ns},
		Spec: mlv1.TrainingJobSpec{Model: "m", Dataset: "d", NumWorkers: 1, GPUsPerWorker: ptr.To[int32](0), Image: "bench:1",
			Command:    []string{"train"},
			Checkpoint: ckpt,
			Monitoring: &mlv1.MonitoringSpec{Enabled: ptr.To(false)}},
	}
}

func (b *bench) submit(ctx context.Context, i int) error {
	tj := trainingJob(i, b.c.checkpoints)
	b.seen.submitted(tj.Name, time.Now())
	return b.k.Create(ctx, tj)
}
