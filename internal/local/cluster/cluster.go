// Package cluster runs a Kubernetes control plane on one machine from the pinned binaries that
// hack/testbin.sh builds: etcd and kube-apiserver (through controller-runtime's envtest), and optionally the
// real kube-controller-manager and kube-scheduler. The TrainingJob CRD and admission policies of deploy/
// are installed. The local run (cmd/trainingjob-local) and the tests use it.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/trainingjob-operator/trainingjob-operator/deploy"
)

// LocalControllers are the kube-controller-manager controllers a local run needs: Jobs, garbage
// collection of a deleted TrainingJob's children, node health, binding claims to volumes (and releasing
// deleted ones once no pod uses them), and cleanup.
var LocalControllers = []string{
	"job", "garbagecollector", "nodelifecycle", "persistentvolume-binder", "pvc-protection", "podgc", "ttl-after-finished",
}

// NodeMonitorGracePeriod is how long a node may go without renewing its lease before the node lifecycle
// controller marks it NotReady (Kubernetes' default is 50 s; shorter here so node-loss tests are quick).
// Process nodes renew ten times within it.
const NodeMonitorGracePeriod = 20 * time.Second

// Options configure a control plane.
type Options struct {
	// Assets is the directory of etcd, kube-apiserver, kube-controller-manager and kube-scheduler.
	Assets string
	// Dir receives the admin kubeconfig and the components' logs.
	Dir string
	// AuditLog, when set, is where kube-apiserver writes an audit event (JSON lines, Metadata level: user,
	// verb, resource, response code) for every request it answers; benchmarks count writes with it.
	AuditLog string
	// Bare leaves the TrainingJob API out (neither the CRD nor the admission policies), for a test that
	// installs it as a user does (helm install, kubectl apply -k).
	Bare bool
	// AdvertiseAddress, when set, makes the API server usable from pods as in a cluster: it listens on
	// every address and advertises this one as the `kubernetes` Service's endpoint, its certificate is
	// valid for the Service's address, ServiceAccounts get tokens, and kube-controller-manager publishes
	// the CA (kube-root-ca.crt) and creates every namespace's default ServiceAccount.
	AdvertiseAddress string
	// APIServerFeatureGates, when set, is kube-apiserver's --feature-gates (a test of a cluster without a
	// feature).
	APIServerFeatureGates string
}

// inClusterControllers are what pods that use the API server need of kube-controller-manager.
var inClusterControllers = []string{"serviceaccount", "root-ca-cert-publisher"}

// auditPolicy records every request's metadata once, when it has been answered.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
`

// Cluster is a running control plane.
type Cluster struct {
	// Config is an admin client configuration.
	Config *rest.Config
	// Kubeconfig is the path of an admin kubeconfig file, for kubectl.
	Kubeconfig string

	env   *envtest.Environment
	opts  Options
	procs []*Process
	users int
	// rootCA is the serving CA's file with Options.AdvertiseAddress, which kube-controller-manager
	// publishes to pods.
	rootCA string
	// logs receive etcd's and kube-apiserver's output.
	logs []*os.File
}

// Start starts etcd and kube-apiserver with the CRD and policies of deploy/ installed (unless Bare), and
// writes an admin kubeconfig to Dir/kubeconfig. Their output goes to Dir/etcd.log and Dir/kube-apiserver.log.
// Whatever fails while it starts (a component that does not come up, a library's panic) stops what it had
// started and returns an error naming those logs.
func Start(opts Options) (*Cluster, error) {
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(opts.Assets, b)); err != nil {
			return nil, fmt.Errorf("control-plane binary %s missing in %s (build it with hack/testbin.sh): %w", b, opts.Assets, err)
		}
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	if !opts.Bare {
		var err error
		if crds, err = typedCRDs(); err != nil {
			return nil, err
		}
	}
	c := &Cluster{opts: opts, Kubeconfig: filepath.Join(opts.Dir, "kubeconfig")}
	if err := c.prepare(crds); err != nil {
		c.closeLogs()
		return nil, err
	}
	logs := strings.Join(c.logPaths(), ", ")
	if err := c.startEnv(); err != nil {
		return nil, fmt.Errorf("starting etcd and kube-apiserver: %w (logs: %s)", err, logs)
	}
	if err := c.install(); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

// prepare configures the control plane of one run: its certificate directory starts empty, its
// components' logs are opened.
func (c *Cluster) prepare(crds []*apiextensionsv1.CustomResourceDefinition) error {
	// A fixed certificate directory keeps the API server's serving certificate and client CA across a
	// restart (RestartAPIServer), so every client's kubeconfig stays valid. It belongs to one run: envtest
	// keeps a serving certificate it finds there without knowing its CA, so an earlier run's (the real
	// nodes' in-cluster certificate, or a killed run's) would leave every client unable to connect.
	// etcd's data lives in Dir too (so every process of a run names Dir), and a run starts with none.
	certDir, etcdDir := filepath.Join(c.opts.Dir, "apiserver-certs"), c.EtcdDir()
	for _, d := range []string{certDir, etcdDir} {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("clearing an earlier run's %s: %w", d, err)
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	etcdLog, err := c.openLog("etcd.log")
	if err != nil {
		return err
	}
	apiLog, err := c.openLog("kube-apiserver.log")
	if err != nil {
		return err
	}
	c.env = &envtest.Environment{BinaryAssetsDirectory: c.opts.Assets, CRDs: crds}
	// The binaries' paths are set: envtest would otherwise prefer KUBEBUILDER_ASSETS to Options.Assets.
	c.env.ControlPlane.Etcd = &envtest.Etcd{Path: filepath.Join(c.opts.Assets, "etcd"), DataDir: etcdDir, Out: etcdLog, Err: etcdLog}
	c.env.ControlPlane.KubectlPath = filepath.Join(c.opts.Assets, "kubectl")
	// kube-apiserver drains its watches for long on SIGTERM; 5 s, then SIGKILL, keeps a restart quick.
	api := &envtest.APIServer{Path: filepath.Join(c.opts.Assets, "kube-apiserver"), CertDir: certDir, StopTimeout: 5 * time.Second,
		Out: apiLog, Err: apiLog}
	c.env.ControlPlane.APIServer = api
	// Process nodes serve container logs on their InternalIP (their host names do not resolve).
	api.Configure().Set("kubelet-preferred-address-types", "InternalIP")
	if c.opts.APIServerFeatureGates != "" {
		api.Configure().Set("feature-gates", c.opts.APIServerFeatureGates)
	}
	if c.opts.AdvertiseAddress != "" {
		if c.rootCA, err = inClusterCerts(api, certDir, c.opts.AdvertiseAddress); err != nil {
			return err
		}
	}
	return c.configureAudit(api)
}

// configureAudit turns kube-apiserver's audit log on when Options.AuditLog is set.
func (c *Cluster) configureAudit(api *envtest.APIServer) error {
	if c.opts.AuditLog == "" {
		return nil
	}
	policy := filepath.Join(c.opts.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return err
	}
	// One file, never rotated (0 would mean rotate at 100 MB: 10,000 jobs write more, and a reader of the
	// one file would miss the first writes).
	api.Configure().Set("audit-policy-file", policy).Set("audit-log-path", c.opts.AuditLog).
		Set("audit-log-format", "json").Set("audit-log-maxsize", "1000000")
	return nil
}

// startEnv starts etcd and kube-apiserver. envtest leaves them running when it fails after starting them
// (the default namespace late, a CRD refused) and panics where it finds no CA: either way, this stops them.
func (c *Cluster) startEnv() error {
	err := Guard("envtest", func() (err error) {
		c.Config, err = c.env.Start()
		return err
	})
	if err != nil {
		return errors.Join(err, c.Stop())
	}
	return nil
}

// Guard runs f and returns its error, or a panic inside it (what names) as an error: starting the local
// stack stops what it started on either.
func Guard(what string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s panicked: %v", what, r)
		}
	}()
	return f()
}

// openLog opens Dir/name for a component's output, kept open until Stop.
func (c *Cluster) openLog(name string) (*os.File, error) {
	if err := os.MkdirAll(c.opts.Dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(c.opts.Dir, name))
	if err != nil {
		return nil, err
	}
	c.logs = append(c.logs, f)
	return f, nil
}

func (c *Cluster) logPaths() []string {
	var paths []string
	for _, f := range c.logs {
		paths = append(paths, f.Name())
	}
	return paths
}

func (c *Cluster) closeLogs() {
	for _, f := range c.logs {
		_ = f.Close() // the processes that wrote them have stopped
	}
	c.logs = nil
}

func (c *Cluster) install() error {
	if err := c.writeKubeconfig(c.Kubeconfig, "admin"); err != nil {
		return err
	}
	cl, err := client.New(c.Config, client.Options{})
	if err != nil {
		return err
	}
	if c.opts.Bare {
		return nil
	}
	policies, err := deploy.Policies()
	if err != nil {
		return err
	}
	for _, p := range policies {
		if err := cl.Create(context.Background(), p); err != nil {
			return fmt.Errorf("installing %s %s: %w", p.GetKind(), p.GetName(), err)
		}
	}
	return nil
}

func typedCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	objs, err := deploy.CRDs()
	if err != nil {
		return nil, err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, o := range objs {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, crd); err != nil {
			return nil, fmt.Errorf("CRD %s: %w", o.GetName(), err)
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

// writeKubeconfig writes a kubeconfig for a user in system:masters.
func (c *Cluster) writeKubeconfig(path, user string) error {
	u, err := c.env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding user %s: %w", user, err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig of %s: %w", user, err)
	}
	return os.WriteFile(path, data, 0o600)
}

// RestartAPIServer stops kube-apiserver, leaves it down for down, and starts it again on the same port
// with the same certificates; etcd keeps running, so no data is lost. Clients see connection errors
// meanwhile, as in an API server upgrade or crash.
func (c *Cluster) RestartAPIServer(down time.Duration) error {
	api := c.env.ControlPlane.APIServer
	if err := api.Stop(); err != nil && !strings.Contains(err.Error(), "timeout waiting") {
		return fmt.Errorf("stopping kube-apiserver: %w", err) // a timeout means it was killed, as in a crash
	}
	time.Sleep(down)
	if err := api.Start(); err != nil {
		return fmt.Errorf("starting kube-apiserver again: %w", err)
	}
	return nil
}

// UserKubeconfig writes a kubeconfig, Dir/<file>, that authenticates as the given user and groups (a
// client certificate): RBAC applies to it as to that identity, for example a ServiceAccount's
// ("system:serviceaccount:NS:NAME", groups "system:serviceaccounts" and "system:serviceaccounts:NS").
func (c *Cluster) UserKubeconfig(file, user string, groups ...string) (string, error) {
	u, err := c.env.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	if err != nil {
		return "", fmt.Errorf("adding user %s: %w", user, err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("kubeconfig of %s: %w", user, err)
	}
	path := filepath.Join(c.opts.Dir, file)
	return path, os.WriteFile(path, data, 0o600)
}

// componentKubeconfig writes a kubeconfig for one run of a component; every run gets its own files.
func (c *Cluster) componentKubeconfig(name string) (string, error) {
	c.users++
	path := filepath.Join(c.opts.Dir, fmt.Sprintf("%s-%d.kubeconfig", name, c.users))
	return path, c.writeKubeconfig(path, name)
}

// StartControllerManager runs the real kube-controller-manager with the given controllers and extra flags.
func (c *Cluster) StartControllerManager(controllers []string, extra ...string) (*Process, error) {
	kc, err := c.componentKubeconfig("kube-controller-manager")
	if err != nil {
		return nil, err
	}
	args := []string{"--kubeconfig=" + kc, "--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=false",
		"--concurrent-gc-syncs=5", "--node-monitor-grace-period=" + NodeMonitorGracePeriod.String(), "--node-monitor-period=2s"}
	if c.rootCA != "" {
		controllers = append(append([]string{}, controllers...), inClusterControllers...)
		args = append(args, "--root-ca-file="+c.rootCA)
	}
	return c.startComponent("kube-controller-manager", append(append(args, extra...), "--controllers="+strings.Join(controllers, ","))...)
}

// StartScheduler runs the real kube-scheduler.
func (c *Cluster) StartScheduler() (*Process, error) {
	kc, err := c.componentKubeconfig("kube-scheduler")
	if err != nil {
		return nil, err
	}
	return c.startComponent("kube-scheduler", "--kubeconfig="+kc, "--leader-elect=false", "--secure-port=0")
}

func (c *Cluster) startComponent(name string, args ...string) (*Process, error) {
	bin := filepath.Join(c.opts.Assets, name)
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s missing in %s (build it with hack/testbin.sh %s): %w", name, c.opts.Assets, name, err)
	}
	p, err := StartProcess(bin, args, filepath.Join(c.opts.Dir, fmt.Sprintf("%s-%d.log", name, c.users)))
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// Stop stops the components this cluster started, then kube-apiserver and etcd.
func (c *Cluster) Stop() error {
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].Stop()
	}
	c.procs = nil
	err := c.env.Stop()
	c.closeLogs()
	return errors.Join(err, os.RemoveAll(c.EtcdDir())) // the next run starts a cluster of its own
}

// EtcdDir holds etcd's data (every object, Secrets too) while the cluster runs.
func (c *Cluster) EtcdDir() string { return filepath.Join(c.opts.Dir, "etcd") }
