package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/deploy"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/cluster"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// The chart, and the release the tests install: named as deploy/ names its objects.
const (
	releaseName = "trainingjob-operator"
	releaseNS   = "trainingjob-system"
)

var chartDir = filepath.Join(testenv.RepoRoot(), "deploy", "helm", "trainingjob-operator")

// metricsCertDir is where the chart mounts metrics.certSecret.
const metricsCertDir = "/etc/trainingjob-operator/metrics-certs"

// tool runs a command (helm or kubectl) and returns its standard output.
func tool(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr, cmd.Dir = &stdout, &stderr, testenv.RepoRoot()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.Bytes()
}

// helm returns the helm command built by hack/helm.sh (make test sets HELM); kubectl is in the control plane's
// assets (hack/testbin.sh builds it). The tests fail without them: they never skip.
func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	bin := os.Getenv("HELM")
	if bin == "" {
		t.Fatal("HELM is not set: run the tests with `make test`, which builds helm with hack/helm.sh")
	}
	return tool(t, bin, args...)
}

func kubectl(t *testing.T, args ...string) []byte {
	t.Helper()
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	return tool(t, filepath.Join(assets, "kubectl"), args...)
}

func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	objs, err := deploy.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// helmOnly are the labels and annotations only the chart's objects carry.
var helmOnly = []string{
	"app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart", "helm.sh/resource-policy",
}

// byKey indexes objects by kind/namespace/name without Helm's own labels and annotations.
func byKey(objs []*unstructured.Unstructured) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, o := range objs {
		for _, field := range []string{"labels", "annotations"} {
			m, _, _ := unstructured.NestedStringMap(o.Object, "metadata", field)
			for _, k := range helmOnly {
				delete(m, k)
			}
			if len(m) == 0 {
				unstructured.RemoveNestedField(o.Object, "metadata", field)
			} else {
				_ = unstructured.SetNestedStringMap(o.Object, m, "metadata", field)
			}
		}
		if !isNamespaced(o.GetKind()) {
			// kustomize 5.8 does not know ValidatingAdmissionPolicy is cluster-scoped and gives it the
			// namespace (which the API server ignores).
			unstructured.RemoveNestedField(o.Object, "metadata", "namespace")
		}
		out[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = o.Object
	}
	return out
}

// TestHelmChartMatchesKustomize: with its default values (and monitoring on) the chart renders the objects
// `kubectl kustomize` renders of deploy/ and deploy/monitoring, field for field. Allowed differences: Helm's
// labels, the CRD's keep policy, and the Namespace (helm install --create-namespace creates it; deploy/
// also labels it for Pod Security's restricted level).
func TestHelmChartMatchesKustomize(t *testing.T) {
	helm(t, "lint", "--strict", chartDir)
	rendered := helm(t, "template", releaseName, chartDir, "--namespace", releaseNS, "--kube-version", "1.36.3",
		"--set", "metrics.serviceMonitor.enabled=true,metrics.podMonitor.enabled=true,"+
			"metrics.prometheusRule.enabled=true,metrics.dashboard.enabled=true")
	kustomized := append(decode(t, kubectl(t, "kustomize", "deploy")),
		decode(t, kubectl(t, "kustomize", filepath.Join("deploy", "monitoring")))...)
	kustomized = slices.DeleteFunc(kustomized, func(o *unstructured.Unstructured) bool { return o.GetKind() == "Namespace" })
	if diff := cmp.Diff(byKey(kustomized), byKey(decode(t, rendered))); diff != "" {
		t.Errorf("kubectl kustomize deploy/ (-) vs helm template (+):\n%s", diff)
	}
}

// TestHelmValues: each value reaches the manager's flags or the pod.
func TestHelmValues(t *testing.T) {
	rendered := helm(t, "template", "ml", chartDir, "--namespace", "ml-system", "--kube-version", "1.36.3",
		"--set", "leaderElection.enabled=false,watchNamespaces={team-a,team-b},defaultImages.pytorch=registry.local/pytorch:2.5",
		"--set", "gpuResourceName=amd.com/gpu,checkpoint.defaultStorage=s3://ckpt/runs,checkpoint.defaultClaimSize=50Gi",
		"--set", "checkpoint.defaultStorageClass=efs,mlflow.trackingUri=http://mlflow:5000,mlflow.credentialsSecret=mlflow",
		"--set", "inputs.cache=PerNode,inputs.nodeCacheDir=/var/lib/tj-inputs,inputs.nodeCacheTTL=72h,"+
			"inputs.nodeCachePruner.namespace=node-cache",
		"--set", "extraArgs={--progress-interval=10s},replicaCount=2,nodeSelector.pool=system,command={/manager}",
		"--set", "crds.install=false,admissionPolicy.enabled=false,metrics.service.enabled=false")
	var dep appsv1.Deployment
	var pruner appsv1.DaemonSet
	var kinds []string
	for _, o := range decode(t, rendered) {
		kinds = append(kinds, o.GetKind())
		into := map[string]any{"Deployment": &dep, "DaemonSet": &pruner}[o.GetKind()]
		if into != nil {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
				t.Fatal(err)
			}
		}
	}
	slices.Sort(kinds)
	// The operator's ClusterRole (cluster-scoped rules only) and the metrics reader's; the operator's Role in
	// ml-system (leader election) and in team-a and team-b (TestHelmRBACWatchNamespaces).
	// The node cache pruner, a DaemonSet, with inputs.nodeCacheDir.
	want := []string{"ClusterRole", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "Deployment", "Role", "Role", "Role",
		"RoleBinding", "RoleBinding", "RoleBinding", "ServiceAccount"}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	want = []string{"--metrics-bind-address=:8443", "--health-probe-bind-address=:8081", "--watch-namespaces=team-a,team-b",
		"--default-image-pytorch=registry.local/pytorch:2.5", "--gpu-resource-name=amd.com/gpu", "--default-checkpoint-storage=s3://ckpt/runs",
		"--default-checkpoint-claim-size=50Gi", "--default-checkpoint-storage-class=efs", "--mlflow-tracking-uri=http://mlflow:5000",
		"--mlflow-credentials-secret=ml-system/mlflow", "--inputs-cache=PerNode", "--inputs-node-cache-dir=/var/lib/tj-inputs",
		"--inputs-node-cache-max-size=100Gi", "--progress-interval=10s"}
	type manager struct {
		Name           string
		Replicas       int32
		Command, Args  []string
		NodeSelector   map[string]string
		ServiceAccount string
	}
	got := manager{
		Name:           dep.Name,
		Replicas:       *dep.Spec.Replicas,
		Command:        c.Command,
		Args:           c.Args,
		NodeSelector:   dep.Spec.Template.Spec.NodeSelector,
		ServiceAccount: dep.Spec.Template.Spec.ServiceAccountName,
	}
	wantManager := manager{
		Name:           "ml-trainingjob-operator",
		Replicas:       2,
		Command:        []string{"/manager"},
		Args:           want,
		NodeSelector:   map[string]string{"pool": "system"},
		ServiceAccount: "ml-trainingjob-operator",
	}
	if diff := cmp.Diff(wantManager, got); diff != "" {
		t.Errorf("name, replicas, command, args, nodeSelector, service account (-want +got):\n%s", diff)
	}
	// The pruner: in its own namespace, the whole node cache mounted, the TTL given, on every node.
	type prunerPod struct {
		Namespace     string
		Command, Args []string
		HostPath      string
		Tolerations   []corev1.Toleration
		Token         bool
	}
	pc := pruner.Spec.Template.Spec
	gotPruner := prunerPod{
		Namespace:   pruner.Namespace,
		Command:     pc.Containers[0].Command,
		Args:        pc.Containers[0].Args,
		HostPath:    pc.Volumes[0].HostPath.Path,
		Tolerations: pc.Tolerations,
		Token:       ptr.Deref(pc.AutomountServiceAccountToken, true),
	}
	wantPruner := prunerPod{
		Namespace:   "node-cache",
		Command:     []string{"/manager"},
		Args:        []string{"prune-node-cache", "--dir=/node-cache", "--ttl=72h"},
		HostPath:    "/var/lib/tj-inputs",
		Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		Token:       false,
	}
	if diff := cmp.Diff(wantPruner, gotPruner); diff != "" {
		t.Errorf("the node cache pruner: namespace, command, args, hostPath, tolerations, token (-want +got):\n%s", diff)
	}
}

// TestHelmMetricsValues: the metrics values reach the manager's flags, its pod, the ServiceMonitor and a
// NetworkPolicy: a certificate Secret is mounted and trusted by CA and name; insecureHTTP is plain HTTP
// without a token; the NetworkPolicy admits only the monitoring namespace to the metrics port.
func TestHelmMetricsValues(t *testing.T) {
	render := func(set string) map[string]*unstructured.Unstructured {
		out := map[string]*unstructured.Unstructured{}
		for _, o := range decode(t, helm(t, "template", "ml", chartDir, "--namespace", "ml-system", "--kube-version", "1.36.3",
			"--set", "metrics.serviceMonitor.enabled=true,"+set)) {
			out[o.GetKind()+"/"+o.GetName()] = o
		}
		return out
	}
	// metricsFlags: the manager has --metrics-insecure-http, --metrics-cert-dir, a mount of the certificate.
	type metricsFlags struct {
		InsecureHTTP, CertDir, CertMount bool
	}
	cases := []struct {
		name, set string
		// want are paths (kind/name:field.field) and their values in the rendered objects.
		want  map[string]any
		flags metricsFlags
	}{{
		name: "certificate Secret and NetworkPolicy",
		set:  "metrics.certSecret=metrics-tls,metrics.networkPolicy.enabled=true",
		want: map[string]any{
			"Deployment/ml-trainingjob-operator:spec.template.spec.volumes": []any{
				map[string]any{"name": "metrics-certs", "secret": map[string]any{"secretName": "metrics-tls"}},
			},
			"ServiceMonitor/ml-trainingjob-operator:spec.endpoints": []any{map[string]any{"port": "metrics", "path": "/metrics", "interval": "15s",
				"scheme": "https", "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
				"tlsConfig": map[string]any{"ca": map[string]any{"secret": map[string]any{"name": "metrics-tls", "key": "ca.crt"}},
					"serverName": "ml-trainingjob-operator-metrics.ml-system.svc"}}},
			"NetworkPolicy/ml-trainingjob-operator-metrics:spec.ingress": []any{map[string]any{
				"from": []any{map[string]any{"namespaceSelector": map[string]any{
					"matchLabels": map[string]any{"kubernetes.io/metadata.name": "monitoring"}}}},
				"ports": []any{map[string]any{"port": "metrics", "protocol": "TCP"}}}},
		},
		flags: metricsFlags{InsecureHTTP: false, CertDir: true, CertMount: true},
	}, {
		name: "the workers' NetworkPolicy",
		set:  "workerNetworkPolicy.enabled=true,workerNetworkPolicy.namespaces[0]=team-a",
		want: map[string]any{
			"NetworkPolicy/ml-trainingjob-operator-workers:metadata.namespace": "team-a",
			"NetworkPolicy/ml-trainingjob-operator-workers:spec.podSelector": map[string]any{"matchExpressions": []any{
				map[string]any{"key": "ml.example.com/trainingjob-name", "operator": "Exists"}}},
			"NetworkPolicy/ml-trainingjob-operator-workers:spec.ingress": []any{map[string]any{"from": []any{
				map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "ml-system"}},
					"podSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "trainingjob-operator"}}},
				map[string]any{"podSelector": map[string]any{"matchExpressions": []any{
					map[string]any{"key": "ml.example.com/trainingjob-name", "operator": "Exists"}}}}}}},
		},
	}, {
		name: "plain HTTP",
		set:  "metrics.insecureHTTP=true",
		want: map[string]any{
			"ServiceMonitor/ml-trainingjob-operator:spec.endpoints": []any{
				map[string]any{"port": "metrics", "path": "/metrics", "interval": "15s", "scheme": "http"},
			},
			"NetworkPolicy/ml-trainingjob-operator-metrics:spec.ingress": nil,
		},
		flags: metricsFlags{InsecureHTTP: true, CertDir: false, CertMount: false},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(tc.set)
			for path, want := range tc.want {
				key, field, _ := strings.Cut(path, ":")
				var got any
				if o := objs[key]; o != nil {
					got, _, _ = unstructured.NestedFieldNoCopy(o.Object, strings.Split(field, ".")...)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s (-want +got):\n%s", path, diff)
				}
			}
			containers, _, _ := unstructured.NestedSlice(objs["Deployment/ml-trainingjob-operator"].Object, "spec", "template", "spec", "containers")
			manager := containers[0].(map[string]any)
			args, _, _ := unstructured.NestedStringSlice(manager, "args")
			mounts, _, _ := unstructured.NestedSlice(manager, "volumeMounts")
			got := metricsFlags{
				InsecureHTTP: slices.Contains(args, "--metrics-insecure-http"),
				CertDir:      slices.Contains(args, "--metrics-cert-dir="+metricsCertDir),
				CertMount:    len(mounts) == 1,
			}
			if diff := cmp.Diff(tc.flags, got); diff != "" {
				t.Errorf("--metrics-insecure-http, --metrics-cert-dir, the certificate's mount (-want +got):\n%s\nargs %v", diff, args)
			}
		})
	}
}

// TestHelmInstallUpgradeUninstall installs the chart into a control plane without the TrainingJob API,
// runs the operator with the installed Deployment's flags as the chart's ServiceAccount (RBAC applies:
// its rules are all the operator has), drives a TrainingJob to Completed with the real Job controller,
// upgrades the release, and uninstalls it: the CRD and the TrainingJobs stay.
func TestHelmInstallUpgradeUninstall(t *testing.T) {
	bare, err := testenv.Start(func(o *cluster.Options) { o.Bare = true })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bare.Stop() })
	kc := []string{"--kubeconfig", bare.Kubeconfig}
	ctx := context.Background()
	ns := "team-a"
	if err := bare.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	helm(t, append(kc, "install", releaseName, chartDir, "--namespace", releaseNS, "--create-namespace",
		"--set", "watchNamespaces={"+ns+"}")...)
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := bare.Client.Get(ctx, client.ObjectKey{Name: "trainingjobs.ml.example.com"}, crd); err != nil {
		t.Fatalf("the chart's CRD: %v", err)
	}
	dep := operatorRunsAsInstalled(t, bare, ns)
	if args := dep.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--watch-namespaces="+ns) {
		t.Errorf("installed args %v lack --watch-namespaces=%s", args, ns)
	}

	helm(t, append(kc, "upgrade", releaseName, chartDir, "--namespace", releaseNS, "--reuse-values",
		"--set", "extraArgs={--progress-interval=10s}")...)
	if err := bare.Client.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
		t.Fatal(err)
	}
	if args := dep.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--progress-interval=10s") ||
		!slices.Contains(args, "--watch-namespaces="+ns) {
		t.Errorf("upgraded args %v", args)
	}
	if out := string(helm(t, append(kc, "history", releaseName, "--namespace", releaseNS)...)); !strings.Contains(out, "Upgrade complete") {
		t.Errorf("helm history:\n%s", out)
	}

	helm(t, append(kc, "uninstall", releaseName, "--namespace", releaseNS)...)
	if err := bare.Client.Get(ctx, client.ObjectKeyFromObject(dep), dep); !apierrors.IsNotFound(err) {
		t.Errorf("deployment after uninstall: %v", err)
	}
	if err := bare.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "installed"}, &mlv1.TrainingJob{}); err != nil {
		t.Errorf("the TrainingJob after uninstall (the CRD is kept): %v", err)
	}
}

// TestKustomizeInstall: `kubectl apply -k deploy/`, as the README says, installs an operator that runs a
// TrainingJob to Completed.
func TestKustomizeInstall(t *testing.T) {
	bare, err := testenv.Start(func(o *cluster.Options) { o.Bare = true })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bare.Stop() })
	if err := bare.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}}); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "--kubeconfig", bare.Kubeconfig, "apply", "-k", "deploy")
	operatorRunsAsInstalled(t, bare, "team-b")
}

// operatorRunsAsInstalled reads the installed Deployment, runs the operator as it says (runInstalledOperator)
// with the real Job controller, and drives a TrainingJob in ns to Completed. It returns the Deployment.
func operatorRunsAsInstalled(t *testing.T, c *testenv.Env, ns string) *appsv1.Deployment {
	t.Helper()
	dep := &appsv1.Deployment{}
	if err := c.Client.Get(context.Background(), client.ObjectKey{Namespace: releaseNS, Name: releaseName}, dep); err != nil {
		t.Fatal(err)
	}
	runInstalledOperator(t, c, dep.Spec.Template.Spec.Containers[0].Args)
	p, err := c.StartControllerManager([]string{"job", "garbagecollector"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	completeJob(t, c, tjtest.NewTJ(ns, "installed").Workers(1).GPUs(0).Image("busybox:1.36", "train").Obj())
	return dep
}

// runInstalledOperator runs the manager built from this tree with the Deployment's flags, as the chart's
// ServiceAccount, until the test ends. The process nodes of the local stack cannot give a pod Kubernetes'
// in-cluster identity, so the manager gets a kubeconfig authenticating as that ServiceAccount instead.
func runInstalledOperator(t *testing.T, c *testenv.Env, args []string) {
	t.Helper()
	sa := "system:serviceaccount:" + releaseNS + ":" + releaseName
	kubeconfig, err := c.UserKubeconfig("chart-operator.kubeconfig", sa, "system:serviceaccounts", "system:serviceaccounts:"+releaseNS)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := testenv.BuildWorkerTools(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	args = append(slices.Clone(args), "--kubeconfig="+kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--leader-election-namespace="+releaseNS, "--progress-interval=300ms")
	var out bytes.Buffer
	cmd := exec.Command(filepath.Join(bin, "manager"), args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("manager output:\n%s", out.String())
		}
	})
}

// completeJob creates tj in c and plays the kubelet until it is Completed.
func completeJob(t *testing.T, c *testenv.Env, tj *mlv1.TrainingJob) {
	t.Helper()
	ctx := context.Background()
	if err := c.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	eventually(t, "the worker pod", func(ctx context.Context) error {
		if err := c.Client.List(ctx, &pods, client.InNamespace(tj.Namespace)); err != nil || len(pods.Items) != 1 {
			return fmt.Errorf("%d pods (%v)", len(pods.Items), err)
		}
		return nil
	})
	pod := pods.Items[0]
	for _, step := range []struct {
		phase corev1.PodPhase
		state corev1.ContainerState
		want  mlv1.State
	}{
		{phase: corev1.PodRunning, state: running(), want: mlv1.StateRunning},
		{phase: corev1.PodSucceeded, state: terminated(0, "Completed"), want: mlv1.StateCompleted},
	} {
		setPodStatusIn(t, c.Client, &pod, step.phase, step.state, 0)
		eventually(t, "TrainingJob "+string(step.want), func(ctx context.Context) error {
			got := &mlv1.TrainingJob{}
			if err := c.Client.Get(ctx, client.ObjectKeyFromObject(tj), got); err != nil || got.Status.State != step.want {
				return fmt.Errorf("state %q (%v)", got.Status.State, err)
			}
			return nil
		})
	}
}
