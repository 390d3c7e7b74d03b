package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// nodeLoss is one way a process node disappears mid-run.
type nodeLoss struct {
	name string
	// rank is the rank whose node is lost.
	rank string
	// blocked: the surviving ranks block on the lost peer instead of exiting (--block-on-peer-loss).
	blocked bool
	lose    func(ctx context.Context, node string) error
}

var nodeLosses = []nodeLoss{
	// The machine is gone and its Node deleted (a cloud provider's node controller does that): the pod
	// garbage collector fails the orphaned pods after its 40 s quarantine; the operator does not wait.
	{name: "deleted", rank: "1", lose: func(ctx context.Context, node string) error { return stack.LoseNode(ctx, node) }},
	// The machine stops answering and its Node stays: nothing ever reports its pods again, the node
	// lifecycle controller marks it NotReady after node-monitor-grace-period. Rank 0 is lost, so the
	// checkpoint agent that rotates the checkpoints goes with it.
	{name: "unreachable", rank: "0", lose: func(_ context.Context, node string) error { return stack.PartitionNode(node) }},
	// The same, but the surviving rank does not exit: it blocks on its lost peer, as a rank in an NCCL
	// collective does. No pod fails; the attempt restarts once the node lifecycle controller finds the
	// node lost, long before any hang timeout.
	{name: "unreachable-blocked", rank: "1", blocked: true,
		lose: func(_ context.Context, node string) error { return stack.PartitionNode(node) }},
}

// TestNodeLost: the process node running one rank vanishes mid-run (its processes die at once, nothing
// reports them any more). The surviving rank exits 1 on losing its peer, long before the control plane
// marks the lost pod; the TrainingJob restarts the gang on the remaining node without using its budget
// (backoffLimit 0) and resumes from a checkpoint, although the lost rank's pod never ends. The node comes
// back afterwards for the other tests.
func TestNodeLost(t *testing.T) {
	for i := 0; i < repeats(); i++ {
		for _, loss := range nodeLosses {
			t.Run(fmt.Sprintf("%s-%d", loss.name, i), func(t *testing.T) {
				d, ok := loseNodeMidRun(t, loss)
				record("node lost mid-run: "+loss.name+", rank "+loss.rank, "loss → gang restart recorded", 1, 1, count(ok), d)
				t.Logf("node loss report (%s, rank %s): gang restart recorded %s after the loss", loss.name, loss.rank, d.Round(100*time.Millisecond))
			})
		}
	}
}

// count returns 1 for true.
func count(ok bool) int {
	if ok {
		return 1
	}
	return 0
}

// loseNodeMidRun runs one job, loses the node of loss.rank once a checkpoint is kept, checks that the job
// completes after one uncounted gang restart, and returns how long after the loss the restart was recorded
// and whether the job ended correctly.
func loseNodeMidRun(t *testing.T, loss nodeLoss) (time.Duration, bool) {
	ctx := context.Background()
	ns := newNamespace(t)
	lc := lifecycle{name: "node-" + loss.name, reasons: []string{"Succeeded"}, disruptions: 1, mutate: func(tj *mlv1.TrainingJob) {
		tj.Spec.Hyperparameters.Epochs = ptrTo[int32](40)
		tj.Spec.FailurePolicy = &mlv1.FailurePolicy{RestartPolicy: mlv1.RestartGang, BackoffLimit: ptrTo[int32](0)}
		if loss.blocked {
			tj.Spec.Args = append(tj.Spec.Args, "--block-on-peer-loss")
		}
	}}
	tj := createJob(t, ns, lc)
	nodeName := nodeOfRank(t, tj, loss.rank)
	lost := time.Now()
	if err := loss.lose(ctx, nodeName); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stack.AddNode(ctx, nodeName, 2); err != nil {
			t.Error(err)
		}
	})
	restarted, err := waitForAttempt(ctx, tj, 1, 4*time.Minute)
	if err != nil {
		t.Fatalf("losing %s: %v", nodeName, err)
	}
	if !checkJob(t, tj, lc, metricsAddr) {
		return restarted.Sub(lost), false
	}
	got := &mlv1.TrainingJob{}
	if err := stack.Client.Get(ctx, client.ObjectKeyFromObject(tj), got); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got.Status.LastFailure, nodeName) {
		t.Errorf("lastFailure %q: want the lost node %s named", got.Status.LastFailure, nodeName)
		return restarted.Sub(lost), false
	}
	return restarted.Sub(lost), true
}

// nodeOfRank waits until the job runs with a checkpoint kept and returns the node of rank's pod.
func nodeOfRank(t *testing.T, tj *mlv1.TrainingJob, rank string) string {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		got := &mlv1.TrainingJob{}
		if err := stack.Client.Get(ctx, client.ObjectKeyFromObject(tj), got); err != nil {
			t.Fatal(err)
		}
		var pods corev1.PodList
		if err := stack.Client.List(ctx, &pods, client.InNamespace(tj.Namespace),
			client.MatchingLabels{names.NameLabel: tj.Name, names.RankLabel: rank}); err != nil {
			t.Fatal(err)
		}
		if got.Status.State == mlv1.StateRunning && got.Status.Checkpoint != nil && got.Status.Checkpoint.LatestEpoch >= 2 &&
			len(pods.Items) == 1 {
			return pods.Items[0].Spec.NodeName
		}
		if time.Now().After(deadline) {
			t.Fatal("the job did not run with a checkpoint")
		}
	}
}

// waitForAttempt waits until the job records attempt and returns when it saw it.
func waitForAttempt(ctx context.Context, tj *mlv1.TrainingJob, attempt int32, timeout time.Duration) (time.Time, error) {
	got := &mlv1.TrainingJob{}
	for deadline := time.Now().Add(timeout); ; time.Sleep(200 * time.Millisecond) {
		if err := stack.Client.Get(ctx, client.ObjectKeyFromObject(tj), got); err != nil {
			return time.Time{}, err
		}
		if got.Status.Attempt >= attempt {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("no attempt %d after %s: %+v", attempt, timeout, got.Status)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
