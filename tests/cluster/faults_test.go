//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
)

// TestCPUJobSeesNoGPU: a CPU-only job's trainer process runs with NVIDIA_VISIBLE_DEVICES=void in its
// environment, which NVIDIA's container runtime reads to expose no GPU.
func TestCPUJobSeesNoGPU(t *testing.T) {
	ns := stacktest.NewNamespace(t, stack.Client, "cpu")
	tj := example(t, "trainingjob-local.yaml", ns)
	tj.Spec.Args = []string{"--epoch-delay=500ms"}
	stacktest.Create(t, stack.Client, tj)
	node, id := runningContainer(t, ns, tj.Name, "0")
	if env := procFile(t, node, id, "environ"); !strings.Contains("\x00"+env+"\x00", "\x00NVIDIA_VISIBLE_DEVICES=void\x00") {
		t.Errorf("the trainer's environment lacks NVIDIA_VISIBLE_DEVICES=void: %q", env)
	}
}

// TestMissingImageIsNamed: a job whose image exists nowhere (no registry is reachable here) says why its
// workers do not run, naming the image, instead of sitting in Initializing.
func TestMissingImageIsNamed(t *testing.T) {
	ns := stacktest.NewNamespace(t, stack.Client, "noimage")
	tj := example(t, "trainingjob-local.yaml", ns)
	tj.Spec.Image = "ghcr.io/trainingjob-operator/no-such-image:v0"
	stacktest.Create(t, stack.Client, tj)
	eventually(t, 2*time.Minute, "the Running condition naming the image", func() error {
		c := meta.FindStatusCondition(getTJ(t, ns, tj.Name).Status.Conditions, mlv1.ConditionRunning)
		if c == nil || (c.Reason != "ImagePullBackOff" && c.Reason != "ErrImagePull") || !strings.Contains(c.Message, "no-such-image") {
			return fmt.Errorf("Running condition %+v", c)
		}
		return nil
	})
}

// TestDeletionCascades: deleting a running TrainingJob deletes its Job, Service, ConfigMap and pods, and
// the nodes stop its containers.
func TestDeletionCascades(t *testing.T) {
	ctx := context.Background()
	ns := stacktest.NewNamespace(t, stack.Client, "delete")
	tj := example(t, "trainingjob-local.yaml", ns)
	tj.Spec.Args = []string{"--epoch-delay=1s"}
	stacktest.Create(t, stack.Client, tj)
	node, id := runningContainer(t, ns, tj.Name, "0")
	if err := stack.Client.Delete(ctx, tj, client.PropagationPolicy("Background")); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{&batchv1.Job{}, &corev1.Service{}, &corev1.ConfigMap{}} {
		name := map[string]string{
			"*v1.Job": names.JobName(tj), "*v1.Service": names.ServiceName(tj), "*v1.ConfigMap": names.ConfigMapName(tj),
		}[fmt.Sprintf("%T", obj)]
		eventually(t, time.Minute, fmt.Sprintf("%T %s deleted", obj, name), func() error {
			if err := stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (%v)", err)
			}
			return nil
		})
	}
	eventually(t, 2*time.Minute, "the pods and their containers gone", func() error {
		if pods := workerPods(t, ns, tj.Name, 0); len(pods) > 0 {
			return fmt.Errorf("%d pods left", len(pods))
		}
		if _, err := node.Pid(id); err == nil {
			return fmt.Errorf("container %s still runs", id)
		}
		return nil
	})
}

// TestNodeLost: the node running rank 1 fails: its kubelet stops and its containers die at once, as when
// the machine goes. Rank 0 loses its peer and exits; the operator finds rank 1's pod stranded on a node
// that is not Ready, restarts the gang without counting it, naming the node, and the new attempt runs on
// the other worker node. The node comes back afterwards. (Losing rank 0's node instead leaves rank 1
// waiting on a silent connection: a hang, which issue 27's detection is for.)
func TestNodeLost(t *testing.T) {
	ns, tj := spreadRun(t)
	lost := workerPods(t, ns, tj.Name, 0)["1"].Spec.NodeName
	node := stack.RealNodes[lost]
	if err := node.Lose(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := node.RestartKubelet(); err != nil {
			t.Error(err)
		}
		if err := stack.WaitForRealNodes(context.Background()); err != nil {
			t.Error(err)
		}
	})
	eventually(t, 3*time.Minute, "a gang restart", func() error {
		if st := getTJ(t, ns, tj.Name).Status; st.Attempt < 1 {
			return fmt.Errorf("attempt %d, state %s", st.Attempt, st.State)
		}
		return nil
	})
	eventually(t, 2*time.Minute, "both ranks of attempt 1 running on another node", func() error {
		pods := workerPods(t, ns, tj.Name, 1)
		for _, rank := range []string{"0", "1"} {
			p, ok := pods[rank]
			if !ok || p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("rank %s: %v", rank, p.Status.Phase)
			}
			if p.Spec.NodeName == lost {
				return fmt.Errorf("rank %s placed on the lost node %s", rank, lost)
			}
		}
		return nil
	})
	st := getTJ(t, ns, tj.Name).Status
	if !strings.Contains(st.LastFailure, lost) || st.RestartCount != 0 {
		t.Errorf("lastFailure %q, %d restarts counted: want the lost node %s named and none counted", st.LastFailure, st.RestartCount, lost)
	}
}

// spreadRun starts a long run of the example whose two ranks train together on two different nodes,
// neither the operator's: the scheduler spreads them by preference (the new attempt after a loss may share
// a node), and a run it placed together is started again.
func spreadRun(t *testing.T) (string, *mlv1.TrainingJob) {
	t.Helper()
	for try := 0; try < 3; try++ {
		ns := stacktest.NewNamespace(t, stack.Client, "nodelost")
		tj := example(t, "trainingjob-local.yaml", ns)
		tj.Spec.Args = []string{"--epoch-delay=1s"}
		tj.Spec.Hyperparameters.Epochs = ptr.To[int32](60)
		tj.Spec.Scheduling = &mlv1.SchedulingSpec{Affinity: &corev1.Affinity{
			NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpNotIn, Values: []string{operatorNode}}}}}}},
			PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
				Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: corev1.LabelHostname,
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{names.NameLabel: tj.Name}}}}}},
		}}
		stacktest.Create(t, stack.Client, tj)
		runningContainer(t, ns, tj.Name, "0")
		runningContainer(t, ns, tj.Name, "1")
		if pods := workerPods(t, ns, tj.Name, 0); pods["0"].Spec.NodeName != pods["1"].Spec.NodeName {
			// Running containers have not met yet: a rank lost before the rendezvous leaves the other
			// waiting for it (a hang, not the peer loss these tests are about). An epoch in the status
			// means they have met.
			eventually(t, 2*time.Minute, "the ranks training together", func() error {
				if st := getTJ(t, ns, tj.Name).Status; st.CurrentEpoch < 1 {
					return fmt.Errorf("epoch %d, state %s", st.CurrentEpoch, st.State)
				}
				return nil
			})
			return ns, tj
		}
		if err := stack.Client.Delete(context.Background(), tj); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("the scheduler placed both ranks on one node three times")
	return "", nil
}
