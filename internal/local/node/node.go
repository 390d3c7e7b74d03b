// Package node is a process node: a stand-in for a kubelet that registers Nodes with an API server and
// runs the pods bound to them as local processes. With the local control plane (package cluster) it runs
// a TrainingJob on one machine without containers; see "Running locally" in docs/development.md for what it
// does and does not do.
package node

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Options configure a process node.
type Options struct {
	// Name is the Node's name.
	Name string
	// DataRoot holds pod directories, logs and claim directories. Several nodes may share it: claims are
	// then shared like network storage.
	DataRoot string
	// GPUs is the GPU capacity to advertise when the host has no NVIDIA devices.
	GPUs int
	// GPUResource is the extended resource the GPUs are advertised as (default nvidia.com/gpu; e.g.
	// amd.com/gpu or a MIG slice name).
	GPUResource corev1.ResourceName
	// Path lists directories searched for commands before the container's PATH.
	Path []string
	// WorkDir is the working directory of containers that set no workingDir.
	WorkDir string
	// RestartBackoff is the first delay before restarting a failed container (the kubelet's is 10 s);
	// it doubles up to 5 minutes.
	RestartBackoff time.Duration
	// HeartbeatInterval is how often the Node's status and lease are renewed.
	HeartbeatInterval time.Duration
	// Env is added to every container's environment, below the container's own env: what a cluster's
	// nodes provide to every pod (a metadata server's identity, an emulator's address such as
	// STORAGE_EMULATOR_HOST in tests).
	Env map[string]string
	// Provision makes the node provision a hostPath PersistentVolume (its claim directory) for every
	// unbound PersistentVolumeClaim. One node of a machine needs it.
	Provision bool
	// Unschedulable registers the Node cordoned: it provisions claims (Provision) but runs no pod, as
	// the storage driver beside real nodes (package realnode).
	Unschedulable bool
	Log           logr.Logger
}

// Node runs the pods bound to one Kubernetes Node as processes.
type Node struct {
	opts   Options
	client client.Client
	reader client.Reader
	gpus   *gpuAllocator
	// recorder records the provisioner's events.
	recorder events.EventRecorder

	partition partition

	// runCtx is the pods' runs' context: cancelled stopWrites after the node starts to stop, so that no
	// status write of a stopping pod waits for an API server that does not answer.
	runCtx     context.Context
	cancelRuns context.CancelFunc

	mu    sync.Mutex
	runs  map[types.UID]*podRun
	addrs addrTable
	// kubeletPort is the port of the node's log endpoint (kubelet.go), advertised as its kubelet endpoint.
	kubeletPort int32
}

// New prepares a node; Start registers it and runs its pods.
func New(opts Options) *Node {
	if opts.RestartBackoff == 0 {
		opts.RestartBackoff = 10 * time.Second
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = 10 * time.Second
	}
	if opts.WorkDir == "" {
		opts.WorkDir, _ = os.Getwd()
	}
	gpus := hostGPUs()
	if gpus == 0 {
		gpus = opts.GPUs
	}
	return &Node{opts: opts, gpus: newGPUAllocator(opts.GPUResource, gpus), runs: map[types.UID]*podRun{}, addrs: addrTable{}}
}

// Start registers the Node and runs its pods until ctx is done; then it stops every process it started.
func (n *Node) Start(ctx context.Context, cfg *rest.Config) error {
	n.runCtx, n.cancelRuns = context.WithCancel(context.WithoutCancel(ctx))
	defer n.cancelRuns()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(n.partition.wrap)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		Logger: n.opts.Log,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Field: fields.OneTermEqualSelector("spec.nodeName", n.opts.Name)},
		}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return fmt.Errorf("process node %s: %w", n.opts.Name, err)
	}
	n.client, n.reader = mgr.GetClient(), mgr.GetAPIReader()
	if _, err := BindShim(); err != nil {
		n.opts.Log.Info("pods share the wildcard address: two jobs listening on the same port will collide",
			"node", n.opts.Name, "reason", err.Error())
	}
	if n.kubeletPort, err = n.startKubeletAPI(ctx); err != nil {
		return fmt.Errorf("process node %s: serving container logs: %w", n.opts.Name, err)
	}
	if err := n.register(ctx); err != nil {
		return err
	}
	err = ctrl.NewControllerManagedBy(mgr).Named("process-node").For(&corev1.Pod{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(reconcile.Func(n.reconcilePod))
	if err == nil && n.opts.Provision {
		n.recorder = mgr.GetEventRecorder("process-node-provisioner")
		err = n.ensureDefaultStorageClass(ctx)
	}
	if err == nil && n.opts.Provision {
		err = ctrl.NewControllerManagedBy(mgr).Named("process-node-provisioner").For(&corev1.PersistentVolumeClaim{}).
			Complete(reconcile.Func(n.reconcileClaim))
	}
	if err == nil {
		err = mgr.Add(manager.RunnableFunc(n.heartbeat))
	}
	if err == nil {
		err = mgr.Start(ctx)
	}
	n.stopAll()
	return err
}

// reconcilePod starts a pod bound to this node, stops it when it is deleted, and finishes its deletion.
func (n *Node) reconcilePod(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := n.client.Get(ctx, req.NamespacedName, pod); apierrors.IsNotFound(err) {
		n.forget(req.NamespacedName)
		return reconcile.Result{}, nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if pod.Spec.NodeName != n.opts.Name {
		return reconcile.Result{}, nil
	}
	n.mu.Lock()
	run := n.runs[pod.UID]
	n.mu.Unlock()
	switch {
	case run != nil && pod.DeletionTimestamp != nil:
		run.terminate(gracePeriod(pod))
	case run != nil:
	case pod.DeletionTimestamp != nil:
		return reconcile.Result{}, n.finishDeletion(ctx, pod)
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
	case pod.Status.StartTime != nil:
		return reconcile.Result{}, n.lost(ctx, pod)
	default:
		n.startRun(pod)
	}
	return reconcile.Result{}, nil
}

func gracePeriod(pod *corev1.Pod) time.Duration {
	if s := pod.DeletionGracePeriodSeconds; s != nil {
		return time.Duration(*s) * time.Second
	}
	return time.Duration(ptr.Deref(pod.Spec.TerminationGracePeriodSeconds, 30)) * time.Second
}

// finishDeletion removes a pod whose processes are gone, as the kubelet does with a zero grace period.
func (n *Node) finishDeletion(ctx context.Context, pod *corev1.Pod) error {
	err := n.client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// lost fails a pod this node started before it restarted: its processes are gone with the old node.
func (n *Node) lost(ctx context.Context, pod *corev1.Pod) error {
	pod.Status.Phase = corev1.PodFailed
	pod.Status.Reason = "ProcessNodeRestarted"
	pod.Status.Message = "the process node restarted and lost this pod's processes"
	return client.IgnoreNotFound(n.client.Status().Update(ctx, pod))
}

func (n *Node) startRun(pod *corev1.Pod) {
	run := newPodRun(n, pod)
	n.mu.Lock()
	n.runs[pod.UID] = run
	n.mu.Unlock()
	go run.loop(n.runCtx) // not the reconcile's: a pod runs past it
}

// forget kills what is left of a pod that was removed from the API server.
func (n *Node) forget(key types.NamespacedName) {
	n.mu.Lock()
	var gone []*podRun
	for uid, r := range n.runs {
		if r.key == key {
			gone = append(gone, r)
			delete(n.runs, uid)
		}
	}
	n.mu.Unlock()
	for _, r := range gone {
		r.shutdown(0)
	}
}

// stopWrites is how long the pods' runs may still write their status once the node stops: an API server
// that does not answer (overloaded, stopped by a harness first) held a stop for 15 minutes.
var stopWrites = 10 * time.Second // a variable for the tests

// stopAll stops every pod's processes when the node shuts down; their last status writes are given up after
// stopWrites.
func (n *Node) stopAll() {
	runs := n.allRuns()
	for _, r := range runs {
		r.shutdown(2 * time.Second)
	}
	giveUp := time.AfterFunc(stopWrites, n.cancelRuns)
	defer giveUp.Stop()
	for _, r := range runs {
		<-r.done
	}
	n.cancelRuns()
}

// allRuns returns the pods' runs the node has started.
func (n *Node) allRuns() []*podRun {
	n.mu.Lock()
	defer n.mu.Unlock()
	runs := make([]*podRun, 0, len(n.runs))
	for _, r := range n.runs {
		runs = append(runs, r)
	}
	return runs
}

// claimAddr gives a pod its loopback address.
func (n *Node) claimAddr(pod *corev1.Pod) (netip.Addr, error) {
	addr := PodAddr(pod)
	n.mu.Lock()
	defer n.mu.Unlock()
	return addr, n.addrs.claim(addr, pod.Namespace+"/"+pod.Name)
}

func (n *Node) releaseAddr(addr netip.Addr, pod *corev1.Pod) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.addrs[addr] == pod.Namespace+"/"+pod.Name {
		delete(n.addrs, addr)
	}
}

// ClaimDir returns the host directory of a PersistentVolumeClaim.
func (n *Node) ClaimDir(namespace, claim string) string {
	return ClaimDir(n.opts.DataRoot, namespace, claim)
}

// ClaimDir returns the host directory of a PersistentVolumeClaim under a data root.
func ClaimDir(root, namespace, claim string) string {
	return filepath.Join(root, "claims", namespace, claim)
}

// PodDir returns the directory of one pod under a data root.
func PodDir(root string, pod *corev1.Pod) string {
	return filepath.Join(root, "pods", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
}
