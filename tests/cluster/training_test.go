//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/deploy"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/realnode"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

var eventually = stacktest.Eventually

func getTJ(t *testing.T, ns, name string) *mlv1.TrainingJob {
	t.Helper()
	tj := &mlv1.TrainingJob{}
	if err := stack.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, tj); err != nil {
		t.Fatal(err)
	}
	return tj
}

// example returns a TrainingJob of examples/ as a user applies it, into namespace ns.
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
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{names.NameLabel: tj.Name}}}},
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
	// The StatusController settles the finished run's figures just after the end.
	eventually(t, 30*time.Second, "a completed run at epoch 10/10, 100%, newest checkpoint epoch 10", func() error {
		if got, want := stacktest.Settled(getTJ(t, ns, tj.Name).Status), "100% epoch 10/10 checkpoint 10"; got != want {
			return fmt.Errorf("status says %q, want %q", got, want)
		}
		return nil
	})
	// The non-root trainer's checkpoints are rotated by the agent (retention 3 of 5 written).
	checkRotated(t, done, 3)
	if st.Metrics == nil || st.Metrics.Loss == nil {
		t.Errorf("no metrics scraped from rank 0: %+v", st.Metrics)
	}
	pods := &corev1.PodList{}
	if err := stack.Client.List(context.Background(), pods, client.InNamespace(ns),
		client.MatchingLabels{names.NameLabel: tj.Name}); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	for _, p := range pods.Items {
		nodes[p.Spec.NodeName] = true
		node := &corev1.Node{}
		err := stack.Client.Get(context.Background(), client.ObjectKey{Name: p.Spec.NodeName}, node)
		if err != nil || node.Labels[realnode.RealNodeLabel] != "true" {
			t.Errorf("pod %s ran on %q, not a real node (%v)", p.Name, p.Spec.NodeName, err)
		}
		if p.Labels[names.RankLabel] == "0" {
			log := kubectl(t, "logs", "-n", ns, p.Name, "-c", names.ContainerName)
			if !strings.Contains(log, "training complete: 10 epochs on 2 ranks") {
				t.Errorf("kubectl logs of rank 0:\n%s", log)
			}
		}
	}
	if len(nodes) != 2 {
		t.Errorf("the ranks ran on %v, want two nodes", nodes)
	}
	// The kubectl plugin, on the PATH as a user installs it, reads the same run.
	plugins := stacktest.BuildPlugin(t)
	for args, want := range map[string]string{
		"trainingjob status " + tj.Name + " -n " + ns:        "Progress     100%, epoch 10/10",
		"trainingjob logs " + tj.Name + " --rank 0 -n " + ns: "training complete: 10 epochs on 2 ranks",
		"trainingjob checkpoints " + tj.Name + " -n " + ns:   "checkpoint-epoch-10",
	} {
		out, err := stacktest.Kubectl(t, stack, plugins, strings.Fields(args)...)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("kubectl %s: %v, want %q in:\n%s", args, err, want, out)
		}
	}
}

// checkRotated: the checkpoint agent rotated the checkpoints the trainer wrote down to retention (one
// more while the newest is not yet what a restart would resume from: the agent protects it until the
// operator has moved RESUME_FROM there) and says the storage is fine. Its final report, after the trainer
// ended, may reach the status a little after the end.
func checkRotated(t *testing.T, tj *mlv1.TrainingJob, retention int32) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%d checkpoints kept, storage ready", retention), func() error {
		st := getTJ(t, tj.Namespace, tj.Name).Status
		c := meta.FindStatusCondition(st.Conditions, mlv1.ConditionCheckpointStorageReady)
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("CheckpointStorageReady %+v", c)
		}
		if st.Checkpoint == nil || st.Checkpoint.Count < retention || st.Checkpoint.Count > retention+1 {
			return fmt.Errorf("checkpoints kept %+v", st.Checkpoint)
		}
		return nil
	})
}

// workerPods returns the job's pods of an attempt by rank (the newest when a rank's pod was replaced).
func workerPods(t *testing.T, ns, name string, attempt int) map[string]corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := stack.Client.List(context.Background(), pods, client.InNamespace(ns),
		client.MatchingLabels{names.NameLabel: name, names.AttemptLabel: fmt.Sprint(attempt)}); err != nil {
		t.Fatal(err)
	}
	byRank := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		if old, ok := byRank[p.Labels[names.RankLabel]]; !ok || old.CreationTimestamp.Before(&p.CreationTimestamp) {
			byRank[p.Labels[names.RankLabel]] = p
		}
	}
	return byRank
}

// runningContainer waits until rank's trainer container runs and returns its node and container ID.
func runningContainer(t *testing.T, ns, name, rank string) (*realnode.Node, string) {
	t.Helper()
	var node, id string
	eventually(t, 2*time.Minute, "rank "+rank+" running", func() error {
		p, ok := workerPods(t, ns, name, 0)[rank]
		if !ok {
			return fmt.Errorf("no pod of rank %s", rank)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == names.ContainerName && cs.State.Running != nil {
				node, id = p.Spec.NodeName, cs.ContainerID
				return nil
			}
		}
		return fmt.Errorf("pod %s: %s", p.Name, p.Status.Phase)
	})
	n, ok := stack.RealNodes[node]
	if !ok {
		t.Fatalf("rank %s runs on %q, not a real node", rank, node)
	}
	return n, id
}

// TestGangRestartInPlace: on real nodes (kubelet 1.36, its RestartAllContainers rule), rank 1's trainer is
// killed (SIGKILL, as the OOM killer does: the example trainer's --fail-at) after a checkpoint: its
// supervisor holds the exit and both pods restart in place into attempt 1 (the same pods, their containers
// run again), rank 0 resuming from the newest checkpoint. Then rank 1's pod is deleted at once (kubectl
// delete pod --force): rank 0's pod restarts in place again and rank 1's is replaced alone by the Job
// controller (a new pod, which waits for the operator's order before it trains); the deletion is not
// counted and the run completes.
func TestGangRestartInPlace(t *testing.T) {
	ns := stacktest.NewNamespace(t, stack.Client, "restart")
	tj := example(t, "trainingjob-local.yaml", ns)
	// Rank 0 exits 1 on losing rank 1 (not retried); the killed rank's 137 (retried) must decide.
	tj.Spec.Args = []string{"--epoch-delay=500ms", "--fail-at=1:4:137"}
	tj.Spec.Hyperparameters.Epochs = ptr.To[int32](40)
	tj.Spec.Checkpoint.Frequency = ptr.To[int32](1)
	stacktest.Create(t, stack.Client, tj)
	runningContainer(t, ns, tj.Name, "1")
	first := workerPods(t, ns, tj.Name, 0)
	inPlace := bothTraining(t, ns, tj.Name, 1)
	t.Logf("attempt 1:\n%s", restartEvents(t, ns))
	for _, rank := range []string{"0", "1"} {
		if inPlace[rank].UID != first[rank].UID {
			t.Errorf("rank %s: pod %s in attempt 1, want %s restarted in place", rank, inPlace[rank].Name, first[rank].Name)
		}
	}
	atLeastEpoch(t, ns, tj.Name, getTJ(t, ns, tj.Name).Status.Checkpoint.LatestEpoch+2)
	gone := inPlace["1"]
	if err := stack.Client.Delete(context.Background(), &gone, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	replaced := bothTraining(t, ns, tj.Name, 2)
	done := waitForEnd(t, ns, tj.Name, 4*time.Minute)
	type ended struct {
		State                 mlv1.State
		RestartCount, Attempt int32
		Rank0Kept, Rank1New   bool
	}
	want := ended{State: mlv1.StateCompleted, RestartCount: 1, Attempt: 2, Rank0Kept: true, Rank1New: true}
	got := ended{State: done.Status.State, RestartCount: done.Status.RestartCount, Attempt: done.Status.Attempt,
		Rank0Kept: replaced["0"].UID == first["0"].UID, Rank1New: replaced["1"].UID != first["1"].UID}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("want Completed after 1 counted restart and a disruption, rank 1 alone replaced (-want +got):\n%s\nfailureReason: %s",
			diff, done.Status.FailureReason)
	}
	if log := kubectl(t, "logs", "-n", ns, replaced["0"].Name, "-c", names.ContainerName); !strings.Contains(log, "resuming from ") {
		t.Errorf("rank 0 of attempt 2 (pod %s) did not resume:\n%s", replaced["0"].Name, log)
	}
	t.Logf("events:\n%s", restartEvents(t, ns))
}

// bothTraining waits until the job is in attempt and both its ranks' trainers run in it, and returns their
// pods by rank.
func bothTraining(t *testing.T, ns, name string, attempt int) map[string]corev1.Pod {
	t.Helper()
	var pods map[string]corev1.Pod
	eventually(t, 2*time.Minute, fmt.Sprintf("both ranks in attempt %d, training", attempt), func() error {
		pods = workerPods(t, ns, name, attempt)
		if got := getTJ(t, ns, name); got.Status.Attempt != int32(attempt) || len(pods) != 2 || !trainerStarted(pods["0"]) ||
			!trainerStarted(pods["1"]) {
			return fmt.Errorf("attempt %d, pods %d; last failure %q; events:\n%s", got.Status.Attempt, len(pods), got.Status.LastFailure,
				restartEvents(t, ns))
		}
		return nil
	})
	return pods
}

// restartEvents lists the job's Restarting events (the gang restarts and how they restarted the pods).
func restartEvents(t *testing.T, ns string) string {
	return kubectl(t, "get", "events", "-n", ns, "--field-selector", "reason=Restarting", "-o", "custom-columns=MSG:.message")
}

// atLeastEpoch waits for a checkpoint of the job at epoch or later.
func atLeastEpoch(t *testing.T, ns, name string, epoch int32) {
	t.Helper()
	eventually(t, 2*time.Minute, fmt.Sprintf("a checkpoint at epoch %d", epoch), func() error {
		if c := getTJ(t, ns, name).Status.Checkpoint; c == nil || c.LatestEpoch < epoch {
			return fmt.Errorf("checkpoint %+v", c)
		}
		return nil
	})
}

// trainerStarted says whether the pod's trainer container runs.
func trainerStarted(p corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == names.ContainerName {
			return cs.State.Running != nil
		}
	}
	return false
}

// TestSecurityContextIsEnforced: in a namespace that enforces Pod Security "restricted", a job that asks
// for a non-root user runs its trainer as that user (read from the container's process), and the
// checkpoint agent, as the same user with a read-only root, rotates the checkpoints the trainer wrote.
func TestSecurityContextIsEnforced(t *testing.T) {
	ns := stacktest.NewNamespace(t, stack.Client, "restricted")
	nsObj := &corev1.Namespace{}
	if err := stack.Client.Get(context.Background(), client.ObjectKey{Name: ns}, nsObj); err != nil {
		t.Fatal(err)
	}
	nsObj.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	if err := stack.Client.Update(context.Background(), nsObj); err != nil {
		t.Fatal(err)
	}
	tj := example(t, "trainingjob-local.yaml", ns)
	tj.Spec.Args = []string{"--epoch-delay=500ms"}
	tj.Spec.Checkpoint.Frequency, tj.Spec.Checkpoint.Retention = ptr.To[int32](1), ptr.To[int32](2)
	tj.Spec.SecurityContext = &mlv1.WorkerSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000),
		RunAsGroup: ptr.To[int64](1000)}
	stacktest.Create(t, stack.Client, tj)
	node, id := runningContainer(t, ns, tj.Name, "0")
	if status := procFile(t, node, id, "status"); !strings.Contains(status, "\nUid:\t1000\t1000\t1000\t1000\n") {
		t.Errorf("the trainer's process is not user 1000:\n%s", status)
	}
	done := waitForEnd(t, ns, tj.Name, 4*time.Minute)
	if done.Status.State != mlv1.StateCompleted {
		t.Fatalf("state %s: %s", done.Status.State, done.Status.FailureReason)
	}
	checkRotated(t, done, 2)
}

// procFile returns a file of /proc/PID of a container's process, as the host sees it.
func procFile(t *testing.T, node *realnode.Node, containerID, file string) string {
	t.Helper()
	pid, err := node.Pid(containerID)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
