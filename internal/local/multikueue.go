package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
)

// MultiKueue is Kueue's MultiKueue on one machine: a manager cluster and worker clusters, each a Stack of its
// own (etcd, kube-apiserver, kube-controller-manager, scheduler, process nodes, the real Kueue manager and
// this operator). The manager's Kueue dispatches TrainingJobs to the workers through the admission check
// MultiKueueCheck, which lists every worker.
type MultiKueue struct {
	Manager *Stack
	// Workers by name (WorkerNames order): w1, w2, ...
	Workers     map[string]*Stack
	WorkerNames []string
}

// MultiKueueCheck is the manager's MultiKueue admission check; its MultiKueueConfig has the same name.
const MultiKueueCheck = "multikueue"

// UpMultiKueue starts a manager stack in opts.Dir/manager and workers stacks in opts.Dir/w1, w2, ...,
// all with opts (Kueue and ManagerBinary required: each operator runs in a process of its own), and
// connects them: a kubeconfig Secret and a MultiKueueCluster per worker on the manager, one
// MultiKueueConfig and the admission check MultiKueueCheck. lost is Kueue's workerLostTimeout.
func UpMultiKueue(ctx context.Context, opts Options, workers int, lost time.Duration) (*MultiKueue, error) {
	if opts.Kueue == "" || opts.ManagerBinary == "" {
		return nil, errors.New("a MultiKueue stack needs Kueue (hack/kueue.sh) and the manager binary (make build)")
	}
	m := &MultiKueue{Workers: map[string]*Stack{}}
	base := opts.Dir
	up := func(name string, o Options) (*Stack, error) {
		o.Dir = filepath.Join(base, name)
		if err := os.MkdirAll(o.Dir, 0o755); err != nil {
			return nil, err
		}
		o.Log, o.ClusterName = opts.Log.WithName(name), name
		return Up(ctx, o)
	}
	mo := opts
	mo.Nodes, mo.MultiKueueManager, mo.MetricsAddr = 1, lost, opts.MetricsAddr
	var err error
	if m.Manager, err = up("manager", mo); err != nil {
		return nil, fmt.Errorf("the manager cluster: %w", err)
	}
	for i := 1; i <= workers; i++ {
		name := fmt.Sprintf("w%d", i)
		wo := opts
		wo.MetricsAddr = "0" // one Prometheus reads one operator: the manager's
		s, err := up(name, wo)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("worker cluster %s: %w", name, err), m.Down())
		}
		m.Workers[name], m.WorkerNames = s, append(m.WorkerNames, name)
	}
	if err := m.connect(ctx); err != nil {
		return nil, errors.Join(err, m.Down())
	}
	return m, nil
}

// connect makes the manager's Kueue reach every worker and waits until each MultiKueueCluster and the
// admission check are active.
func (m *MultiKueue) connect(ctx context.Context) error {
	c := m.Manager.Client
	for _, name := range m.WorkerNames {
		kc, err := os.ReadFile(m.Workers[name].Cluster.Kubeconfig)
		if err != nil {
			return err
		}
		objs := []client.Object{
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: KueueNamespace, Name: name + "-kubeconfig"},
				Data: map[string][]byte{kueue.MultiKueueConfigSecretKey: kc}},
			&kueue.MultiKueueCluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kueue.MultiKueueClusterSpec{
				ClusterSource: kueue.ClusterSource{KubeConfig: &kueue.KubeConfig{Location: name + "-kubeconfig",
					LocationType: kueue.SecretLocationType}}}},
		}
		if err := createAll(ctx, c, objs...); err != nil {
			return err
		}
	}
	err := createAll(ctx, c,
		&kueue.MultiKueueConfig{ObjectMeta: metav1.ObjectMeta{Name: MultiKueueCheck}, Spec: kueue.MultiKueueConfigSpec{Clusters: m.WorkerNames}},
		&kueue.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: MultiKueueCheck}, Spec: kueue.AdmissionCheckSpec{
			ControllerName: names.MultiKueueController,
			Parameters: &kueue.AdmissionCheckParametersReference{APIGroup: kueue.SchemeGroupVersion.Group, Kind: "MultiKueueConfig",
				Name: MultiKueueCheck}}})
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range m.WorkerNames {
			mkc := &kueue.MultiKueueCluster{}
			if err := c.Get(ctx, client.ObjectKey{Name: name}, mkc); err != nil || !meta.IsStatusConditionTrue(mkc.Status.Conditions, "Active") {
				return false, client.IgnoreNotFound(err)
			}
		}
		ac := &kueue.AdmissionCheck{}
		err := c.Get(ctx, client.ObjectKey{Name: MultiKueueCheck}, ac)
		return err == nil && meta.IsStatusConditionTrue(ac.Status.Conditions, kueue.AdmissionCheckActive), client.IgnoreNotFound(err)
	})
}

// Clusters returns the manager and the workers, the manager first.
func (m *MultiKueue) Clusters() []*Stack {
	out := []*Stack{m.Manager}
	for _, name := range m.WorkerNames {
		out = append(out, m.Workers[name])
	}
	return out
}

// Queue makes queue lq in namespace ns on every cluster (the namespace too, where missing): on the
// manager a ClusterQueue cq with the admission check MultiKueueCheck and the quota of all the workers
// together, on each worker a ClusterQueue cq with its quota from quotas (CPU, by worker name; 0 where
// absent), all of one ResourceFlavor, default.
func (m *MultiKueue) Queue(ctx context.Context, ns, cq, lq string, quotas map[string]resource.Quantity) error {
	total := resource.Quantity{}
	for _, q := range quotas {
		total.Add(q)
	}
	for i, s := range m.Clusters() {
		quota := total
		if i > 0 {
			quota = quotas[m.WorkerNames[i-1]]
		}
		spec := kueue.ClusterQueueSpec{
			NamespaceSelector: &metav1.LabelSelector{},
			ResourceGroups: []kueue.ResourceGroup{{CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
				Flavors: []kueue.FlavorQuotas{{Name: "default", Resources: []kueue.ResourceQuota{{Name: corev1.ResourceCPU, NominalQuota: quota}}}}}},
		}
		if i == 0 {
			spec.AdmissionChecksStrategy = &kueue.AdmissionChecksStrategy{
				AdmissionChecks: []kueue.AdmissionCheckStrategyRule{{Name: MultiKueueCheck}}}
		}
		err := createAll(ctx, s.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
			&kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
			&kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: cq}, Spec: spec},
			&kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: lq},
				Spec: kueue.LocalQueueSpec{ClusterQueue: kueue.ClusterQueueReference(cq)}})
		if err != nil {
			return err
		}
	}
	return nil
}

// createAll creates objs; one that exists already is left as it is.
func createAll(ctx context.Context, c client.Client, objs ...client.Object) error {
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// Down stops every cluster.
func (m *MultiKueue) Down() error {
	var errs []error
	for _, s := range m.Clusters() {
		if s != nil {
			errs = append(errs, s.Down())
		}
	}
	return errors.Join(errs...)
}

// WriteKubeconfig writes one kubeconfig with a context per cluster (manager, w1, w2, ...), the manager's
// current, and returns its path (Dir/kubeconfig of the manager's parent directory).
func (m *MultiKueue) WriteKubeconfig() (string, error) {
	merged := clientcmdapi.NewConfig()
	for i, s := range m.Clusters() {
		name := "manager"
		if i > 0 {
			name = m.WorkerNames[i-1]
		}
		cfg, err := clientcmd.LoadFromFile(s.Cluster.Kubeconfig)
		if err != nil {
			return "", err
		}
		ctx := cfg.Contexts[cfg.CurrentContext]
		if ctx == nil {
			return "", fmt.Errorf("%s has no current context", s.Cluster.Kubeconfig)
		}
		merged.Clusters[name] = cfg.Clusters[ctx.Cluster]
		merged.AuthInfos[name] = cfg.AuthInfos[ctx.AuthInfo]
		merged.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	}
	merged.CurrentContext = "manager"
	path := filepath.Join(filepath.Dir(m.Manager.opts.Dir), "kubeconfig")
	return path, clientcmd.WriteToFile(*merged, path)
}
