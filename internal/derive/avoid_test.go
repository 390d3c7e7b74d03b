package derive

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestSameRankTwiceIsNoEvidence: two failed attempts in a row, both with an exit on node n1, through Status
// as the JobController derives them. Rank 1 SIGKILLed twice on n1 (the same code) keeps n1: the program is
// as likely as the node (seen: a rank killed from outside twice recreated the whole gang); another rank
// failing on n1 next avoids it.
func TestSameRankTwiceIsNoEvidence(t *testing.T) {
	failed := func(attempt string) *batchv1.Job {
		j := job(jobCond(batchv1.JobFailed, "BackoffLimitExceeded", ""))
		j.Labels = map[string]string{names.AttemptLabel: attempt}
		return j
	}
	// attemptPods: the failing rank SIGKILLed on n1, the other one still running on n0.
	attemptPods := func(failing string) []corev1.Pod {
		other := map[string]string{"0": "1", "1": "0"}[failing]
		return pods(pod(failing, corev1.PodFailed).exited(137, "Error", false).on("n1"), pod(other, corev1.PodRunning).on("n0"))
	}
	for _, tc := range []struct {
		name       string
		second     string // the rank that fails in attempt 1
		wantNodes  []string
		wantReason string
	}{
		{name: "the same rank SIGKILLed twice on its node: kept", second: "1", wantNodes: nil},
		{name: "another rank failing on that node next: avoided", second: "0", wantNodes: []string{"n1"},
			wantReason: "rank 1 failed there in attempt 0, rank 0 in attempt 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "g").BackoffLimit(3, mlv1.RestartGang).Obj()
			tj.Status.State = mlv1.StateRunning
			tj.Status = Status(tj, Observed{Job: failed("0"), Pods: attemptPods("1")}, t0)
			if tj.Status.Attempt != 1 || tj.Status.LastFailureNode != "n1" || len(tj.Status.AvoidedNodes) != 0 {
				t.Fatalf("after attempt 0: attempt %d, lastFailureNode %q, avoidedNodes %+v; want 1, n1, none",
					tj.Status.Attempt, tj.Status.LastFailureNode, tj.Status.AvoidedNodes)
			}
			tj.Status.State = mlv1.StateRunning
			st := Status(tj, Observed{Job: failed("1"), Pods: attemptPods(tc.second)}, t0)
			var nodes []string
			reason := ""
			for _, a := range st.AvoidedNodes {
				nodes, reason = append(nodes, a.Name), a.Reason
			}
			if diff := cmp.Diff(tc.wantNodes, nodes); diff != "" || st.Attempt != 2 {
				t.Errorf("avoidedNodes (-want +got):\n%s\nattempt %d, want 2", diff, st.Attempt)
			}
			if reason != tc.wantReason {
				t.Errorf("reason %q, want %q", reason, tc.wantReason)
			}
		})
	}
}

// TestLastFailingRank: the rank status.lastFailure names, as describeExit writes it; none for a failure that
// was no rank's exit.
func TestLastFailingRank(t *testing.T) {
	exit := func(rank string, ties ...string) string {
		p := pod(rank, corev1.PodFailed).p
		return describeExit(&p, names.ContainerName, &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}, "", ties...)
	}
	for _, tc := range []struct {
		name        string
		lastFailure string
		want        string
	}{
		{name: "an exit", lastFailure: exit("3"), want: "3"},
		{name: "an exit tied with others", lastFailure: exit("12", "4", "5"), want: "12"},
		{name: "a lost node", lastFailure: "rank 1's node n-2 is gone", want: ""},
		{name: "a hang", lastFailure: hangFailurePrefix + "no progress for 12m", want: ""},
		{name: "a disruption", lastFailure: "pod w-1 was disrupted (DisruptionTarget PreemptionByScheduler: evicted)", want: ""},
		{name: "none", lastFailure: "", want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, lastFailingRank(&mlv1.TrainingJobStatus{LastFailure: tc.lastFailure})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
