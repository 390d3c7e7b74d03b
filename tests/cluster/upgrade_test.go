//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

// TestKustomizeInstall: the README's other install. After `helm uninstall` (which keeps the CRD and every
// TrainingJob), `kubectl apply -k deploy/` installs the operator in-cluster again, and it runs a new job
// to Completed. It runs last (its file sorts after the others): it replaces the operator.
func TestKustomizeInstall(t *testing.T) {
	if out, err := exec.Command(os.Getenv("HELM"), "uninstall", "trainingjob-operator", "--kubeconfig", stack.Cluster.Kubeconfig,
		"--namespace", operatorNamespace, "--wait").CombinedOutput(); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	eventually(t, time.Minute, "the chart's operator pod gone", func() error {
		pods := &corev1.PodList{}
		if err := stack.Client.List(context.Background(), pods, client.InNamespace(operatorNamespace)); err != nil || len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left (%v)", len(pods.Items), err)
		}
		return nil
	})
	kubectl(t, "apply", "-k", testenv.RepoRoot()+"/deploy")
	kubectl(t, "rollout", "status", "-n", operatorNamespace, "deployment/trainingjob-operator", "--timeout=3m")
	ns := stacktest.NewNamespace(t, stack.Client, "kustomize")
	tj := example(t, "trainingjob-local.yaml", ns)
	tj.Spec.Hyperparameters.Epochs = ptr.To[int32](4)
	stacktest.Create(t, stack.Client, tj)
	if done := waitForEnd(t, ns, tj.Name, 3*time.Minute); done.Status.State != mlv1.StateCompleted {
		t.Fatalf("state %s: %s", done.Status.State, done.Status.FailureReason)
	}
	if p := operatorPod(t); p.Spec.ServiceAccountName != "trainingjob-operator" {
		t.Errorf("the kustomize operator's pod %s runs as %q", p.Name, p.Spec.ServiceAccountName)
	}
}
