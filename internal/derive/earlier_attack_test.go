package derive

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestAttackEarlierRunsOutsideTheJobsRoot: rank 0's agent is the tenant's (or, see the controllers' attack
// test, a stranger's hand-made pod with the job's labels). Whatever it names as an earlier run goes into
// status.checkpoint.earlierRuns and into the operator's EarlierRunsFound event, which tells the user to
// resume from it. Entries outside the job's name root (another team's bucket/directory, `..` out of it,
// control characters that rewrite a terminal) should not be taken as "earlier runs of this name".
func TestAttackEarlierRunsOutsideTheJobsRoot(t *testing.T) {
	tj := tjtest.NewTJ("team-a", "train").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "shared"}).Obj()
	root := "s3://shared/" + builders.NameRoot(tj) + "/"
	hostile := []string{
		"s3://team-b-bucket/team-b/secret-model/uid-b/checkpoint-epoch-90",                   // another team's bucket
		root + "../../team-b/secret-model/uid-b/checkpoint-epoch-91",                         // `..` out of the root
		"\x1b[2J\x1b[H\nEarlierRunsFound: verified by cluster-admin\r\n/checkpoint-epoch-92", // terminal control
	}
	var reported []agentapi.EarlierRun
	for _, h := range hostile {
		reported = append(reported, agentapi.EarlierRun{Latest: h})
	}
	st := mlv1.TrainingJobStatus{}
	ApplyCheckpoints(&st, testPlace, agentapi.Status{Time: t0.Time, EarlierRuns: reported}, t0)
	msg, ok := EarlierRunsFound(tj, mlv1.TrainingJobStatus{}, st)
	var got []string
	if st.Checkpoint != nil {
		got = st.Checkpoint.EarlierRuns
	}
	for _, e := range got {
		if !strings.HasPrefix(e, root) || strings.Contains(e, "..") || strings.ContainsAny(e, "\x1b\r\n") {
			t.Errorf("status.checkpoint.earlierRuns takes %q, outside %s (event %v: %q)", e, root, ok, msg)
		}
	}
}

// TestAttackEarlierRunsFoundFlood: EarlierRunsFound is said "once", when earlierRuns first names a run. An
// agent that alternates a valid entry with an invalid one (non-nil, so the old value is not kept) clears
// earlierRuns and sets it again on every other read: one event each time.
func TestAttackEarlierRunsFoundFlood(t *testing.T) {
	tj := tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "b"}).Obj()
	st := mlv1.TrainingJobStatus{}
	events := 0
	const reads = 100
	for i := range reads {
		run := agentapi.EarlierRun{Latest: "s3://b/ml/a/old/checkpoint-epoch-3"}
		if i%2 == 1 {
			run.Latest = "not a checkpoint"
		}
		old := *st.DeepCopy()
		ApplyCheckpoints(&st, testPlace, agentapi.Status{Time: t0.Add(time.Duration(i) * time.Second),
			Latest:      "s3://b/ml/a/uid/checkpoint-epoch-1",
			EarlierRuns: []agentapi.EarlierRun{run}}, metav1.NewTime(t0.Add(time.Duration(i)*time.Second)))
		if _, ok := EarlierRunsFound(tj, old, st); ok {
			events++
		}
	}
	if events > 1 {
		t.Errorf("EarlierRunsFound said %d times in %d reads of one run's agent", events, reads)
	}
}

// TestAttackNodeFateLeftBounds: the verdict on a failure that would end the run waits for a node "not heard
// from since the failure until its renewal is due" (at most NodeFateWait after a stopped heartbeat, the
// commit says). Two inputs the operator does not control push that wait out of range:
//   - a Lease's leaseDurationSeconds (the kubelet's --node-lease-duration-seconds, any positive int32);
//   - the failure's time (a worker's FinishedAt: a node's clock, or, for a Job restarting in place, the
//     held exit the tenant's supervisor reports) in the future: healthy peers renewing every 10 s never
//     renew "after" it.
func TestAttackNodeFateLeftBounds(t *testing.T) {
	peer := pod("1", corev1.PodRunning).on("n-2")
	exited := pod("0", corev1.PodFailed).exited(1, "Error", false).on("n-1")
	obs := func(d time.Duration, renewed time.Time) Observed {
		return Observed{Pods: pods(exited, peer), Heartbeats: map[string]Heartbeat{"n-2": {Renewed: renewed, Duration: d}}}
	}
	t.Run("huge leaseDurationSeconds", func(t *testing.T) {
		// Renewed 1 s before the failure, healthy; read 1 s after it.
		left, _ := NodeFateLeft(obs(time.Duration(1<<31-1)*time.Second, t0.Add(-time.Second)), t0.Time, t0.Add(time.Second), true)
		if left > NodeFateWait {
			t.Errorf("the verdict waits %v (%.1f years) for a healthy node's renewal", left, left.Hours()/24/365)
		}
	})
	t.Run("failure time in the future, healthy peers", func(t *testing.T) {
		at := t0.Add(time.Hour) // a node's clock an hour ahead, or a supervisor's report
		waited := time.Duration(0)
		for now := t0.Time; now.Before(t0.Add(2 * time.Hour)); now = now.Add(time.Second) {
			renewed := now.Add(-time.Duration(now.Unix()%10) * time.Second) // renews every 10 s, lease 40 s
			if left, _ := NodeFateLeft(obs(40*time.Second, renewed), at, now, true); left > 0 {
				waited += time.Second
			}
		}
		if waited > NodeFateWait {
			t.Errorf("the verdict waited %v of simulated time on a node that renewed its lease every 10 s", waited)
		}
	})
	t.Run("through Status: a worker's end dated in the future keeps the run Running", func(t *testing.T) {
		// Exit 137 (retryable) with no restart left: a verdict that ends the run, so only NodeFateLeft holds
		// it (SettleLeft waits for permanent failures only). The end is dated a day ahead: a node's clock, or
		// the held exit the tenant's supervisor reports for a Job restarting in place (asEnded).
		tj := tjtest.NewTJ("ml", "n").BackoffLimit(0, mlv1.RestartGang).Obj()
		tj.Status.State = mlv1.StateRunning
		ended := pod("0", corev1.PodFailed).exited(137, "Error", false).on("n-1")
		ended.p.Status.ContainerStatuses[0].State.Terminated.FinishedAt = metav1.NewTime(t0.Add(24 * time.Hour))
		now := t0.Add(30 * time.Minute)
		st := Status(tj, Observed{Job: job(), Pods: pods(ended, peer),
			Heartbeats: map[string]Heartbeat{"n-2": {Renewed: now.Add(-2 * time.Second), Duration: 40 * time.Second}}}, metav1.NewTime(now))
		if st.State == mlv1.StateRunning {
			t.Errorf("30 min after a worker failed (no restarts left), the run is still %s", st.State)
		}
		st = Status(tj, Observed{Job: job(), Pods: pods(ended, peer)}, metav1.NewTime(now))
		t.Logf("the same without the peer's Lease: %s", st.State)
	})
}
