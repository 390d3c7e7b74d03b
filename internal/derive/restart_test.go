package derive

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// disrupted marks a pod as the control plane does before it evicts or preempts it.
func (b *podB) disrupted(reason string) *podB {
	b.p.Status.Conditions = append(b.p.Status.Conditions, corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: reason, Message: "evicted",
	})
	return b
}

// trainerRunning gives the pod a running trainer container.
func (b *podB) trainerRunning() *podB {
	b.p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "trainer",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t0}}}}
	return b
}

// forceDeleted marks a pod as `kubectl delete pod --force` leaves it: deleted at once, at t0 + sec.
func (b *podB) forceDeleted(sec int) *podB {
	b.p.DeletionTimestamp, b.p.DeletionGracePeriodSeconds = ptr.To(metav1.NewTime(t0.Add(time.Duration(sec)*time.Second))), ptr.To[int64](0)
	return b
}

// TestFailedAttempt: what a failed attempt's Job becomes under each restart policy, exit code and budget.
func TestFailedAttempt(t *testing.T) {
	gang := func(restarts int32, f func(*mlv1.FailurePolicy)) *mlv1.TrainingJob {
		tj := tjtest.NewTJ("ml", "g").BackoffLimit(3, mlv1.RestartGang).Obj()
		tj.Status.State, tj.Status.RestartCount = mlv1.StateRunning, restarts
		if f != nil {
			f(tj.Spec.FailurePolicy)
		}
		return tj
	}
	failedJob := job(jobCond(batchv1.JobFailed, "BackoffLimitExceeded", "Job has reached the specified backoff limit"))
	oom := pods(pod("0", corev1.PodRunning), pod("1", corev1.PodFailed).exited(137, "OOMKilled", false))
	exit1 := pods(pod("0", corev1.PodFailed).exited(1, "Error", false).message("ValueError: bad lr"))
	const oomKilled = "rank 1 (pod w-1, container trainer) exited with code 137 (OOMKilled)"
	const notRetried = "not retried (failurePolicy.nonRetryableExitCodes, default 1-128): "
	const disruption = "restart after a disruption (not counted against failurePolicy.backoffLimit): "
	lostPeer := func() *podB {
		return pod("0", corev1.PodFailed).exited(1, "Error", false).message("lost rank 1: EOF").at(2)
	}
	peerLost := pods(lostPeer(), pod("1", corev1.PodRunning))
	peerKilled := pods(lostPeer(), pod("1", corev1.PodFailed).exited(137, "", false).at(1))
	cases := []struct {
		name         string
		tj           *mlv1.TrainingJob
		obs          Observed
		after        time.Duration // when the case is derived, after the Job failed (default: at once)
		wantState    mlv1.State
		wantReason   string // of Running, or of Failed
		wantAttempt  int32
		wantRestarts int32
		wantMessage  string // the Restarting condition's, or failureReason
	}{
		{
			name:         "retryable exit restarts the gang",
			tj:           gang(0, nil),
			obs:          Observed{Job: failedJob, Pods: oom},
			wantState:    mlv1.StateInitializing,
			wantReason:   ReasonRestarting,
			wantAttempt:  1,
			wantRestarts: 1,
			wantMessage:  "restart 1/3: " + oomKilled + "; starting attempt 1",
		},
		{
			name:         "the last restart of the budget",
			tj:           gang(2, nil),
			obs:          Observed{Job: failedJob, Pods: oom},
			wantState:    mlv1.StateInitializing,
			wantReason:   ReasonRestarting,
			wantAttempt:  1,
			wantRestarts: 3,
			wantMessage:  "restart 3/3: " + oomKilled + "; starting attempt 1",
		},
		{
			name:         "budget exhausted",
			tj:           gang(3, nil),
			obs:          Observed{Job: failedJob, Pods: oom},
			wantState:    mlv1.StateFailed,
			wantReason:   ReasonBackoffLimitExceeded,
			wantAttempt:  0,
			wantRestarts: 3,
			wantMessage:  "3 restarts (failurePolicy.backoffLimit 3), last: " + oomKilled,
		},
		{
			name:         "an error exit fails at once",
			tj:           gang(0, nil),
			obs:          Observed{Job: failedJob, Pods: exit1},
			wantState:    mlv1.StateFailed,
			wantReason:   ReasonNonRetryableExitCode,
			wantAttempt:  0,
			wantRestarts: 0,
			wantMessage:  notRetried + "rank 0 (pod w-0, container trainer) exited with code 1: ValueError: bad lr",
		},
		{
			name:         "retryableExitCodes makes it retryable",
			tj:           gang(0, func(f *mlv1.FailurePolicy) { f.RetryableExitCodes = []int32{1} }),
			obs:          Observed{Job: failedJob, Pods: exit1},
			wantState:    mlv1.StateInitializing,
			wantReason:   ReasonRestarting,
			wantAttempt:  1,
			wantRestarts: 1,
			wantMessage: "restart 1/3: rank 0 (pod w-0, container trainer) exited with code 1: ValueError: bad lr; " +
				"starting attempt 1",
		},
		{
			name:         "nonRetryableExitCodes makes a signal permanent (once rank 0, still running, has had time to report)",
			tj:           gang(0, func(f *mlv1.FailurePolicy) { f.NonRetryableExitCodes = []int32{137} }),
			obs:          Observed{Job: failedJob, Pods: oom},
			after:        FailureSettle,
			wantState:    mlv1.StateFailed,
			wantReason:   ReasonNonRetryableExitCode,
			wantAttempt:  0,
			wantRestarts: 0,
			wantMessage:  notRetried + oomKilled,
		},
		// On a cluster each node reports its own pods: the error exit of a rank that lost its peer may be
		// seen before the peer's kill that caused it.
		{
			name:         "an error exit waits for the other ranks to report",
			tj:           gang(0, nil),
			obs:          Observed{Job: failedJob, Pods: peerLost},
			after:        2 * time.Second,
			wantState:    mlv1.StateRunning,
			wantReason:   "Running",
			wantAttempt:  0,
			wantRestarts: 0,
			wantMessage:  "",
		},
		{
			name:         "the peer's kill, reported next, restarts the gang",
			tj:           gang(0, nil),
			obs:          Observed{Job: failedJob, Pods: peerKilled},
			after:        3 * time.Second,
			wantState:    mlv1.StateInitializing,
			wantReason:   ReasonRestarting,
			wantAttempt:  1,
			wantRestarts: 1,
			wantMessage:  "restart 1/3: rank 1 (pod w-1, container trainer) exited with code 137; starting attempt 1",
		},
		// The checkpoint agent, stopped first under load, is no cause while a trainer's exit is there.
		{
			name: "a trainer's exit, not the agent's earlier one, decides",
			tj:   gang(0, nil),
			obs: Observed{
				Job:  failedJob,
				Pods: pods(pod("0", corev1.PodFailed).exited(137, "", false).at(2).agentExited(1, 1)),
			},
			wantState:    mlv1.StateInitializing,
			wantReason:   ReasonRestarting,
			wantAttempt:  1,
			wantRestarts: 1,
			wantMessage:  "restart 1/3: rank 0 (pod w-0, container trainer) exited with code 137; starting attempt 1",
		},
		{
			name:         "the agent's exit alone names it",
			tj:           gang(0, nil),
			obs:          Observed{Job: failedJob, Pods: pods(pod("0", corev1.PodFailed).agentExited(1, 1))},
			wantState:    mlv1.StateFailed,
			wantReason:   ReasonNonRetryableExitCode,
			wantAttempt:  0,
			wantRestarts: 0,
			wantMessage:  notRetried + "rank 0 (pod w-0, container checkpoint-agent) exited with code 1",
		},
		// Kubernetes' Job controller deleted the killed rank's pod before it was read: its remembered end decides.
		{
			name:         "the kill of a pod gone since restarts the gang",
			tj:           gang(0, nil),
			obs:          Observed{Job: failedJob, Pods: peerLost[:1], Gone: peerKilled[1:]},
			wantState:    mlv1.StateInitializing,
			wantReason:   ReasonRestarting,
			wantAttempt:  1,
			wantRestarts: 1,
			wantMessage:  "restart 1/3: rank 1 (pod w-1, container trainer) exited with code 137; starting attempt 1",
		},
		// `kubectl delete pod --force` of a running rank: the pod leaves no exit of its own, and its peer's
		// error exit (it lost the rank) is no cause.
		{
			name: "a rank deleted at once while it ran is a disruption, not its peer's error exit",
			tj:   gang(1, nil),
			obs: Observed{Job: failedJob, Pods: pods(lostPeer()),
				ForceDeleted: pods(pod("1", corev1.PodRunning).trainerRunning().forceDeleted(1))},
			wantState:    mlv1.StateInitializing,
			wantReason:   ReasonRestarting,
			wantAttempt:  1,
			wantRestarts: 1,
			wantMessage: disruption + "pod w-1 (rank 1) was deleted at once (grace period 0) while it ran, with no exit of its own; " +
				"the exits of its peers that followed do not decide; starting attempt 1",
		},
		{
			name: "the same, the deleted pod still listed, killed since",
			tj:   gang(0, nil),
			obs: Observed{Job: failedJob, Pods: pods(lostPeer(), pod("1", corev1.PodFailed).exited(137, "", false).at(3).forceDeleted(2)),
				ForceDeleted: pods(pod("1", corev1.PodRunning).trainerRunning().forceDeleted(2))},
			wantState:    mlv1.StateInitializing,
			wantReason:   ReasonRestarting,
			wantAttempt:  1,
			wantRestarts: 0,
			wantMessage: disruption + "pod w-1 (rank 1) was deleted at once (grace period 0) while it ran, with no exit of its own; " +
				"the exits of its peers that followed do not decide; starting attempt 1",
		},
		// The kubelet ends a pod's graceful stop with a delete of grace period 0 too, once its containers ended:
		// a peer Kubernetes' Job controller stopped is no vanished rank.
		{
			name: "the kubelet's last delete of a stopped peer is no disruption",
			tj:   gang(0, nil),
			obs: Observed{Job: failedJob, Pods: pods(pod("0", corev1.PodFailed).exited(1, "Error", false).message("bug").at(2),
				pod("1", corev1.PodFailed).exited(143, "Error", false).at(2).forceDeleted(2))},
			after:        FailureSettle,
			wantState:    mlv1.StateFailed,
			wantReason:   ReasonNonRetryableExitCode,
			wantAttempt:  0,
			wantRestarts: 0,
			wantMessage:  notRetried + "rank 0 (pod w-0, container trainer) exited with code 1: bug",
		},
		{
			name:         "a rank deleted at once before it ever ran does not hide its peer's error exit",
			tj:           gang(0, nil),
			obs:          Observed{Job: failedJob, Pods: pods(lostPeer()), ForceDeleted: pods(pod("1", corev1.PodPending).forceDeleted(1))},
			after:        FailureSettle,
			wantState:    mlv1.StateFailed,
			wantReason:   ReasonNonRetryableExitCode,
			wantAttempt:  0,
			wantRestarts: 0,
			wantMessage:  notRetried + "rank 0 (pod w-0, container trainer) exited with code 1: lost rank 1: EOF",
		},
		{
			name: "a rank deleted at once after its peer's error exit does not hide it",
			tj:   gang(0, nil),
			obs: Observed{Job: failedJob, Pods: pods(lostPeer()),
				ForceDeleted: pods(pod("1", corev1.PodRunning).trainerRunning().forceDeleted(4))},
			after:        FailureSettle,
			wantState:    mlv1.StateFailed,
			wantReason:   ReasonNonRetryableExitCode,
			wantAttempt:  0,
			wantRestarts: 0,
			wantMessage:  notRetried + "rank 0 (pod w-0, container trainer) exited with code 1: lost rank 1: EOF",
		},
		{
			name:         "unreported for FailureSettle, the error exit decides",
			tj:           gang(0, nil),
			obs:          Observed{Job: failedJob, Pods: peerLost},
			after:        FailureSettle,
			wantState:    mlv1.StateFailed,
			wantReason:   ReasonNonRetryableExitCode,
			wantAttempt:  0,
			wantRestarts: 0,
			wantMessage:  notRetried + "rank 0 (pod w-0, container trainer) exited with code 1: lost rank 1: EOF",
		},
		{
			name: "a disruption named by the pod failure policy is not counted",
			tj:   gang(3, nil),
			obs: Observed{Job: job(jobCond(batchv1.JobFailed, batchv1.JobReasonPodFailurePolicy,
				"Pod ml/g-worker-1 has condition DisruptionTarget matching FailJob rule at index 0"))},
			wantState:    mlv1.StateInitializing,
			wantReason:   ReasonRestarting,
			wantAttempt:  1,
			wantRestarts: 3,
			wantMessage: disruption +
				"Pod ml/g-worker-1 has condition DisruptionTarget matching FailJob rule at index 0; starting attempt 1",
		},
		{
			name: "a disrupted pod is not counted",
			tj:   gang(1, nil),
			obs: Observed{
				Job:  failedJob,
				Pods: pods(pod("0", corev1.PodFailed).exited(143, "Error", false).disrupted("PreemptionByScheduler")),
			},
			wantState:    mlv1.StateInitializing,
			wantReason:   ReasonRestarting,
			wantAttempt:  1,
			wantRestarts: 1,
			wantMessage: disruption +
				"pod w-0 was disrupted (DisruptionTarget PreemptionByScheduler: evicted); starting attempt 1",
		},
		{
			name:         "a pod failed without an exit code is retried",
			tj:           gang(0, nil),
			obs:          Observed{Job: failedJob, Pods: pods(pod("0", corev1.PodFailed))},
			wantState:    mlv1.StateInitializing,
			wantReason:   ReasonRestarting,
			wantAttempt:  1,
			wantRestarts: 1,
			wantMessage:  "restart 1/3: BackoffLimitExceeded: Job has reached the specified backoff limit; starting attempt 1",
		},
		{
			name:         "Never fails at the first failure",
			tj:           tjtest.NewTJ("ml", "n").BackoffLimit(3, mlv1.RestartNever).Obj(),
			obs:          Observed{Job: failedJob, Pods: oom},
			wantState:    mlv1.StateFailed,
			wantReason:   ReasonWorkerFailed,
			wantAttempt:  0,
			wantRestarts: 0,
			wantMessage:  "no restarts (failurePolicy.restartPolicy Never): " + oomKilled,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := metav1.NewTime(t0.Add(tc.after)) // since the Job failed
			st := Status(tc.tj, tc.obs, now)
			reason, msg := ConditionReason(st, mlv1.ConditionRunning), ConditionMessage(st, mlv1.ConditionRestarting)
			if st.State == mlv1.StateFailed {
				reason, msg = ConditionReason(st, mlv1.ConditionFailed), ConditionMessage(st, mlv1.ConditionFailed)
				if st.FailureReason != reason+": "+msg {
					t.Errorf("failureReason = %q, want the reason and the Failed condition's message", st.FailureReason)
				}
			}
			got := []any{st.State, reason, st.Attempt, st.RestartCount, msg}
			want := []any{tc.wantState, tc.wantReason, tc.wantAttempt, tc.wantRestarts, tc.wantMessage}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("state, reason, attempt, restartCount, message (-want +got):\n%s", diff)
			}
			// A restart after a rank's exit records when it ended (goodput's restart begins there).
			if first := firstExit(tc.obs.ended()); st.Attempt > 0 && first != nil && !first.t.FinishedAt.IsZero() &&
				strings.Contains(st.LastFailure, "exited with code") &&
				(st.LastFailureTime == nil || !st.LastFailureTime.Equal(&first.t.FinishedAt)) {
				t.Errorf("lastFailureTime %v, want the first exit's %v", st.LastFailureTime, first.t.FinishedAt)
			}
			// Derived again from the same observation (a stale cache), a restart is not counted twice: the
			// old attempt's Job is no longer the current one's.
			again := tc.tj.DeepCopy()
			again.Status = st
			if st2 := Status(again, tc.obs, now); st2.Attempt != st.Attempt || st2.RestartCount != st.RestartCount {
				t.Errorf("second derivation: attempt %d restarts %d, want %d %d", st2.Attempt, st2.RestartCount, st.Attempt, st.RestartCount)
			}
		})
	}
}

// TestRestartInProgress: while the old attempt's Job is replaced the job is Initializing and says what
// it waits for; once the new attempt runs every worker, Restarting turns False.
func TestRestartInProgress(t *testing.T) {
	tj := tjtest.NewTJ("ml", "g").Obj()
	tj.Status = Status(tj, Observed{
		Job:  job(jobCond(batchv1.JobFailed, "BackoffLimitExceeded", "")),
		Pods: pods(pod("1", corev1.PodFailed).exited(137, "OOMKilled", false)),
	}, t0)
	waiting := Status(tj, Observed{StartBlocked: "waiting for 2 workers of attempt 0 to stop"}, t0)
	newJob := job()
	newJob.Labels = map[string]string{names.AttemptLabel: "1"}
	tj.Status = waiting
	running := Status(tj, Observed{Job: newJob, Pods: pods(pod("0", corev1.PodRunning), pod("1", corev1.PodRunning))},
		metav1.NewTime(t0.Add(time.Minute)))
	got := []any{waiting.State, ConditionMessage(waiting, mlv1.ConditionRunning),
		running.State, ConditionReason(running, mlv1.ConditionRestarting), running.RestartCount}
	want := []any{mlv1.StateInitializing,
		"attempt 1 after: rank 1 (pod w-1, container trainer) exited with code 137 (OOMKilled); waiting for 2 workers of attempt 0 to stop",
		mlv1.StateRunning, "AllWorkersRunning", int32(1)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestDeadlines: activeDeadlineSeconds counts from the first start over restarts; the scheduling
// timeout fails a job whose workers stay unschedulable.
func TestDeadlines(t *testing.T) {
	start := metav1.NewTime(t0.Add(-time.Hour)) // job() started an hour before t0
	deadline := func(sec int64) *mlv1.TrainingJob {
		tj := tjtest.NewTJ("ml", "d").With(func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{ActiveDeadlineSeconds: ptr.To(sec)}
		}).Obj()
		tj.Status.State, tj.Status.StartTime, tj.Status.Attempt = mlv1.StateRunning, &start, 2
		return tj
	}
	timeout := tjtest.NewTJ("ml", "s").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Scheduling = &mlv1.SchedulingSpec{SchedulingTimeoutSeconds: ptr.To[int64](600)}
	}).Obj()
	created := job()
	created.Labels = map[string]string{names.AttemptLabel: "0"}
	created.CreationTimestamp = metav1.NewTime(t0.Add(-11 * time.Minute))
	unschedulable := pods(pod("0", corev1.PodPending).unschedulable("0/4 nodes are available: 4 Insufficient nvidia.com/gpu."))
	cases := []struct {
		name       string
		tj         *mlv1.TrainingJob
		obs        Observed
		wantState  mlv1.State
		wantReason string
	}{
		{
			name:       "within the deadline, a restart in progress",
			tj:         deadline(7200),
			obs:        Observed{},
			wantState:  mlv1.StateInitializing,
			wantReason: ReasonRestarting,
		},
		{
			name:       "past the deadline, over restarts",
			tj:         deadline(3600),
			obs:        Observed{},
			wantState:  mlv1.StateFailed,
			wantReason: ReasonDeadlineExceeded,
		},
		{
			name:       "unschedulable within the timeout",
			tj:         timeout,
			obs:        Observed{Job: job(), Pods: unschedulable},
			wantState:  mlv1.StateInitializing,
			wantReason: ReasonUnschedulable,
		},
		{
			name:       "unschedulable past the timeout",
			tj:         timeout,
			obs:        Observed{Job: created, Pods: unschedulable},
			wantState:  mlv1.StateFailed,
			wantReason: ReasonSchedulingTimeout,
		},
		{
			name:       "an image that cannot be pulled, past the timeout",
			tj:         timeout,
			obs:        Observed{Job: created, Pods: pods(pod("0", corev1.PodPending).waiting("ImagePullBackOff", "Back-off pulling image"))},
			wantState:  mlv1.StateFailed,
			wantReason: ReasonSchedulingTimeout,
		},
		{
			name:       "still creating containers past the timeout is no fault",
			tj:         timeout,
			obs:        Observed{Job: created, Pods: pods(pod("0", corev1.PodPending).waiting("ContainerCreating", ""))},
			wantState:  mlv1.StateInitializing,
			wantReason: "WorkersStarting",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := Status(tc.tj, tc.obs, t0)
			reason := ConditionReason(st, mlv1.ConditionRunning)
			if st.State == mlv1.StateFailed {
				reason = ConditionReason(st, mlv1.ConditionFailed)
			}
			if diff := cmp.Diff([]any{tc.wantState, tc.wantReason}, []any{st.State, reason}); diff != "" {
				t.Errorf("state, reason (-want +got):\n%s\n%s", diff, st.FailureReason)
			}
		})
	}
}

// on places the pod on a node.
func (b *podB) on(node string) *podB {
	b.p.Spec.NodeName = node
	return b
}

// TestLostNode: a survivor that exits 1 on losing its peer is not blamed when a worker's node is gone or
// not Ready: the restart is a disruption, not counted. A worker that never ends because its node is
// unreachable (the Job only says FailureTarget) does not hang the run; one that still stops on a healthy
// node is waited for.
func TestLostNode(t *testing.T) {
	tj := tjtest.NewTJ("ml", "n").BackoffLimit(0, mlv1.RestartGang).Obj()
	tj.Status.State = mlv1.StateRunning
	failed := job(jobCond(batchv1.JobFailureTarget, "BackoffLimitExceeded", ""), jobCond(batchv1.JobFailed, "BackoffLimitExceeded", ""))
	target := job(jobCond(batchv1.JobFailureTarget, "BackoffLimitExceeded", ""))
	survivor := func() *podB {
		return pod("0", corev1.PodFailed).exited(1, "Error", false).message("lost rank 1: EOF").on("n-1")
	}
	gone := map[string]string{"n-2": "is gone"}
	unreachable := map[string]string{"n-2": "is not Ready (NodeStatusUnknown: Kubelet stopped posting node status.)"}
	restarted := []any{mlv1.StateInitializing, int32(1), int32(0)}
	for _, tc := range []struct {
		name        string
		obs         Observed
		want        []any
		wantFailure string
	}{
		{
			name: "failed Job, a worker's node gone",
			obs: Observed{
				Job:         failed,
				Pods:        pods(survivor(), pod("1", corev1.PodFailed).exited(137, "Error", false).on("n-2")),
				NodeTrouble: gone,
			},
			want:        restarted,
			wantFailure: "rank 1's node n-2 is gone",
		},
		{
			name:        "failure target, the other worker stranded on an unreachable node",
			obs:         Observed{Job: target, Pods: pods(survivor(), pod("1", corev1.PodRunning).on("n-2")), NodeTrouble: unreachable},
			want:        restarted,
			wantFailure: "rank 1's node n-2 is not Ready (NodeStatusUnknown: Kubelet stopped posting node status.)",
		},
		{
			name:        "failure target, the other worker still stopping on a healthy node",
			obs:         Observed{Job: target, Pods: pods(survivor(), pod("1", corev1.PodRunning).on("n-2"))},
			want:        []any{mlv1.StateRunning, int32(0), int32(0)},
			wantFailure: "",
		},
		{
			name:        "failure target, a worker not scheduled yet",
			obs:         Observed{Job: target, Pods: pods(survivor(), pod("1", corev1.PodPending)), NodeTrouble: unreachable},
			want:        []any{mlv1.StateRunning, int32(0), int32(0)},
			wantFailure: "",
		},
		{
			name:        "failure target, every pod ended: decided before Failed",
			obs:         Observed{Job: target, Pods: pods(survivor(), pod("1", corev1.PodFailed).exited(1, "Error", false).on("n-2"))},
			want:        []any{mlv1.StateFailed, int32(0), int32(0)},
			wantFailure: "",
		},
		{
			name:        "failed Job, healthy nodes: the survivor's exit code decides",
			obs:         Observed{Job: failed, Pods: pods(survivor(), pod("1", corev1.PodFailed).exited(1, "Error", false).on("n-2"))},
			want:        []any{mlv1.StateFailed, int32(0), int32(0)},
			wantFailure: "",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := Status(tj, tc.obs, t0)
			got := []any{st.State, st.Attempt, st.RestartCount}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("state, attempt, restartCount (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantFailure, st.LastFailure); diff != "" {
				t.Errorf("lastFailure (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNodeTrouble(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	node := func(s corev1.ConditionStatus, changed time.Duration, taints ...string) *corev1.Node {
		n := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: s, Reason: "R", Message: "m", LastTransitionTime: metav1.NewTime(now.Add(-changed))}}}}
		for _, key := range taints {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
		}
		return n
	}
	noExecute := node(corev1.ConditionUnknown, time.Second)
	noExecute.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}
	for _, tc := range []struct {
		name     string
		node     *corev1.Node
		want     string
		wantWait time.Duration
	}{
		{name: "gone", node: nil, want: "is gone", wantWait: 0},
		{name: "ready", node: node(corev1.ConditionTrue, time.Hour), want: "", wantWait: 0},
		{name: "no conditions yet", node: &corev1.Node{}, want: "", wantWait: 0},
		{
			name:     "unreachable and tainted",
			node:     node(corev1.ConditionUnknown, time.Second, corev1.TaintNodeUnreachable),
			want:     "is not Ready (R: m)",
			wantWait: 0,
		},
		{
			name:     "not ready and tainted",
			node:     node(corev1.ConditionFalse, time.Second, corev1.TaintNodeNotReady),
			want:     "is not Ready (R: m)",
			wantWait: 0,
		},
		{
			name:     "not tainted yet: the scheduler may still place pods there",
			node:     node(corev1.ConditionUnknown, time.Second),
			want:     "",
			wantWait: NodeUntaintedGrace - time.Second,
		},
		{name: "only a NoExecute taint (tolerated for 300 s by default)", node: noExecute, want: "", wantWait: NodeUntaintedGrace - time.Second},
		{
			name:     "another NoSchedule taint",
			node:     node(corev1.ConditionUnknown, time.Second, "example.com/maintenance"),
			want:     "",
			wantWait: NodeUntaintedGrace - time.Second,
		},
		{
			name:     "never tainted: counts after the grace",
			node:     node(corev1.ConditionUnknown, NodeUntaintedGrace),
			want:     "is not Ready (R: m)",
			wantWait: 0,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, wait := NodeTrouble(tc.node, now)
			if diff := cmp.Diff([]any{tc.want, tc.wantWait}, []any{why, wait}); diff != "" {
				t.Errorf("NodeTrouble (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFailureBeforeTheJobSaysSo: a failed worker of a Job that allows none (backoffLimit 0) decides the
// attempt at once, before Kubernetes' Job controller's FailureTarget; the other ranks still stop meanwhile (the
// next Job waits for them). With OnFailure the Job restarts the container in place: nothing is decided.
func TestFailureBeforeTheJobSaysSo(t *testing.T) {
	killed := func() *podB { return pod("1", corev1.PodFailed).exited(137, "Error", false) }
	stopped := func() *podB {
		b := pod("1", corev1.PodFailed).exited(143, "Error", false)
		b.p.DeletionTimestamp = &t0
		return b
	}
	for _, tc := range []struct {
		name   string
		policy mlv1.RestartPolicy
		obs    Observed
		want   []any
	}{
		{
			name:   "gang: a rank killed, the other still running",
			policy: mlv1.RestartGang,
			obs:    Observed{Job: job(), Pods: pods(pod("0", corev1.PodRunning), killed())},
			want:   []any{mlv1.StateInitializing, int32(1), int32(1)},
		},
		{
			name:   "gang: every rank running",
			policy: mlv1.RestartGang,
			obs:    Observed{Job: job(), Pods: pods(pod("0", corev1.PodRunning), pod("1", corev1.PodRunning))},
			want:   []any{mlv1.StateRunning, int32(0), int32(0)},
		},
		{
			name:   "never: a rank killed fails the run",
			policy: mlv1.RestartNever,
			obs:    Observed{Job: job(), Pods: pods(pod("0", corev1.PodRunning), killed())},
			want:   []any{mlv1.StateFailed, int32(0), int32(0)},
		},
		{
			name:   "onFailure: the Job restarts the container itself",
			policy: mlv1.RestartOnFailure,
			obs:    Observed{Job: job(), Pods: pods(pod("0", corev1.PodRunning), killed())},
			want:   []any{mlv1.StateRunning, int32(0), int32(0)},
		},
		{
			name:   "success criteria met: the stopped rank's 143 decides nothing",
			policy: mlv1.RestartGang,
			obs: Observed{
				Job:  job(jobCond(batchv1.JobSuccessCriteriaMet, "CompletionsReached", "")),
				Pods: pods(pod("0", corev1.PodSucceeded), pod("1", corev1.PodFailed).exited(143, "Error", false)),
			},
			want: []any{mlv1.StateRunning, int32(0), int32(0)},
		},
		{
			name:   "a rank stopped by a deletion waits for the Job controller",
			policy: mlv1.RestartGang,
			obs:    Observed{Job: job(), Pods: pods(pod("0", corev1.PodRunning), stopped())},
			want:   []any{mlv1.StateRunning, int32(0), int32(0)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "n").BackoffLimit(3, tc.policy).Obj()
			tj.Status.State = mlv1.StateRunning
			st := Status(tj, tc.obs, t0)
			if diff := cmp.Diff(tc.want, []any{st.State, st.Attempt, st.RestartCount}); diff != "" {
				t.Errorf("state, attempt, restartCount (-want +got):\n%s", diff)
			}
		})
	}
}

// TestInPlaceAttemptFailure: the Job of a job that restarts in place gives no verdict, so a worker's pod
// that failed while being deleted (an eviction), one gone after a non-zero exit, or one deleted at once
// while it ran fails the attempt, dated when it ended; a suspended Job's stopped pods (also once it resumed)
// and any Job's running ones do not, nor a deleted failed pod of a Job that does not restart in place (its
// controller decides).
func TestInPlaceAttemptFailure(t *testing.T) {
	inPlace := func(suspend bool) *batchv1.Job {
		j := job()
		j.Annotations = map[string]string{names.InPlaceAnnotation: "true"}
		j.Spec.Suspend = ptr.To(suspend)
		return j
	}
	resumed := func() *batchv1.Job { // suspended (Kueue's preemption) at t0, resumed at t0+2s
		j := inPlace(false)
		j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobSuspended, Status: corev1.ConditionFalse,
			LastTransitionTime: metav1.NewTime(t0.Add(2 * time.Second))}}
		return j
	}
	evicted := pod("1", corev1.PodFailed).exited(143, "Error", false).at(3).disrupted("EvictionByEvictionAPI")
	evicted.p.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(time.Second)))
	resuming := func() *batchv1.Job { // suspended at t0, spec.suspend false again
		j := inPlace(false)
		j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobSuspended, Status: corev1.ConditionTrue, LastTransitionTime: t0}}
		return j
	}
	// asked to stop at t0+1s with a 30 s grace period, ended at t0+20s: its deletionTimestamp is t0+31s.
	stopping := pod("1", corev1.PodFailed).exited(143, "Error", false).at(20)
	stopping.p.DeletionTimestamp, stopping.p.DeletionGracePeriodSeconds = ptr.To(metav1.NewTime(t0.Add(31*time.Second))), ptr.To[int64](30)
	at := func(sec int) *batchv1.JobCondition {
		return &batchv1.JobCondition{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded,
			Message: "Job has reached the specified backoff limit", LastTransitionTime: metav1.NewTime(t0.Add(time.Duration(sec) * time.Second))}
	}
	running := pods(pod("0", corev1.PodRunning).trainerRunning())
	for _, tc := range []struct {
		name string
		obs  Observed
		want *batchv1.JobCondition
	}{
		{name: "an evicted pod", obs: Observed{Job: inPlace(false), Pods: append(running, evicted.p)}, want: at(3)},
		{name: "a pod gone after a non-zero exit",
			obs: Observed{Job: inPlace(false), Pods: running, Gone: pods(pod("1", corev1.PodFailed).exited(1, "Error", false).at(4))}, want: at(4)},
		{name: "a pod deleted at once while it ran",
			obs:  Observed{Job: inPlace(false), Pods: running, ForceDeleted: pods(pod("1", corev1.PodRunning).trainerRunning().forceDeleted(5))},
			want: at(5)},
		{name: "every pod running", obs: Observed{Job: inPlace(false), Pods: running}},
		{name: "a suspended Job's stopped pod", obs: Observed{Job: inPlace(true), Pods: append(running, evicted.p)}},
		{name: "a pod the Job's suspension stopped, after the Job resumed", obs: Observed{Job: resumed(), Pods: append(running, evicted.p),
			Gone: pods(pod("2", corev1.PodFailed).exited(143, "Error", false).at(1).forceDeleted(1))}},
		{name: "resumed, the Job controller has not seen it yet", obs: Observed{Job: resuming(), Pods: append(running, evicted.p)}},
		{name: "a pod the suspension stopped, still in its grace period when the Job resumed",
			obs: Observed{Job: resumed(), Pods: append(running, stopping.p)}},
		{name: "recreated, not in place: the Job controller decides", obs: Observed{Job: job(), Pods: append(running, evicted.p)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "g").BackoffLimit(3, mlv1.RestartGang).Obj()
			if diff := cmp.Diff(tc.want, AttemptFailure(tj, tc.obs)); diff != "" {
				t.Errorf("AttemptFailure (-want +got):\n%s", diff)
			}
		})
	}
}

// TestInPlaceRunningMeansReady: the workers of a Job that restarts in place run once their trainer is ready
// (its supervisor neither holds a failed trainer, restarts, nor waits for its order as a replacement does);
// elsewhere a running pod runs.
func TestInPlaceRunningMeansReady(t *testing.T) {
	inPlace := job()
	inPlace.Annotations = map[string]string{names.InPlaceAnnotation: "true"}
	ready := pod("0", corev1.PodRunning).trainerRunning()
	ready.p.Status.ContainerStatuses[0].Ready = true
	waiting := pod("1", corev1.PodRunning).trainerRunning()
	for _, tc := range []struct {
		name string
		job  *batchv1.Job
		want phase
	}{
		{name: "in place: one trainer not ready", job: inPlace, want: phase{mlv1.StateInitializing, "WorkersStarting", "1 of 2 workers running"}},
		{name: "recreated: both pods run", job: job(), want: phase{mlv1.StateRunning, "AllWorkersRunning", "2 of 2 workers running"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "g").Obj()
			got := activePhase(tj, Observed{Job: tc.job, Pods: pods(ready, waiting)}, t0)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(phase{})); diff != "" {
				t.Errorf("phase (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLostNodeFate: a rank that exits on losing its peer decides nothing while the peer's node is silent:
// the verdict waits for the node's fate (its heartbeat stopped: until it counts as lost, at most
// NodeFateWait after its last heartbeat; not heard from since the failure: until its renewal is due, for a
// verdict that would end the run). A worker stranded on a lost node restarts the attempt as a disruption
// although no pod failed (its peers blocked on it).
func TestLostNodeFate(t *testing.T) {
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	beat := func(sec int) map[string]Heartbeat {
		return map[string]Heartbeat{"n-2": {Renewed: at(sec), Duration: 40 * time.Second}}
	}
	failed := job(jobCond(batchv1.JobFailureTarget, "BackoffLimitExceeded", ""), jobCond(batchv1.JobFailed, "BackoffLimitExceeded", ""))
	exitedOn := func(code int32) *podB {
		return pod("0", corev1.PodFailed).exited(code, "Error", false).message("lost rank 1: EOF").on("n-1")
	}
	peer := func() *podB { return pod("1", corev1.PodRunning).on("n-2") }
	markedNotReady := func(sec int) *podB {
		b := peer()
		b.p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse,
			LastTransitionTime: metav1.NewTime(at(sec))}}
		b.p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "trainer", Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		return b
	}
	unreachable := map[string]string{"n-2": "is not Ready (NodeStatusUnknown: Kubelet stopped posting node status.)"}
	held := []any{mlv1.StateRunning, int32(0), int32(0)}
	for _, tc := range []struct {
		name         string
		backoffLimit int32
		lastFailure  int // seconds after t0 of status.lastFailureTime; 0: none
		obs          Observed
		now          int // seconds after the failure (t0)
		want         []any
	}{
		{name: "exit 1, the peer's heartbeat stopped: waits for the node", obs: Observed{Job: failed,
			Pods: pods(exitedOn(1), peer()), Heartbeats: beat(-8)}, now: 11, want: held},
		{name: "exit 1, the peer's node not heard from since, its renewal not due: waits", obs: Observed{Job: failed,
			Pods: pods(exitedOn(1), peer()), Heartbeats: beat(-1)}, now: 11, want: held},
		{name: "exit 1, the peer's node renewed since: decided", obs: Observed{Job: failed,
			Pods: pods(exitedOn(1), peer()), Heartbeats: beat(8)}, now: 11, want: []any{mlv1.StateFailed, int32(0), int32(0)}},
		{name: "exit 1, no lease: decided as before", obs: Observed{Job: failed, Pods: pods(exitedOn(1), peer())}, now: 11,
			want: []any{mlv1.StateFailed, int32(0), int32(0)}},
		{name: "exit 1, past the bound: decided", obs: Observed{Job: failed, Pods: pods(exitedOn(1), peer()), Heartbeats: beat(-8)},
			now: 83, want: []any{mlv1.StateFailed, int32(0), int32(0)}},
		{name: "exit 1, the node found lost: a disruption", obs: Observed{Job: failed, Pods: pods(exitedOn(1), peer()),
			Heartbeats: beat(-8), NodeTrouble: unreachable}, now: 40, want: []any{mlv1.StateInitializing, int32(1), int32(0)}},
		{name: "exit 137 within the budget, the renewal not due: not held (a restart, counted)", backoffLimit: 3,
			obs: Observed{Job: failed, Pods: pods(exitedOn(137), peer()), Heartbeats: beat(-1)}, now: 1,
			want: []any{mlv1.StateInitializing, int32(1), int32(1)}},
		{name: "exit 137 within the budget, the heartbeat stopped: waits", backoffLimit: 3,
			obs: Observed{Job: failed, Pods: pods(exitedOn(137), peer()), Heartbeats: beat(-16)}, now: 1, want: held},
		{name: "no failure, a worker stranded on a lost node: a disruption", obs: Observed{Job: job(),
			Pods: pods(pod("0", corev1.PodRunning).on("n-1"), markedNotReady(5)), NodeTrouble: unreachable}, now: 6,
			want: []any{mlv1.StateInitializing, int32(1), int32(0)}},
		{name: "no failure, the stranded worker the last restart was for", lastFailure: 5, obs: Observed{Job: job(),
			Pods: pods(pod("0", corev1.PodRunning).on("n-1"), markedNotReady(5)), NodeTrouble: unreachable}, now: 6, want: held},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "n").BackoffLimit(tc.backoffLimit, mlv1.RestartGang).Obj()
			tj.Status.State = mlv1.StateRunning
			if tc.lastFailure != 0 {
				tj.Status.LastFailureTime = &metav1.Time{Time: at(tc.lastFailure)}
			}
			st := Status(tj, tc.obs, metav1.NewTime(at(tc.now)))
			got := []any{st.State, st.Attempt, st.RestartCount}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("state, attempt, restartCount (-want +got):\n%s\nlastFailure %q, failureReason %q", diff, st.LastFailure, st.FailureReason)
			}
		})
	}
}

func TestMarkedNotReady(t *testing.T) {
	ready := func(pod, container bool) *corev1.Pod {
		s := corev1.ConditionFalse
		if pod {
			s = corev1.ConditionTrue
		}
		return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: s}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "trainer", Ready: container}}}}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{name: "ready", pod: ready(true, true), want: false},
		{name: "not ready, its containers ready: marked by the node lifecycle controller", pod: ready(false, true), want: true},
		{name: "not ready, a container not ready: its kubelet says so", pod: ready(false, false), want: false},
		{name: "pending", pod: &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, MarkedNotReady(tc.pod)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
