package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/deploy"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/images"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/realnode"
)

type upFlags struct {
	files        []string
	dir, assets  string
	nodes, gpus  int
	gpuResource  string
	path         string
	metricsAddr  string
	metricsHTTP  bool
	progress     time.Duration
	logLevel     string
	ckptInterval time.Duration
	exitWhenDone bool
	keepData     bool
	// runtime is where pods run: process (process nodes) or containerd (real nodes).
	runtime    string
	realNodes  int
	nodeAssets string
	rootfs     string
	// kueue runs the Kueue manager from kueueAssets (hack/kueue.sh prints it).
	kueue       bool
	kueueAssets string
	// multiKueue, above 0, runs a MultiKueue manager cluster and that many worker clusters.
	multiKueue int
}

func parseUp(args []string) (upFlags, error) {
	f := upFlags{}
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	fs.Func("f", "a YAML file of objects to create (repeatable)", func(s string) error { f.files = append(f.files, s); return nil })
	fs.StringVar(&f.dir, "state-dir", defaultStateDir(), "directory of the kubeconfig, logs and node data")
	fs.StringVar(&f.assets, "assets", os.Getenv("KUBEBUILDER_ASSETS"),
		"directory of etcd, kube-apiserver, kube-controller-manager and kube-scheduler (hack/testbin.sh prints it)")
	fs.IntVar(&f.nodes, "nodes", 1, "number of process nodes")
	fs.IntVar(&f.gpus, "gpus", 0, "GPUs each node advertises when the host has no NVIDIA GPU")
	fs.StringVar(&f.gpuResource, "gpu-resource-name", "nvidia.com/gpu",
		"extended resource the nodes advertise their GPUs as, and the operator's default for gpusPerWorker "+
			"(amd.com/gpu, nvidia.com/mig-1g.10gb, ...)")
	fs.StringVar(&f.path, "path", "bin", "colon-separated directories searched first for pod commands")
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", "0",
		"address of the operator's metrics endpoint (HTTPS, for a token allowed to get /metrics, as in a cluster); 0 disables it")
	fs.BoolVar(&f.metricsHTTP, "metrics-insecure-http", false,
		"serve the operator's metrics over plain HTTP to anyone who reaches the port")
	fs.DurationVar(&f.progress, "progress-interval", 2*time.Second, "how often the operator reads rank 0's progress")
	fs.StringVar(&f.logLevel, "log-level", "info", "the operator's --zap-log-level: info, debug, or a number (1 logs each decision of a job)")
	fs.DurationVar(&f.ckptInterval, "checkpoint-sync-interval", 2*time.Second, "how often the checkpoint agent rotates and reports")
	fs.BoolVar(&f.exitWhenDone, "exit-when-done", false, "stop everything once every applied TrainingJob is Completed or Failed")
	fs.BoolVar(&f.keepData, "keep-data", false,
		"keep the claim directories of an earlier run (by default they are removed, since the earlier cluster is gone)")
	fs.StringVar(&f.runtime, "nodes-runtime", "process",
		"where pods run: process (process nodes, no containers) or containerd "+
			"(real nodes: kubelet, containerd, runc, cluster DNS, images built from this repository; root only)")
	fs.IntVar(&f.realNodes, "real-nodes", 2, "number of real nodes with --nodes-runtime containerd")
	fs.StringVar(&f.nodeAssets, "node-assets", os.Getenv("NODE_ASSETS"),
		"directory of kubelet and coredns (hack/node.sh prints it), for --nodes-runtime containerd")
	fs.BoolVar(&f.kueue, "kueue", false,
		"also run Kueue (its CRDs and manager, TrainingJob as an external framework) so that queued TrainingJobs are admitted by it; "+
			"docs/kueue.md")
	fs.IntVar(&f.multiKueue, "multikueue-workers", 0,
		"with --kueue: run a MultiKueue manager cluster and this many worker clusters (each its own control plane, "+
			"process node, Kueue and operator), queue lq in namespace default on all; files are applied to the manager")
	fs.StringVar(&f.kueueAssets, "kueue-assets", os.Getenv("KUEUE_ASSETS"),
		"directory of the Kueue manager and its CRDs (hack/kueue.sh prints it), for --kueue")
	fs.StringVar(&f.rootfs, "runner-rootfs", os.Getenv("RUNNER_ROOTFS"),
		"Debian root filesystem tarball (hack/rootfs.sh prints it): with --nodes-runtime containerd, "+
			"also build the default runner's image, so a TrainingJob without image and command runs")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	switch {
	case f.runtime == "process":
		f.realNodes = 0
	case f.runtime != "containerd":
		return f, fmt.Errorf("--nodes-runtime %q: want process or containerd", f.runtime)
	case f.nodeAssets == "":
		return f, fmt.Errorf("--node-assets (or NODE_ASSETS) is required with --nodes-runtime containerd: " +
			"run `make demo NODES_RUNTIME=containerd`, or pass the directory hack/node.sh prints")
	}
	if f.assets == "" {
		return f, fmt.Errorf("--assets (or KUBEBUILDER_ASSETS) is required: run `make demo`, or pass the directory hack/testbin.sh prints")
	}
	if f.multiKueue > 0 && (!f.kueue || f.realNodes > 0) {
		return f, fmt.Errorf("--multikueue-workers needs --kueue and process nodes")
	}
	if f.kueue && f.kueueAssets == "" {
		return f, fmt.Errorf("--kueue-assets (or KUEUE_ASSETS) is required with --kueue: " +
			"run `make up KUEUE=1`, or pass the directory hack/kueue.sh prints")
	}
	return f, nil
}

// up runs the local stack until ctx is done (Ctrl-C) or, with --exit-when-done, until the applied
// TrainingJobs finish; it returns an error when one of them Failed.
func up(ctx context.Context, out io.Writer, args []string) error {
	f, err := parseUp(args)
	if err != nil {
		return err
	}
	objs, err := readFiles(f.files)
	if err != nil {
		return err
	}
	if !f.keepData {
		if err := local.ResetData(f.dir); err != nil {
			return err
		}
	}
	logFile, err := openLog(f.dir)
	if err != nil {
		return err
	}
	defer func() { _ = logFile.Close() }() // the log of this run; nothing to do about a failed close
	begin := time.Now()
	wd, _ := os.Getwd()
	log := zap.New(zap.WriteTo(logFile), zap.Level(zapcore.InfoLevel))
	ctrl.SetLogger(log)
	opts := local.Options{
		Assets: f.assets, Dir: f.dir, Nodes: f.nodes, GPUs: f.gpus, GPUResource: corev1.ResourceName(f.gpuResource),
		Path: absPaths(f.path), WorkDir: wd,
		MetricsAddr: f.metricsAddr, MetricsInsecureHTTP: f.metricsHTTP,
		ProgressInterval: f.progress, CheckpointInterval: f.ckptInterval, Log: log, LogLevel: f.logLevel,
		RealNodes: f.realNodes, NodeAssets: f.nodeAssets,
	}
	if f.kueue {
		opts.Kueue = f.kueueAssets
	}
	if f.realNodes > 0 {
		fmt.Fprintln(out, "building the images (operator, example trainer, pause; the runner with --runner-rootfs) "+
			"from this repository, once per content")
		if opts.Images, err = images.Build(wd, images.CacheDir(), f.rootfs); err != nil {
			return err
		}
	}
	if f.multiKueue > 0 {
		return upMultiKueue(ctx, out, f, opts, objs, begin)
	}
	s, err := local.Up(ctx, opts)
	if err != nil {
		return err
	}
	nodes := fmt.Sprintf("%d process node(s)", f.nodes)
	if f.realNodes > 0 {
		nodes = fmt.Sprintf("%d real node(s) (kubelet, containerd, runc; cluster DNS at %s)", f.realNodes, realnode.ClusterDNS)
	}
	fmt.Fprintf(out, "local control plane, %s and the operator are up in %.1fs\n", nodes, time.Since(begin).Seconds())
	fmt.Fprintf(out, "  export KUBECONFIG=%s   # then: kubectl get tj -A -w\n", s.Cluster.Kubeconfig)
	fmt.Fprintf(out, "  logs: %s   pod logs: trainingjob-local logs <pod> -n <namespace>\n", logFile.Name())
	err = s.Apply(ctx, objs)
	if err == nil {
		err = watch(ctx, out, s.Cluster.Config, trainingJobs(objs), f.exitWhenDone)
	}
	fmt.Fprintln(out, "stopping: operator, Kueue (with --kueue), nodes and their pods, "+
		"kube-scheduler, kube-controller-manager, kube-apiserver, etcd")
	if derr := s.Down(); derr != nil && err == nil {
		err = derr
	}
	return err
}

func readFiles(files []string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, file := range files {
		o, err := deploy.ReadFile(file)
		if err != nil {
			return nil, err
		}
		objs = append(objs, o...)
	}
	return objs, nil
}

func openLog(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return os.Create(filepath.Join(dir, "operator.log"))
}

func absPaths(list string) []string {
	var out []string
	for _, p := range filepath.SplitList(list) {
		if a, err := filepath.Abs(p); err == nil && p != "" {
			out = append(out, a)
		}
	}
	return out
}

func trainingJobs(objs []*unstructured.Unstructured) []client.ObjectKey {
	var keys []client.ObjectKey
	for _, o := range objs {
		if o.GetKind() == "TrainingJob" {
			keys = append(keys, client.ObjectKeyFromObject(o))
		}
	}
	return keys
}

// watch prints each TrainingJob's state, workers and message on every status change it observes.
func watch(ctx context.Context, out io.Writer, cfg *rest.Config, keys []client.ObjectKey, exitWhenDone bool) error {
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: controllers.NewScheme()})
	if err != nil {
		return err
	}
	wanted := map[client.ObjectKey]bool{}
	for _, k := range keys {
		wanted[k] = true
	}
	last := map[client.ObjectKey]*mlv1.TrainingJob{}
	// Once every job is finished, the StatusController settles its progress in a write of its own right
	// after: the watch waits for it, briefly.
	var settle <-chan time.Time
	for ctx.Err() == nil {
		w, err := c.Watch(ctx, &mlv1.TrainingJobList{})
		if err != nil {
			return fmt.Errorf("watching TrainingJobs: %w", err)
		}
		for open := true; open; {
			var ev apiwatch.Event
			select {
			case ev, open = <-w.ResultChan():
			case <-settle:
				w.Stop()
				return finishedErr(last)
			}
			tj, ok := ev.Object.(*mlv1.TrainingJob)
			if !ok || !wanted[client.ObjectKeyFromObject(tj)] || tj.Status.State == "" {
				continue // not ours, or the operator has not seen it yet
			}
			if prev := last[client.ObjectKeyFromObject(tj)]; prev == nil || describe(prev) != describe(tj) {
				fmt.Fprintf(out, "%s  %s\n", time.Now().Format("15:04:05"), describe(tj))
			}
			last[client.ObjectKeyFromObject(tj)] = tj
			if done := exitWhenDone && len(last) == len(keys) && allFinished(last); done && allSettled(last) {
				w.Stop()
				return finishedErr(last)
			} else if done && settle == nil {
				settle = time.After(3 * time.Second)
			}
		}
	}
	return nil
}

// allSettled reports whether every finished job's progress is final (no ETA; 100% when its workers all succeeded).
func allSettled(tjs map[client.ObjectKey]*mlv1.TrainingJob) bool {
	for _, tj := range tjs {
		settled := *tj.Status.DeepCopy()
		derive.SettleProgress(&settled, metav1.Now())
		if settled.ETA != tj.Status.ETA || settled.Progress != tj.Status.Progress {
			return false
		}
	}
	return true
}

func allFinished(tjs map[client.ObjectKey]*mlv1.TrainingJob) bool {
	for _, tj := range tjs {
		if tj.Status.State != mlv1.StateCompleted && tj.Status.State != mlv1.StateFailed {
			return false
		}
	}
	return true
}

func finishedErr(tjs map[client.ObjectKey]*mlv1.TrainingJob) error {
	var failed []string
	for k, tj := range tjs {
		if tj.Status.State == mlv1.StateFailed {
			failed = append(failed, k.String())
		}
	}
	if len(failed) > 0 {
		sort.Strings(failed)
		return fmt.Errorf("TrainingJob %s failed", strings.Join(failed, ", "))
	}
	return nil
}

func describe(tj *mlv1.TrainingJob) string {
	st := tj.Status
	s := fmt.Sprintf("%-24s %-12s workers %d/%d ready", tj.Namespace+"/"+tj.Name, st.State, st.Workers.Ready, tj.Spec.NumWorkers)
	if st.Progress != "" {
		s += "  progress " + st.Progress
	}
	if c := st.Checkpoint; c != nil && c.Count > 0 {
		s += fmt.Sprintf("  checkpoints %d (latest epoch %d)", c.Count, c.LatestEpoch)
	}
	if st.FailureReason != "" {
		return s + "  " + st.FailureReason
	}
	if c := meta.FindStatusCondition(st.Conditions, mlv1.ConditionRunning); c != nil && c.Message != "" {
		s += "  " + c.Message
	}
	return s
}

// upMultiKueue runs a MultiKueue manager and f.multiKueue worker clusters until ctx is done, with queue
// lq in namespace default on each (each worker's quota 4 CPUs), applies objs to the manager and watches them there.
func upMultiKueue(ctx context.Context, out io.Writer, f upFlags, opts local.Options, objs []*unstructured.Unstructured,
	begin time.Time) error {
	for _, dir := range opts.Path {
		if p := filepath.Join(dir, "manager"); opts.ManagerBinary == "" {
			if _, err := os.Stat(p); err == nil {
				opts.ManagerBinary = p
			}
		}
	}
	if opts.ManagerBinary == "" {
		return fmt.Errorf("--multikueue-workers runs each operator as the manager binary, not found in --path %v: "+
			"run `make build` first", opts.Path)
	}
	m, err := local.UpMultiKueue(ctx, opts, f.multiKueue, 30*time.Second)
	if err != nil {
		return err
	}
	quotas := map[string]resource.Quantity{}
	for _, w := range m.WorkerNames {
		quotas[w] = resource.MustParse("4")
	}
	err = m.Queue(ctx, "default", "cq", "lq", quotas)
	kc := ""
	if err == nil {
		kc, err = m.WriteKubeconfig()
	}
	if err == nil {
		fmt.Fprintf(out, "MultiKueue: a manager and %d worker clusters (%v) are up in %.1fs; queue lq in namespace default\n",
			f.multiKueue, m.WorkerNames, time.Since(begin).Seconds())
		fmt.Fprintf(out, "  export KUBECONFIG=%s   # contexts manager (current), %v: kubectl --context w1 get tj\n", kc, m.WorkerNames)
		fmt.Fprintf(out, "  logs: %s/<cluster>/operator-1.log, kueue.log\n", f.dir)
		err = m.Manager.Apply(ctx, objs)
	}
	if err == nil {
		err = watch(ctx, out, m.Manager.Cluster.Config, trainingJobs(objs), f.exitWhenDone)
	}
	fmt.Fprintln(out, "stopping every cluster")
	if derr := m.Down(); derr != nil && err == nil {
		err = derr
	}
	return err
}
