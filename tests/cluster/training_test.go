//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/deploy"
	"github.com/trainingjob-operator/trainingjob-operator/local/realnode"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

// eventually retries cond every half second until it passes or timeout, then fails the test with its last
// error.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func getTJ(t *testing.T, ns, name string) *mlv1.TrainingJob {
	t.Helper()
	tj := &mlv1.TrainingJob{}
	if err := stack.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, tj); err != nil {
		t.Fatal(err)
	}
	return tj
}

// example is a TrainingJob of examples/ as a user applies it, into namespace ns.
func example(t *testing.T, file, ns string) *mlv1.TrainingJob {
	t.Helper()
	objs, err := deploy.ReadFile(testenv.RepoRoot() + "/examples/" + file)
	if err != nil {
		t.Fatal(err)
	}
	tj := &mlv1.TrainingJob{}
	for _, o := range objs {
		if o.GetKind() == "TrainingJob" {
			o.SetNamespace(ns)
			if err := stack.Client.Scheme().Convert(o, tj, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	return tj
}

// waitForEnd waits until the job is Completed or Failed and returns it.
func waitForEnd(t *testing.T, ns, name string, timeout time.Duration) *mlv1.TrainingJob {
	t.Helper()
	var tj *mlv1.TrainingJob
	eventually(t, timeout, ns+"/"+name+" to end", func() error {
		tj = getTJ(t, ns, name)
		if s := tj.Status.State; s != mlv1.StateCompleted && s != mlv1.StateFailed {
			return fmt.Errorf("state %s (%v)", s, tj.Status.Conditions)
		}
		return nil
	})
	return tj
}

// kubectl runs the real kubectl against the stack.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(assets+"/kubectl", append([]string{"--kubeconfig", stack.Cluster.Kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// spread places a job's ranks on different nodes, so that they talk across nodes.
func spread(tj *mlv1.TrainingJob) {
	tj.Spec.Scheduling = &mlv1.SchedulingSpec{Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: corev1.LabelHostname,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{builders.NameLabel: tj.Name}}}},
	}}}
}

// TestExampleOverClusterDNS: the README's first example (two ranks of the example trainer, checkpoints on
// a claim the operator creates) in real containers, one rank per node: rank 1 finds rank 0 through the
// cluster DNS and reaches it across nodes, the run completes with its progress and checkpoints in the
// status, and kubectl logs reads rank 0's container.
func TestExampleOverClusterDNS(t *testing.T) {
	ns := stacktest.NewNamespace(t, stack.Client, "example")
	tj := example(t, "trainingjob-local.yaml", ns)
	tj.Spec.Args = []string{"--epoch-delay=300ms"}
	spread(tj)
	stacktest.Create(t, stack.Client, tj)
	done := waitForEnd(t, ns, tj.Name, 4*time.Minute)
	st := done.Status
	if st.State != mlv1.StateCompleted {
		t.Fatalf("state %s: %s (%v)", st.State, st.FailureReason, st.Conditions)
	}
	got := fmt.Sprintf("%s epoch %d/%d", st.Progress, st.CurrentEpoch, st.TotalEpochs)
	if st.Checkpoint != nil {
		got += fmt.Sprintf(" checkpoint %d", st.Checkpoint.LatestEpoch)
	}
	if want := "100% epoch 10/10 checkpoint 10"; got != want {
		t.Errorf("status says %q, want %q", got, want)
	}
	if st.Metrics == nil || st.Metrics.Loss == nil {
		t.Errorf("no metrics scraped from rank 0: %+v", st.Metrics)
	}
	pods := &corev1.PodList{}
	if err := stack.Client.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{builders.NameLabel: tj.Name}); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	for _, p := range pods.Items {
		nodes[p.Spec.NodeName] = true
		node := &corev1.Node{}
		if err := stack.Client.Get(context.Background(), client.ObjectKey{Name: p.Spec.NodeName}, node); err != nil || node.Labels[realnode.RealNodeLabel] != "true" {
			t.Errorf("pod %s ran on %q, not a real node (%v)", p.Name, p.Spec.NodeName, err)
		}
		if p.Labels[builders.RankLabel] == "0" {
			if log := kubectl(t, "logs", "-n", ns, p.Name, "-c", builders.ContainerName); !strings.Contains(log, "training complete: 10 epochs on 2 ranks") {
				t.Errorf("kubectl logs of rank 0:\n%s", log)
			}
		}
	}
	if len(nodes) != 2 {
		t.Errorf("the ranks ran on %v, want two nodes", nodes)
	}
}
