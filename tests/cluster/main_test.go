//go:build cluster

// Package cluster is the end-to-end suite on real nodes: the local stack with real kubelets, containerd
// and runc (package local/realnode), the cluster DNS and kube-proxy, images built from this repository
// (package local/images), and the operator installed in-cluster by its Helm chart, running as a pod with
// its ServiceAccount in a namespace that enforces Pod Security "restricted". Every case runs real
// containers. make test-cluster runs it (root, Linux).
package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/internal/local"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/images"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/realnode"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

var stack *local.Stack

const (
	// realNodes is how many real nodes the suite runs: the operator's pod is kept on the last
	// (operatorNode), so that losing another never loses the operator; the workers use all of them.
	realNodes = 3
	// operatorNamespace is where the chart installs the operator.
	operatorNamespace = "trainingjob-system"
	// operatorNode is the node the chart's operator runs on.
	operatorNode = "real-node-2"
	// prunerNamespace runs the chart's node cache pruner: its hostPath needs Pod Security "privileged",
	// which the operator's namespace does not allow.
	prunerNamespace = "trainingjob-node-cache"
	// defaultProxy is the value of TEAM_PROXY, an environment variable of the cluster's worker defaults.
	defaultProxy = "http://proxy.example:3128"
)

func TestMain(m *testing.M) {
	assets, helm, rootfs := os.Getenv("NODE_ASSETS"), os.Getenv("HELM"), os.Getenv("RUNNER_ROOTFS")
	if assets == "" || helm == "" || rootfs == "" {
		fmt.Fprintln(os.Stderr, "cluster: NODE_ASSETS, HELM or RUNNER_ROOTFS is not set: "+
			"run make test-cluster (hack/node.sh, hack/helm.sh and hack/rootfs.sh build them)")
		os.Exit(1)
	}
	tars, err := images.Build(testenv.RepoRoot(), images.CacheDir(), rootfs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
	code := stacktest.Main(m, "cluster", &stack, func(o *local.Options, _ string) {
		o.RealNodes, o.NodeAssets, o.Images, o.InClusterOperator = realNodes, assets, tars, true
		o.Installs = func(s *local.Stack) error { return installOperator(s, helm) }
	})
	// Stopping the stack removes every process, bridge, address, rule and cgroup the real nodes made.
	if left := realnode.Leftovers(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "cluster: the stopped stack left behind:\n  %s\n", strings.Join(left, "\n  "))
		code = 1
	}
	os.Exit(code)
}

// installOperator installs the operator as a user does: its namespace labelled for Pod Security
// "restricted", then `helm install` of the chart, whose defaults name the operator image built here;
// short intervals keep the tests quick. It returns once the operator's pod is ready.
func installOperator(s *local.Stack, helm string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}}
	if err := s.Client.Create(context.Background(), ns); err != nil {
		return err
	}
	prunerNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prunerNamespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "privileged"}}}
	if err := s.Client.Create(context.Background(), prunerNS); err != nil {
		return err
	}
	if err := seedNodeCache(s.NodeCacheDir()); err != nil { // TestNodeCachePrunerOnRealNodes
		return err
	}
	cmd := exec.Command(helm, "install", "trainingjob-operator", testenv.RepoRoot()+"/deploy/helm/trainingjob-operator",
		"--kubeconfig", s.Cluster.Kubeconfig, "--namespace", operatorNamespace, "--wait", "--timeout", "3m",
		"--set", "extraArgs={--progress-interval=1s,--checkpoint-sync-interval=2s}",
		"--set", `nodeSelector.kubernetes\.io/hostname=`+operatorNode,
		"--set", "inputs.nodeCacheDir="+s.NodeCacheDir(), // TestInputsOnRealNodes' PerNode job
		// The pruner on the real nodes (a process node cannot run an image's entrypoint), in its namespace.
		"--set", "inputs.nodeCachePruner.namespace="+prunerNamespace,
		"--set-string", `inputs.nodeCachePruner.nodeSelector.ml\.example\.com/real-node=true`,
		// The platform team's worker defaults, beneath every job's own settings (TestWorkerPodOverrides).
		"--set-json", `workerDefaults={"labels": {"cost-center": "ml-platform", "billing": "gpu"}, `+
			`"env": [{"name": "TEAM_PROXY", "value": "`+defaultProxy+`"}]}`)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("helm install: %w\n%s", err, out)
	}
	return nil
}
