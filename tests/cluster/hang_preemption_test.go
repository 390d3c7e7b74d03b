//go:build cluster

package cluster

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/realnode"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
)

// TestHangNamesTheRank: a rank stops in a real container while its pod stays Running: before the
// rendezvous (it never joins, as a rank whose rendezvous address does not resolve: rank 0 waits, nothing
// is logged) and mid-run (rank 0 blocks in the next all-reduce). The in-cluster operator sees no progress
// (none since the start, or none since an epoch), reads the ranks' last log lines from the real kubelets
// (pods/log, its own RBAC) and, with onHang Fail, ends the run Hung naming the rank's last words.
func TestHangNamesTheRank(t *testing.T) {
	for _, tc := range []struct {
		name, hangAt string
		policy       mlv1.FailurePolicy
		want         []string
		behind       bool // the stall names rank 1, its pod and its node as behind
	}{{
		name: "rendezvous", hangAt: "1:0",
		policy: mlv1.FailurePolicy{StartupTimeoutSeconds: ptr.To[int32](6), OnHang: mlv1.HangFail},
		want: []string{"Hung: failurePolicy.onHang Fail: Hang: no progress for", "since all 2 workers of attempt 0 started running",
			"(failurePolicy.startupTimeoutSeconds 6s)", "rank 1", "injected hang at the rendezvous"},
	}, {
		name: "mid-run", hangAt: "1:3",
		policy: mlv1.FailurePolicy{StallTimeoutSeconds: ptr.To[int32](6), OnHang: mlv1.HangFail},
		want: []string{"Hung: failurePolicy.onHang Fail: Hang: no progress for", "since epoch 2", "rank 1", "injected hang at epoch 3",
			"ranks holding the run back: behind the others (rank 0 at step"},
		behind: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := stacktest.NewNamespace(t, stack.Client, "hang")
			tj := example(t, "trainingjob-local.yaml", ns)
			tj.Spec.Args = []string{"--epoch-delay=500ms", "--hang-at=" + tc.hangAt}
			tj.Spec.FailurePolicy = &tc.policy
			spread(tj)
			stacktest.Create(t, stack.Client, tj)
			done := waitForEnd(t, ns, tj.Name, 3*time.Minute)
			want := tc.want
			if p, ok := workerPods(t, ns, tj.Name, 0)["1"]; tc.behind && ok {
				want = append(want, fmt.Sprintf("rank 1 (pod %s on node %s) at step", p.Name, p.Spec.NodeName))
			}
			t.Logf("failureReason: %s", done.Status.FailureReason)
			for _, want := range want {
				if done.Status.State != mlv1.StateFailed || !strings.Contains(done.Status.FailureReason, want) {
					t.Errorf("state %s, failureReason %q: want Failed saying %q", done.Status.State, done.Status.FailureReason, want)
				}
			}
		})
	}
}

// TestHungRankRestartsInPlace: rank 1's trainer stops mid-run on a real node (SIGSTOP: a hang that no
// SIGTERM ends) while its pod stays Running and ready. The stall detector restarts the gang in place: the
// hung trainer is killed a second after SIGTERM, not after the pods' grace period (120 s here; its restarted
// supervisor says so), both pods run again (the same pods), resume from the newest checkpoint and complete;
// the restart is counted.
func TestHungRankRestartsInPlace(t *testing.T) {
	ns := stacktest.NewNamespace(t, stack.Client, "hung")
	tj := example(t, "trainingjob-local.yaml", ns)
	tj.Spec.Args = []string{"--epoch-delay=500ms"}
	tj.Spec.Hyperparameters.Epochs = ptr.To[int32](30)
	tj.Spec.Checkpoint.Frequency = ptr.To[int32](1)
	tj.Spec.Checkpoint.OnPreemption, tj.Spec.Checkpoint.PreemptionGraceSeconds = true, ptr.To[int32](120)
	tj.Spec.FailurePolicy = &mlv1.FailurePolicy{StallTimeoutSeconds: ptr.To[int32](6)}
	stacktest.Create(t, stack.Client, tj)
	node, id := runningContainer(t, ns, tj.Name, "1")
	first := workerPods(t, ns, tj.Name, 0)
	atLeastEpoch(t, ns, tj.Name, 3)
	stopProgram(t, node, id)
	again := bothTraining(t, ns, tj.Name, 1)
	done := waitForEnd(t, ns, tj.Name, 4*time.Minute)
	type ended struct {
		State                 mlv1.State
		RestartCount, Attempt int32
		SamePods              bool
	}
	want := ended{State: mlv1.StateCompleted, RestartCount: 1, Attempt: 1, SamePods: true}
	got := ended{State: done.Status.State, RestartCount: done.Status.RestartCount, Attempt: done.Status.Attempt,
		SamePods: again["0"].UID == first["0"].UID && again["1"].UID == first["1"].UID}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("want Completed after 1 counted restart in place (-want +got):\n%s\nfailureReason: %s\nevents:\n%s", diff,
			done.Status.FailureReason, restartEvents(t, ns))
	}
	// The kubelet removed the hung containers (no logs --previous): the restarted supervisor says how they ended.
	said := "restarted in place into attempt 1 by the operator's order; before it, the program did not stop on SIGTERM " +
		"and was killed (SIGKILL)"
	if log := kubectl(t, "logs", "-n", ns, again["1"].Name, "-c", names.ContainerName); !strings.Contains(log, said) {
		t.Errorf("rank 1's restarted container's log does not say %q:\n%s", said, log)
	}
	if log := kubectl(t, "logs", "-n", ns, again["0"].Name, "-c", names.ContainerName); !strings.Contains(log, "resuming from ") {
		t.Errorf("rank 0 did not resume after the restart in place:\n%s", log)
	}
}

// stopProgram stops (SIGSTOP) every process a container's first process started: the supervised program,
// which then hangs, its supervisor still answering.
func stopProgram(t *testing.T, node *realnode.Node, containerID string) {
	t.Helper()
	pid, err := node.Pid(containerID)
	if err != nil {
		t.Fatal(err)
	}
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil || len(strings.Fields(string(children))) == 0 {
		t.Fatalf("the program of container %s (pid %d): %q, %v", containerID, pid, children, err)
	}
	for _, c := range strings.Fields(string(children)) {
		var child int
		if _, err := fmt.Sscan(c, &child); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(child, syscall.SIGSTOP); err != nil {
			t.Fatalf("stopping pid %d: %v", child, err)
		}
	}
}

// TestPreemptionKeepsTheWork: rank 0's pod is evicted from a real node while it trains; the kubelet
// gives the trainer checkpoint.preemptionGraceSeconds after SIGTERM and stops the checkpoint agent (a native
// sidecar) only after it, so the agent's final report names the checkpoint the trainer wrote at SIGTERM;
// the restart is not counted and the next attempt resumes from that checkpoint.
func TestPreemptionKeepsTheWork(t *testing.T) {
	ns := stacktest.NewNamespace(t, stack.Client, "preempt")
	tj := example(t, "trainingjob-local.yaml", ns)
	tj.Spec.Args = []string{"--epoch-delay=1s"}
	tj.Spec.Checkpoint.OnPreemption, tj.Spec.Checkpoint.PreemptionGraceSeconds = true, ptr.To[int32](30)
	spread(tj)
	stacktest.Create(t, stack.Client, tj)
	runningContainer(t, ns, tj.Name, "0")
	eventually(t, 2*time.Minute, "a checkpoint", func() error {
		if c := getTJ(t, ns, tj.Name).Status.Checkpoint; c == nil || c.LatestEpoch < 2 {
			return fmt.Errorf("checkpoint %+v", c)
		}
		return nil
	})
	stacktest.EvictRank(t, stack.Client, ns, tj.Name, 0)
	done := waitForEnd(t, ns, tj.Name, 4*time.Minute)
	c := done.Status.Checkpoint
	if done.Status.State != mlv1.StateCompleted || done.Status.RestartCount != 0 || done.Status.Attempt != 1 || c == nil ||
		!strings.Contains(c.ResumedFrom, "-step-") ||
		!strings.Contains(c.ResumedFromMessage, "resumed from the checkpoint written at preemption") {
		t.Fatalf("state %s, restartCount %d, attempt %d, checkpoint %+v: "+
			"want Completed after one uncounted restart, resumed from the checkpoint written at preemption",
			done.Status.State, done.Status.RestartCount, done.Status.Attempt, c)
	}
	pods := workerPods(t, ns, tj.Name, 1)
	if log := kubectl(t, "logs", "-n", ns, pods["0"].Name, "-c", names.ContainerName); !strings.Contains(log, "resuming from "+c.ResumedFrom) {
		t.Errorf("rank 0 of the new attempt (pod %s) did not resume from %s:\n%s", pods["0"].Name, c.ResumedFrom, log)
	}
}
