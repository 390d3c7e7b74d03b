package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/cluster"
	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
)

// run is one measurement: a fresh control plane (kube-apiserver + etcd with an audit log, and
// kube-controller-manager's Job and garbage collector controllers), the played kubelet and one operator.
type run struct {
	c     config
	dir   string
	cl    *cluster.Cluster
	k     client.Client
	cs    kubernetes.Interface
	dyn   dynamic.Interface
	kl    *kubelet
	procs []*cluster.Process
	// stopKubelet stops the played kubelet.
	stopKubelet context.CancelFunc
	// finished holds when the operator first called each job finished.
	mu       sync.Mutex
	finished map[string]time.Time
}

// startRun starts the control plane and the played kubelet; ours says whether our CRD is installed.
// kcmQPS, when positive, is kube-controller-manager's client rate (burst twice that); 0 keeps its default.
func startRun(ctx context.Context, c config, jobOf func(*corev1.Pod) string, stopDelay time.Duration, ours bool, kcmQPS int) (*run, error) {
	dir, err := os.MkdirTemp("", "peer-bench-")
	if err != nil {
		return nil, err
	}
	r := &run{c: c, dir: dir, finished: map[string]time.Time{}}
	opts := cluster.Options{Assets: c.assets, Dir: dir, AuditLog: filepath.Join(dir, "audit.log"), Bare: !ours}
	if r.cl, err = cluster.Start(opts); err != nil {
		return r, err
	}
	if r.k, err = client.New(r.cl.Config, client.Options{Scheme: controllers.NewScheme()}); err != nil {
		return r, err
	}
	if r.cs, err = kubernetes.NewForConfig(r.cl.Config); err != nil {
		return r, err
	}
	if r.dyn, err = dynamic.NewForConfig(r.cl.Config); err != nil {
		return r, err
	}
	var rate []string
	if kcmQPS > 0 {
		rate = []string{fmt.Sprintf("--kube-api-qps=%d", kcmQPS), fmt.Sprintf("--kube-api-burst=%d", 2*kcmQPS)}
	}
	if _, err := r.cl.StartControllerManager([]string{"job", "garbagecollector"}, rate...); err != nil {
		return r, err
	}
	for _, name := range []string{ns, ceilingNS} {
		if err := namespace(ctx, r, name); err != nil {
			return r, err
		}
	}
	kctx, cancel := context.WithCancel(ctx)
	r.stopKubelet = cancel
	r.kl, err = startKubelet(kctx, r.cs, stopDelay, jobOf)
	return r, err
}

// stop stops the operator and the control plane and removes the run's directory (its logs are copied to
// the output directory first, when there is one).
func (r *run) stop(label string) {
	if r.stopKubelet != nil {
		r.stopKubelet() // its played supervisors' port too
	}
	for _, p := range r.procs {
		p.Stop()
	}
	if r.cl != nil {
		_ = r.cl.Stop()
	}
	if r.c.out != "" {
		logs, _ := filepath.Glob(filepath.Join(r.dir, "*.log"))
		for _, l := range logs {
			if data, err := os.ReadFile(l); err == nil && filepath.Base(l) != "audit.log" {
				_ = os.WriteFile(filepath.Join(r.c.out, label+"-"+filepath.Base(l)), data, 0o644)
			}
		}
	}
	_ = os.RemoveAll(r.dir)
}

// ceilingNS holds the ceiling's objects, apart from the jobs'.
const ceilingNS = "ceiling"

// ceiling returns this API server's bare-write ceiling: a plain client creating the Job (suspended: it makes no
// pods), Service and ConfigMap our operator builds for each of n jobs of 2 workers, clients at a time.
func (r *run) ceiling(ctx context.Context, n int) (time.Duration, error) {
	start := time.Now()
	err := benchkit.Parallel(n, clients, func(i int) error {
		tj := &mlv1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: jobName(i), Namespace: ceilingNS},
			Spec: mlv1.TrainingJobSpec{Model: "m", Dataset: "d", NumWorkers: 2, GPUsPerWorker: ptr.To[int32](0), Image: "bench:1",
				Command: []string{"train"}}}
		tj.Default()
		cm, err := builders.ConfigMap(tj, builders.Options{})
		if err != nil {
			return err
		}
		job := builders.Job(tj, builders.Options{})
		job.Spec.Suspend = ptr.To(true)
		for _, o := range []client.Object{job, builders.Service(tj), cm} {
			o.SetLabels(nil)
			if err := r.k.Create(ctx, o); err != nil {
				return err
			}
		}
		return nil
	})
	return time.Since(start), err
}

// watchFinished records when the operator first calls each of its jobs finished.
func (r *run) watchFinished(ctx context.Context, op *operator) error {
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(r.dyn, 0, ns, nil)
	inf := f.ForResource(op.gvr).Informer()
	see := func(o any) {
		u, ok := o.(*unstructured.Unstructured)
		if !ok || !op.finished(u) {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, seen := r.finished[u.GetName()]; !seen {
			r.finished[u.GetName()] = time.Now()
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, o any) { see(o) }}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("the %s informer did not sync", op.gvr.Resource)
	}
	return nil
}

func (r *run) finishedAt(job string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.finished[job]
	return t, ok
}

// submit creates a job under the operator.
func (r *run) submit(ctx context.Context, op *operator, name string, workers int) error {
	_, err := r.dyn.Resource(op.gvr).Namespace(ns).Create(ctx, op.object(name, workers), metav1.CreateOptions{})
	return err
}

// waitFor polls cond every 10 ms until it holds, for at most timeout.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(10 * time.Millisecond) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s", what, timeout)
		}
	}
	return nil
}

// gang counts the job's pods that run now (reported Running, not ended, not being deleted), and how many
// of them were added after since.
func (r *run) gang(job string, since time.Time) (running, newer int) {
	for _, p := range r.kl.records(job) {
		if !p.running.IsZero() && !p.ended && !p.deleting && p.gone.IsZero() {
			running++
			if p.added.After(since) {
				newer++
			}
		}
	}
	return running, newer
}

// created returns when the job's workers-th pod was first seen (zero while fewer were).
func (r *run) created(job string, workers int) time.Time {
	var at []time.Time
	for _, p := range r.kl.records(job) {
		at = append(at, p.added)
	}
	if len(at) < workers {
		return time.Time{}
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	return at[workers-1]
}

// finishJob reports every running pod of the job Succeeded.
func (r *run) finishJob(ctx context.Context, job string) error {
	for _, p := range r.kl.records(job) {
		if !p.running.IsZero() && !p.ended && !p.deleting && p.gone.IsZero() {
			if err := r.kl.end(ctx, p.pod, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// cpuAndRSS returns the operator's processes' CPU time and peak resident set, summed.
func (r *run) cpuAndRSS() (time.Duration, float64) {
	var cpu time.Duration
	var rss float64
	for _, p := range r.procs {
		cpu += benchkit.ProcCPU(p.Pid())
		rss += benchkit.PeakRSS(p.Pid())
	}
	return cpu, rss
}

func jobName(i int) string { return fmt.Sprintf("job-%05d", i) }
