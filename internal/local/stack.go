// Package local runs the whole system on one machine: the local control plane (package cluster), process
// nodes (package node) and the operator. cmd/trainingjob-local and the end-to-end tests use it.
package local

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	"github.com/trainingjob-operator/trainingjob-operator/deploy"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/cluster"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/node"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/realnode"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// Options configure a local stack.
type Options struct {
	// Assets is the directory of the control-plane binaries (hack/testbin.sh prints it).
	Assets string
	// Dir holds the kubeconfig, the components' logs and the nodes' data (Dir/data).
	Dir string
	// Nodes is the number of process nodes (default 1); GPUs the GPUs each advertises when the host has
	// none, as GPUResource (default nvidia.com/gpu).
	Nodes, GPUs int
	GPUResource corev1.ResourceName
	// Path, WorkDir and RestartBackoff are passed to every node (see node.Options).
	Path           []string
	WorkDir        string
	RestartBackoff time.Duration
	// MetricsAddr is the operator's metrics address; "0" or empty disables it. The operator serves them
	// as in a cluster, over HTTPS to a token allowed to get /metrics, unless MetricsInsecureHTTP.
	MetricsAddr         string
	MetricsInsecureHTTP bool
	// ProgressInterval is the operator's time between reads of rank 0's progress (default 5 s).
	ProgressInterval time.Duration
	// ClusterName is the operator's --cluster-name (status.clusterName); UpMultiKueue names each cluster.
	ClusterName string
	// LogLevel is the operator's --zap-log-level (default info; 1 logs each decision of a job).
	LogLevel string
	// CheckpointInterval is the checkpoint agents' time between rotations (default 30 s). The agent is
	// `manager checkpoint-agent`, found through Path (make build puts manager in bin/).
	CheckpointInterval time.Duration
	// NodeEnv is passed to every node (see node.Options.Env).
	NodeEnv map[string]string
	// Log receives the operator's and the nodes' logs.
	Log logr.Logger
	// ManagerBinary, when set, runs the operator as this binary (the real bin/manager) in a process of its
	// own, logging to Dir/operator-<n>.log; KillOperator and StartOperator kill and restart it.
	ManagerBinary string
	// AsServiceAccount runs those processes as the operator's ServiceAccount with deploy/rbac applied,
	// instead of as a cluster admin: a verb missing from the generated RBAC fails there as in a cluster.
	AsServiceAccount bool
	// RealNodes, when above 0, runs that many real nodes (package realnode: containerd, runc and a
	// kubelet each) and the cluster DNS, with one process node beside them that provisions the claims and
	// runs no pod; Nodes is then ignored. NodeAssets holds kubelet and coredns (hack/node.sh prints it),
	// Images the image tarballs every real node imports (package images).
	RealNodes  int
	NodeAssets string
	Images     []string
	// InClusterOperator leaves the operator and the TrainingJob API out of the stack: the caller installs
	// them into it as a user does (the Helm chart, kubectl apply -k), and the operator runs as a pod of the
	// real nodes with its ServiceAccount's identity. Only with RealNodes.
	InClusterOperator bool
	// Kueue, when set, is the directory hack/kueue.sh prints: the stack applies Kueue's CRDs and runs its
	// manager (logging to Dir/kueue.log) before the operator, with TrainingJob as an external framework.
	Kueue string
	// MultiKueueManager, above 0, makes this stack's Kueue a MultiKueue manager whose lost workers keep
	// their Workloads that long (Kueue's workerLostTimeout); see UpMultiKueue.
	MultiKueueManager time.Duration
	// Installs, when set, runs once the nodes are up (and before the in-process operator, if any): it
	// installs what the caller wants in the cluster, for example the operator by its Helm chart.
	Installs func(*Stack) error
}

// Stack is a running local system.
type Stack struct {
	Cluster  *cluster.Cluster
	Client   client.Client
	DataRoot string

	cancel context.CancelFunc
	errs   chan error
	runs   int

	opts     Options
	ctx      context.Context
	nodes    map[string]*nodeRun
	lost     map[string]bool // lost nodes, and whether they provisioned volumes
	manager  *cluster.Process
	managers int
	// managerKubeconfig is the identity manager processes run as.
	managerKubeconfig string
	// RealNodes are the running real nodes (Options.RealNodes), by name; dns the cluster DNS beside them.
	RealNodes map[string]*realnode.Node
	dns       *realnode.DNS
	proxy     *realnode.Proxy
	kueue     *cluster.Process
}

// Up starts the control plane, the kube-controller-manager and kube-scheduler, the process nodes and
// the operator. Down stops all of them.
func Up(ctx context.Context, opts Options) (*Stack, error) {
	if opts.Nodes < 1 || opts.RealNodes > 0 {
		opts.Nodes = 1
	}
	copts := cluster.Options{Assets: opts.Assets, Dir: opts.Dir, Bare: opts.InClusterOperator}
	// Real nodes of an earlier run (of either mode, or more of them) leave their pods' logs behind.
	if err := realnode.ClearNodeDirs(opts.Dir); err != nil {
		return nil, fmt.Errorf("clearing an earlier run's real nodes: %w", err)
	}
	if opts.RealNodes > 0 {
		ip, err := realnode.HostIP()
		if err != nil {
			return nil, err
		}
		copts.AdvertiseAddress = ip // pods use the API server as in a cluster
	}
	c, err := cluster.Start(copts)
	if err != nil {
		return nil, err
	}
	s := &Stack{Cluster: c, DataRoot: filepath.Join(opts.Dir, "data"), errs: make(chan error, opts.Nodes+1), opts: opts}
	if err := cluster.Guard("starting the local stack", func() error { return s.start(ctx, opts) }); err != nil {
		return nil, errors.Join(err, s.Down())
	}
	return s, nil
}

func (s *Stack) start(ctx context.Context, opts Options) error {
	var err error
	if s.Client, err = client.New(s.Cluster.Config, client.Options{Scheme: controllers.NewScheme()}); err != nil {
		return err
	}
	if _, err := s.Cluster.StartControllerManager(s.controllers()); err != nil {
		return err
	}
	if _, err := s.Cluster.StartScheduler(); err != nil {
		return err
	}
	if opts.Kueue != "" {
		if err := s.startKueue(ctx); err != nil {
			return err
		}
		// The operator's QueueController keeps its list of MultiKueue queues in its namespace.
		err := s.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", operatorNamespace, err)
		}
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.ctx, s.nodes = ctx, map[string]*nodeRun{}
	for i := 0; i < opts.Nodes; i++ {
		s.startNode(fmt.Sprintf("process-node-%d", i), i == 0)
	}
	if err := s.startRealNodes(ctx); err != nil {
		return err
	}
	if opts.Installs != nil || opts.InClusterOperator {
		if err := s.waitForNodes(ctx, opts.Nodes); err != nil {
			return err
		}
		if opts.Installs != nil {
			if err := opts.Installs(s); err != nil {
				return err
			}
		}
		if opts.InClusterOperator {
			return nil
		}
	}
	if opts.ManagerBinary != "" {
		if err := s.managerIdentity(ctx); err != nil {
			return err
		}
		if err := s.StartOperator(); err != nil {
			return err
		}
		return s.waitForNodes(ctx, opts.Nodes)
	}
	mgr, err := operator(s.Cluster, opts)
	if err != nil {
		return err
	}
	s.goRun(func() error { return mgr.Start(ctx) })
	return s.waitForNodes(ctx, opts.Nodes)
}

func (s *Stack) goRun(f func() error) {
	s.runs++
	go func() { s.errs <- f() }()
}

// operator returns the operator's manager, watching every namespace.
func operator(c *cluster.Cluster, opts Options) (ctrl.Manager, error) {
	_, key, err := agentTokenKey(opts)
	if err != nil {
		return nil, err
	}
	addr := opts.MetricsAddr
	if addr == "" {
		addr = "0"
	}
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme:                 controllers.NewScheme(),
		Logger:                 opts.Log.WithName("operator"),
		Cache:                  controllers.CacheOptions(c.Config, nil),
		Metrics:                metrics.Serving{BindAddress: addr, InsecureHTTP: opts.MetricsInsecureHTTP}.Options(),
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the operator: %w", err)
	}
	return mgr, controllers.Setup(mgr, controllers.Config{
		Builders: builders.Options{DefaultImages: builders.DefaultImages(), AgentCommand: agentCommand(opts),
			SupervisorCommand: supervisorCommand(opts),
			AgentInterval:     opts.CheckpointInterval,
			GPUResource:       opts.GPUResource, InputsNodeCacheDir: nodeCacheDir(opts), AgentTokenKey: key},
		ProgressInterval: opts.ProgressInterval, ClusterName: opts.ClusterName,
		CheckpointMountRoots: []string{filepath.Join(opts.Dir, "data")}, // the process nodes' DataRoot
	})
}

// StartOperator starts the operator's process (Options.ManagerBinary), with the settings the in-process
// operator gets.
func (s *Stack) StartOperator() error {
	s.managers++
	p, err := s.StartManager(fmt.Sprintf("operator-%d", s.managers), s.opts.MetricsAddr)
	if err != nil {
		return err
	}
	s.manager = p
	return nil
}

// StartManager starts one more process of Options.ManagerBinary, logging to Dir/<name>.log, with the
// settings the in-process operator gets, the metrics address given ("" or "0": none) and extra flags
// (for example --leader-elect). The caller stops it.
func (s *Stack) StartManager(name, metricsAddr string, extra ...string) (*cluster.Process, error) {
	o := s.opts
	if metricsAddr == "" {
		metricsAddr = "0"
	}
	args := []string{"--kubeconfig=" + s.managerKubeconfig, "--metrics-bind-address=" + metricsAddr, "--health-probe-bind-address=0",
		"--checkpoint-agent-command=" + strings.Join(agentCommand(o), " "), "--supervisor-command=" + strings.Join(supervisorCommand(o), " "),
		"--zap-log-level=" + cmp.Or(o.LogLevel, "info")}
	if o.ProgressInterval > 0 {
		args = append(args, "--progress-interval="+o.ProgressInterval.String())
	}
	if o.CheckpointInterval > 0 {
		args = append(args, "--checkpoint-sync-interval="+o.CheckpointInterval.String())
	}
	if o.MetricsInsecureHTTP {
		args = append(args, "--metrics-insecure-http")
	}
	args = append(args, "--inputs-node-cache-dir="+nodeCacheDir(o))
	if o.ClusterName != "" {
		args = append(args, "--cluster-name="+o.ClusterName)
	}
	keyFile, _, err := agentTokenKey(o)
	if err != nil {
		return nil, err
	}
	args = append(args, "--agent-token-key-file="+keyFile, "--checkpoint-mount-root="+s.DataRoot)
	return cluster.StartProcess(o.ManagerBinary, append(args, extra...), filepath.Join(o.Dir, name+".log"))
}

// agentTokenKey returns the key the stack's operators derive the checkpoint agents' tokens from, as a cluster's
// Secret would hold it: made once in the state directory, so every operator of the stack (in process, a
// restarted process, a second replica) agrees.
func agentTokenKey(o Options) (file string, key []byte, err error) {
	file = filepath.Join(o.Dir, "agent-token.key")
	if key, err = os.ReadFile(file); err == nil && len(key) >= 32 {
		return file, key, nil
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(file, key, 0o600); err != nil {
		return "", nil, fmt.Errorf("writing the agents' token key: %w", err)
	}
	return file, key, nil
}

// nodeCacheDir returns the nodes' input cache (PerNode inputs.cache): a directory of this machine, which
// every node of the stack shares, as a node's hostPath.
func nodeCacheDir(o Options) string {
	dir, err := filepath.Abs(filepath.Join(o.Dir, "inputs-node-cache"))
	if err != nil {
		return filepath.Join(o.Dir, "inputs-node-cache") // no working directory: the manager says so
	}
	return dir
}

// NodeCacheDir returns the nodes' input cache directory the operator was given.
func (s *Stack) NodeCacheDir() string { return nodeCacheDir(s.opts) }

// The operator's ServiceAccount, as deploy/rbac binds it.
const (
	operatorNamespace      = controllers.DefaultNamespace
	operatorServiceAccount = "system:serviceaccount:" + operatorNamespace + ":trainingjob-operator"
)

// managerIdentity chooses the kubeconfig manager processes use: the admin's, or (AsServiceAccount) the
// operator's ServiceAccount after applying its namespace and deploy/rbac.
func (s *Stack) managerIdentity(ctx context.Context) error {
	s.managerKubeconfig = s.Cluster.Kubeconfig
	if !s.opts.AsServiceAccount {
		return nil
	}
	objs, err := deploy.RBAC()
	if err != nil {
		return err
	}
	if err := s.Apply(ctx, objs); err != nil {
		return err
	}
	s.managerKubeconfig, err = s.Cluster.UserKubeconfig("operator-serviceaccount.kubeconfig", operatorServiceAccount,
		"system:serviceaccounts", "system:serviceaccounts:"+operatorNamespace, "system:authenticated")
	return err
}

// nodeRun is a running process node: cancel stops it, done receives how it ended.
type nodeRun struct {
	node      *node.Node
	cancel    context.CancelFunc
	done      chan error
	provision bool
}

// startNode starts a process node (provision: it also runs the hostpath volume provisioner).
func (s *Stack) startNode(name string, provision bool) {
	o := s.opts
	ctx, cancel := context.WithCancel(s.ctx)
	run := &nodeRun{cancel: cancel, done: make(chan error, 1), provision: provision}
	s.nodes[name] = run
	n := node.New(node.Options{
		Name: name, DataRoot: s.DataRoot, GPUs: o.GPUs, GPUResource: o.GPUResource,
		Path: o.Path, HeartbeatInterval: cluster.NodeMonitorGracePeriod / 10,
		WorkDir: o.WorkDir, RestartBackoff: o.RestartBackoff, Provision: provision, Env: o.NodeEnv, Log: o.Log.WithName("node"),
		Unschedulable: o.RealNodes > 0,
	})
	run.node = n
	go func() { run.done <- n.Start(ctx, s.Cluster.Config) }()
}

// stopNode stops a process node and waits for it; a stop asked for is no error.
func stopNode(run *nodeRun) error {
	run.cancel()
	if err := <-run.done; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// LoseNode makes a process node vanish as a machine does: its processes stop (the pods' processes with
// them), it reports nothing any more, and its Node object is deleted, as a cloud provider's node
// controller deletes the Node of a machine that is gone. The control plane then deals with its pods
// (the pod garbage collector fails and removes them).
func (s *Stack) LoseNode(ctx context.Context, name string) error {
	if err := s.PartitionNode(name); err != nil {
		return err
	}
	err := s.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting node %s: %w", name, err)
	}
	return nil
}

// PartitionNode makes a process node unreachable as a machine that loses power or its network does: its
// processes stop (the pods' processes with them) and it reports nothing any more, but its Node object
// stays. Its lease is no longer renewed; after the controller manager's node-monitor-grace-period the
// node lifecycle controller marks it NotReady (Unknown), and its pods stay as they were last reported.
func (s *Stack) PartitionNode(name string) error {
	run, ok := s.nodes[name]
	if !ok {
		return fmt.Errorf("no process node %s", name)
	}
	delete(s.nodes, name)
	if s.lost == nil {
		s.lost = map[string]bool{}
	}
	s.lost[name] = run.provision
	run.node.Partition()
	return stopNode(run)
}

// AddNode starts a process node (again) under name, with the duties it had if it was lost, and waits
// until the cluster has want Ready nodes.
func (s *Stack) AddNode(ctx context.Context, name string, want int) error {
	s.startNode(name, s.lost[name])
	return s.waitForNodes(ctx, want)
}

// OperatorExited reports whether the operator's process has exited, and how.
func (s *Stack) OperatorExited() (bool, error) {
	if s.manager == nil {
		return true, nil
	}
	return s.manager.Exited()
}

// KillOperator kills the operator's process with SIGKILL: nothing is flushed, no lease released.
func (s *Stack) KillOperator() {
	if s.manager != nil {
		s.manager.Kill()
		s.manager = nil
	}
}

// waitForNodes waits until the process nodes are registered and Ready.
func (s *Stack) waitForNodes(ctx context.Context, want int) error {
	return s.waitForReady(ctx, node.ProcessNodeLabel, "process", want, time.Minute)
}

// waitForReady waits until want Nodes labelled label (kind names them in errors) are registered and Ready;
// a process node, a real node's kubelet or the operator stopping, or ctx ending, ends the wait.
func (s *Stack) waitForReady(ctx context.Context, label, kind string, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		nodes := &corev1.NodeList{}
		err := s.Client.List(ctx, nodes, client.HasLabels{label})
		if err == nil && readyNodes(nodes) >= want {
			return nil
		}
		if stopped := s.stoppedNode(); stopped != nil {
			return fmt.Errorf("a process node stopped: %w", stopped)
		}
		for _, n := range s.RealNodes {
			if err := n.KubeletExited(); err != nil {
				return fmt.Errorf("a real node stopped: %w", err)
			}
		}
		select {
		case err := <-s.errs:
			s.errs <- err
			return fmt.Errorf("the operator stopped: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) && err != nil {
			return fmt.Errorf("%s nodes not Ready after %s: %w", kind, timeout, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d %s nodes Ready after %s", readyNodes(nodes), want, kind, timeout)
		}
	}
}

// stoppedNode returns the error of a node that stopped by itself, nil while all run.
func (s *Stack) stoppedNode() error {
	for name, run := range s.nodes {
		select {
		case err := <-run.done:
			run.done <- err
			return fmt.Errorf("%s: %w", name, err)
		default:
		}
	}
	return nil
}

func readyNodes(nodes *corev1.NodeList) int {
	n := 0
	for _, nd := range nodes.Items {
		for _, c := range nd.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n
}

// Apply creates objects, creating their namespaces first when missing.
func (s *Stack) Apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		if ns := o.GetNamespace(); ns != "" {
			err := s.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating namespace %s: %w", ns, err)
			}
		}
		if err := s.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

// Down stops the operator and the nodes (which stop every process they started), then the control plane.
func (s *Stack) Down() error {
	var errs []error
	if s.manager != nil {
		s.manager.Stop()
	}
	if s.kueue != nil {
		s.kueue.Stop()
	}
	errs = append(errs, s.stopRealNodes())
	for _, run := range s.nodes {
		errs = append(errs, stopNode(run))
	}
	if s.cancel != nil {
		s.cancel()
		for i := 0; i < s.runs; i++ {
			if err := <-s.errs; err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, err)
			}
		}
	}
	errs = append(errs, s.Cluster.Stop())
	return errors.Join(errs...)
}

// ResetData removes the nodes' data (pods' files and claim directories) under dir.
func ResetData(dir string) error { return os.RemoveAll(filepath.Join(dir, "data")) }
