// Command multikueue-bench measures TrainingJobs dispatched by Kueue's MultiKueue on the local stack: a
// manager and two worker clusters (package local, UpMultiKueue: each its own control plane, process node,
// the real Kueue manager and the operator as a process of its own). It submits jobs to the manager at a
// steady rate and reports, per job, the time from the manager's create to the worker's pods running, and
// from a state seen on the worker (Running, Completed) to the same state seen on the manager (the status
// MultiKueue mirrors): p50, p99 and max.
//
//	make bench-multikueue   (go run ./tests/performance/multikueue -bin bin -jobs 100)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local"
	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
)

type config struct {
	assets, kueue, bin, out string
	jobs                    int
	every                   time.Duration
}

func main() {
	c := config{}
	flag.StringVar(&c.assets, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "control-plane binaries (hack/testbin.sh prints the directory)")
	flag.StringVar(&c.kueue, "kueue", os.Getenv("KUEUE_ASSETS"), "the Kueue manager and its CRDs (hack/kueue.sh prints the directory)")
	flag.StringVar(&c.bin, "bin", "bin", "where make build put manager, supervisor and trainer")
	flag.IntVar(&c.jobs, "jobs", 100, "jobs submitted")
	flag.DurationVar(&c.every, "every", 400*time.Millisecond, "time between two submissions")
	flag.StringVar(&c.out, "out", "", "write the report here too")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	if err := run(context.Background(), c); err != nil {
		fmt.Fprintln(os.Stderr, "multikueue-bench:", err)
		os.Exit(1)
	}
}

// seen records, per job, when each of its events was first observed.
type seen struct {
	mu sync.Mutex
	at map[string]map[string]time.Time
}

func (s *seen) mark(job, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at[job] == nil {
		s.at[job] = map[string]time.Time{}
	}
	if _, ok := s.at[job][what]; !ok {
		s.at[job][what] = time.Now()
	}
}

func run(ctx context.Context, c config) error {
	bin, err := filepath.Abs(c.bin)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "multikueue-bench-")
	if err != nil {
		return err
	}
	wd, _ := os.Getwd()
	m, err := local.UpMultiKueue(ctx, local.Options{Assets: c.assets, Dir: dir, Nodes: 1, Path: []string{bin}, WorkDir: wd,
		RestartBackoff: time.Second, ProgressInterval: time.Second, Kueue: c.kueue, ManagerBinary: filepath.Join(bin, "manager"),
		Log: logr.Discard()}, 2, 5*time.Minute)
	if err != nil {
		return fmt.Errorf("%w (logs in %s)", err, dir)
	}
	defer func() { _ = m.Down() }()
	const ns = "bench"
	quota := resource.MustParse("2") // 20 jobs of 100m at once on each worker
	if err := m.Queue(ctx, ns, "cq", "lq", map[string]resource.Quantity{"w1": quota, "w2": quota}); err != nil {
		return err
	}
	// Jobs name no managedBy: admission sets it once the QueueController has listed the queue.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		cm := &corev1.ConfigMap{}
		err := m.Manager.Client.Get(ctx, client.ObjectKey{Namespace: controllers.DefaultNamespace, Name: names.MultiKueueQueuesConfigMap}, cm)
		if _, listed := cm.Data[ns+".lq"]; err == nil && listed {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("queue lq not listed in %s within a minute: %v", names.MultiKueueQueuesConfigMap, err)
		}
	}
	s := &seen{at: map[string]map[string]time.Time{}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, st := range m.Clusters() {
		where := "manager"
		if i > 0 {
			where = "worker"
		}
		if err := watchJobs(ctx, st, ns, where, s); err != nil {
			return err
		}
		if i > 0 {
			if err := watchPods(ctx, st, ns, s); err != nil {
				return err
			}
		}
	}
	begin := time.Now()
	for i := range c.jobs {
		name := fmt.Sprintf("j%03d", i)
		s.mark(name, "created")
		if err := m.Manager.Client.Create(ctx, job(ns, name)); err != nil {
			return fmt.Errorf("creating %s: %w", name, err)
		}
		time.Sleep(c.every)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for done := 0; done < c.jobs; time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d jobs Completed on the manager after 10 minutes (logs in %s)", done, c.jobs, dir)
		}
		s.mu.Lock()
		done = 0
		for _, ev := range s.at {
			if _, ok := ev["manager "+string(mlv1.StateCompleted)]; ok {
				done++
			}
		}
		s.mu.Unlock()
	}
	md := report(c, s, time.Since(begin))
	_ = os.RemoveAll(dir)
	return benchkit.WriteReport(c.out, s.at, md)
}

// job is a 1-worker job of the example trainer, 100m of CPU, 4 epochs of 300 ms.
func job(ns, name string) *mlv1.TrainingJob {
	return &mlv1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: mlv1.TrainingJobSpec{
		NumWorkers: 1, GPUsPerWorker: ptr.To[int32](0), Image: "example-trainer:local", Command: []string{"trainer"},
		Args:            []string{"--samples=512", "--features=4", "--epoch-delay=300ms"},
		Hyperparameters: &mlv1.Hyperparameters{Epochs: ptr.To[int32](4)},
		Scheduling:      &mlv1.SchedulingSpec{QueueName: "lq"},
		Resources:       &mlv1.Resources{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
	}}
}

// watchJobs marks "<where> <state>" for every state a job of ns is seen in on the cluster.
func watchJobs(ctx context.Context, st *local.Stack, ns, where string, s *seen) error {
	return watchEach(ctx, st, ns, &mlv1.TrainingJobList{}, func(obj any) {
		if tj, ok := obj.(*mlv1.TrainingJob); ok && tj.Status.State != "" {
			s.mark(tj.Name, where+" "+string(tj.Status.State))
		}
	})
}

// watchPods marks "pods running" once every worker pod of a job runs on a worker cluster.
func watchPods(ctx context.Context, st *local.Stack, ns string, s *seen) error {
	return watchEach(ctx, st, ns, &corev1.PodList{}, func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.Status.Phase == corev1.PodRunning {
			s.mark(p.Labels[names.NameLabel], "pods running")
		}
	})
}

func watchEach(ctx context.Context, st *local.Stack, ns string, list client.ObjectList, f func(any)) error {
	c, err := client.NewWithWatch(st.Cluster.Config, client.Options{Scheme: controllers.NewScheme()})
	if err != nil {
		return err
	}
	w, err := c.Watch(ctx, list, client.InNamespace(ns))
	if err != nil {
		return err
	}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				f(ev.Object)
			}
		}
	}()
	return nil
}

// report writes the latencies' p50, p99 and max.
func report(c config, s *seen, took time.Duration) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	type pair struct{ what, from, to string }
	pairs := []pair{
		{"manager create → worker pods running", "created", "pods running"},
		{"worker Running → manager Running", "worker " + string(mlv1.StateRunning), "manager " + string(mlv1.StateRunning)},
		{"worker Completed → manager Completed", "worker " + string(mlv1.StateCompleted), "manager " + string(mlv1.StateCompleted)},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# MultiKueue benchmark\n\n%d jobs submitted to the manager every %s, 1 worker each, over two worker clusters "+
		"(quota 20 jobs each); %s in all\n\n| latency | jobs | p50 | p99 | max |\n|---|---|---|---|---|\n",
		c.jobs, c.every, took.Round(time.Second))
	var missing []string
	for _, p := range pairs {
		var d []time.Duration
		for job, ev := range s.at {
			from, ok1 := ev[p.from]
			to, ok2 := ev[p.to]
			if ok1 && ok2 {
				d = append(d, max(0, to.Sub(from)))
			} else if !ok2 || !ok1 {
				missing = append(missing, job+": "+p.what)
			}
		}
		q := benchkit.Quantiles(d)
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s |\n", p.what, len(d), q[0], q[1], q[2])
	}
	if len(missing) > 0 {
		fmt.Fprintf(&b, "\nnot seen (a state too short to be observed, or lost): %d, for example %s\n", len(missing), missing[0])
	}
	return b.String()
}
