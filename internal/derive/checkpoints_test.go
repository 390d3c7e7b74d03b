package derive

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// agentStopped adds a checkpoint-agent sidecar that stopped at second sec with message as its
// termination message.
func (b *podB) agentStopped(sec int, message string) *podB {
	b.p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "checkpoint-agent", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{Message: message, FinishedAt: metav1.NewTime(t0.Add(time.Duration(sec) * time.Second))}}}}
	return b
}

func report(epoch int) string {
	return `{"latest":"s3://b/ml/a/checkpoint-epoch-` + itoa(epoch) + `","latestEpoch":` + itoa(epoch) +
		`,"count":2,"sizeBytes":10,"time":"2026-01-01T00:00:00Z"}`
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestFinalCheckpointsFromTheAgentsTerminationMessage: the last report of rank 0's stopped agent reaches
// status.checkpoint after the run, unless the status already knows a newer checkpoint.
func TestFinalCheckpointsFromTheAgentsTerminationMessage(t *testing.T) {
	tj := tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Storage: &mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "b"}}
		tj.Status.Checkpoint = &mlv1.CheckpointStatus{Latest: "s3://b/ml/a/checkpoint-epoch-5", LatestEpoch: 5, Count: 3}
	}).Obj()
	cases := []struct {
		name      string
		pods      []corev1.Pod
		wantEpoch int32
		wantCount int32
	}{
		{name: "no stopped agent", pods: pods(pod("0", corev1.PodRunning)), wantEpoch: 5, wantCount: 3},
		{name: "the final report", pods: pods(pod("0", corev1.PodSucceeded).agentStopped(10, report(7))), wantEpoch: 7, wantCount: 2},
		{
			name:      "same epoch, rotated once more",
			pods:      pods(pod("0", corev1.PodSucceeded).agentStopped(10, report(5))),
			wantEpoch: 5,
			wantCount: 2,
		},
		{
			name:      "an older pod's report is not newer",
			pods:      pods(pod("0", corev1.PodFailed).agentStopped(10, report(4))),
			wantEpoch: 5,
			wantCount: 3,
		},
		{name: "rank 1's agent is idle", pods: pods(pod("1", corev1.PodSucceeded).agentStopped(10, report(9))), wantEpoch: 5, wantCount: 3},
		{
			name:      "the newest pod of rank 0 wins",
			pods:      pods(pod("0", corev1.PodSucceeded).agentStopped(20, report(8)), pod("0", corev1.PodFailed).agentStopped(10, report(6))),
			wantEpoch: 8,
			wantCount: 2,
		},
		{name: "not JSON", pods: pods(pod("0", corev1.PodFailed).agentStopped(10, "panic: boom")), wantEpoch: 5, wantCount: 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := *tj.Status.DeepCopy()
			if a, ok := FinalReport(tc.pods); ok {
				ApplyFinalReport(&st, testPlace, a, t0)
			}
			if diff := cmp.Diff([]int32{tc.wantEpoch, tc.wantCount}, []int32{st.Checkpoint.LatestEpoch, st.Checkpoint.Count}); diff != "" {
				t.Errorf("status.checkpoint epoch, count (-want +got):\n%s", diff)
			}
		})
	}
}

// TestApplyResumeFrom: a RESUME_FROM newer than status.checkpoint (its status write was lost) restores
// the status; the spec's resumeFrom and older values do not.
func TestApplyResumeFrom(t *testing.T) {
	const own, spec = "s3://b/ml/a/checkpoint-epoch-", "s3://b/ml/old/checkpoint-epoch-9"
	at := func(e int32) *mlv1.CheckpointStatus {
		return &mlv1.CheckpointStatus{Latest: own + itoa(int(e)), LatestEpoch: e, Count: 2}
	}
	cases := []struct {
		name       string
		status     *mlv1.CheckpointStatus
		resumeFrom string
		want       *mlv1.CheckpointStatus
	}{
		{name: "nothing known: restored", status: nil, resumeFrom: own + "3", want: &mlv1.CheckpointStatus{Latest: own + "3", LatestEpoch: 3}},
		{
			name:       "newer: moved, the rest kept",
			status:     at(2),
			resumeFrom: own + "4",
			want:       &mlv1.CheckpointStatus{Latest: own + "4", LatestEpoch: 4, Count: 2},
		},
		{name: "same or older: kept", status: at(4), resumeFrom: own + "4", want: at(4)},
		{name: "the spec's resumeFrom is not the job's own", status: nil, resumeFrom: spec, want: nil},
		{name: "empty", status: at(1), resumeFrom: "", want: at(1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := mlv1.TrainingJobStatus{Checkpoint: tc.status}
			ApplyResumeFrom(&st, tc.resumeFrom, spec, testPlace)
			if diff := cmp.Diff(tc.want, st.Checkpoint); diff != "" {
				t.Errorf("status.checkpoint (-want +got):\n%s", diff)
			}
		})
	}
}

// TestApplyResumed: what the attempt resumed from, for which attempt, and when that checkpoint was
// written when it is the newest the status knows; kept once newer ones come, dropped for a new attempt.
func TestApplyResumed(t *testing.T) {
	const own = "s3://b/ml/a/checkpoint-epoch-"
	written := func(sec int64) *metav1.MicroTime { return &metav1.MicroTime{Time: time.Unix(1_000_000+sec, 0)} }
	newest := func(e int, at *metav1.MicroTime) *mlv1.CheckpointStatus {
		return &mlv1.CheckpointStatus{Latest: own + itoa(e), LatestEpoch: int32(e), LastTime: at}
	}
	resumed := func(c *mlv1.CheckpointStatus, from string, at *metav1.MicroTime, attempt int32) *mlv1.CheckpointStatus {
		c.ResumedFrom, c.ResumedFromMessage, c.ResumedFromTime, c.ResumedAttempt = from, ResumedMessage(from), at, attempt
		return c
	}
	cases := []struct {
		name    string
		status  *mlv1.CheckpointStatus
		attempt int32
		from    string
		want    *mlv1.CheckpointStatus
	}{
		{name: "the newest: its time", status: newest(3, written(30)), attempt: 1, from: own + "3",
			want: resumed(newest(3, written(30)), own+"3", written(30), 1)},
		{name: "a newer one written since: the time kept", status: resumed(newest(4, written(60)), own+"3", written(30), 1),
			attempt: 1, from: own + "3", want: resumed(newest(4, written(60)), own+"3", written(30), 1)},
		{name: "an older one: its time unknown", status: newest(4, written(60)), attempt: 2, from: own + "3",
			want: resumed(newest(4, written(60)), own+"3", nil, 2)},
		{name: "a new attempt from the same checkpoint of unknown time: still unknown",
			status: resumed(newest(4, written(60)), own+"3", written(30), 1), attempt: 2, from: own + "3",
			want: resumed(newest(4, written(60)), own+"3", nil, 2)},
		{name: "nothing, with checkpoints known: the attempt recorded", status: newest(3, written(30)), attempt: 1,
			want: resumed(newest(3, written(30)), "", nil, 1)},
		{name: "nothing, and no checkpoint: no status", attempt: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := mlv1.TrainingJobStatus{Attempt: tc.attempt, Checkpoint: tc.status}
			ApplyResumed(&st, tc.from)
			if diff := cmp.Diff(tc.want, st.Checkpoint); diff != "" {
				t.Errorf("status.checkpoint (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStorageErrorIsBounded: the error an agent reports comes from the job's storage server, which a
// tenant may run: the condition keeps at most 1 KiB of it, cut at a character's boundary, so the status
// write is not refused (a condition's message holds 32 KiB) and the Warning event's note (1 KiB) says
// the same.
func TestStorageErrorIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		error string
		want  string
	}{
		{name: "short", error: "listing s3://b/ml/a/: api error AccessDenied: no", want: "listing s3://b/ml/a/: api error AccessDenied: no"},
		{name: "long ascii", error: strings.Repeat("x", 100000), want: strings.Repeat("x", 1024)},
		{name: "long multibyte", error: "x" + strings.Repeat("é", 600), want: "x" + strings.Repeat("é", 511)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &mlv1.TrainingJobStatus{}
			ApplyCheckpoints(st, testPlace, agentapi.Status{Time: t0.Time, Error: tc.error}, t0)
			got := ConditionMessage(*st, mlv1.ConditionCheckpointStorageReady)
			if got != tc.want || !utf8.ValidString(got) {
				t.Errorf("message of %d bytes, want %d bytes (valid UTF-8: %t)", len(got), len(tc.want), utf8.ValidString(got))
			}
		})
	}
}

// TestAgentErrorIsBounded: why the agent could not be read (what answered on its address may say anything)
// is bounded too.
func TestAgentErrorIsBounded(t *testing.T) {
	st := &mlv1.TrainingJobStatus{}
	ApplyAgentError(st, errors.New("checkpoint agent: GET http://10.0.0.1:8081/status: 500 "+strings.Repeat("x", 100000)), t0)
	if got := ConditionMessage(*st, mlv1.ConditionCheckpointStorageReady); len(got) > 1024 || !strings.HasPrefix(got, "rank 0's") {
		t.Errorf("message of %d bytes %.80q, want at most 1024 bytes", len(got), got)
	}
}

// TestEarlierRunsInTheStatus: the earlier runs an agent names reach status.checkpoint.earlierRuns bounded
// (the report is the pod's word: a checkpoint's name, valid UTF-8, 1 KiB, three, no repeats), are kept
// through a report without them, and are told in one event, when they first appear.
func TestEarlierRunsInTheStatus(t *testing.T) {
	run := func(uri string) agentapi.EarlierRun { return agentapi.EarlierRun{Latest: uri} }
	old := "/checkpoints/ml/same/checkpoint-epoch-6"
	tests := []struct {
		name       string
		before     []string // status.checkpoint.earlierRuns before the report
		report     []agentapi.EarlierRun
		resumeFrom string
		want       []string
		wantEvent  string
	}{
		{name: "none", want: nil},
		{name: "one: an event", report: []agentapi.EarlierRun{run(old)}, want: []string{old},
			wantEvent: "checkpoints of 1 earlier run(s) of this name are kept; the newest: " + old +
				"; this run starts fresh: to continue one, create the job with spec.checkpoint.resumeFrom naming it"},
		{name: "continued explicitly", report: []agentapi.EarlierRun{run(old)}, resumeFrom: old, want: []string{old},
			wantEvent: "checkpoints of 1 earlier run(s) of this name are kept; the newest: " + old +
				"; this run resumes from spec.checkpoint.resumeFrom " + old},
		{name: "already said: no event", before: []string{old}, report: []agentapi.EarlierRun{run(old)}, want: []string{old}},
		{name: "found once per run: a later report does not change them", before: []string{old},
			report: []agentapi.EarlierRun{run("/checkpoints/ml/same/b/checkpoint-epoch-1")}, want: []string{old}},
		{name: "a report without them keeps them", before: []string{old}, want: []string{old}},
		{name: "hostile: bounded",
			report: []agentapi.EarlierRun{run("not a checkpoint"), run("/checkpoints/ml/same/" + strings.Repeat("a", 2000) + "/checkpoint-epoch-1"),
				run("/checkpoints/ml/same/\xff/checkpoint-epoch-1"), run(old), run(old),
				run("s3://team-b/team-b/model/checkpoint-epoch-9"), run("/checkpoints/ml/same/../../team-b/x/checkpoint-epoch-9"),
				run("/checkpoints/ml/same/r1/\x1b[2J/checkpoint-epoch-1"), run("/checkpoints/ml/same/r1/deep/checkpoint-epoch-1"),
				run("/checkpoints/ml/same/a/checkpoint-epoch-1"), run("/checkpoints/ml/same/b/checkpoint-epoch-1"),
				run("/checkpoints/ml/same/c/checkpoint-epoch-1")},
			want: []string{old, "/checkpoints/ml/same/a/checkpoint-epoch-1", "/checkpoints/ml/same/b/checkpoint-epoch-1"},
			wantEvent: "checkpoints of 3 earlier run(s) of this name are kept; the newest: " + old +
				"; this run starts fresh: to continue one, create the job with spec.checkpoint.resumeFrom naming it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "same").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), ResumeFrom: tt.resumeFrom}
			}).Obj()
			if tt.before != nil {
				tj.Status.Checkpoint = &mlv1.CheckpointStatus{EarlierRuns: tt.before}
			}
			before := *tj.Status.DeepCopy()
			ApplyCheckpoints(&tj.Status, testPlace, agentapi.Status{Time: t0.Time, EarlierRuns: tt.report}, t0)
			var got []string
			if tj.Status.Checkpoint != nil {
				got = tj.Status.Checkpoint.EarlierRuns
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("earlierRuns (-want +got):\n%s", diff)
			}
			event, _ := EarlierRunsFound(tj, before, tj.Status)
			if diff := cmp.Diff(tt.wantEvent, event); diff != "" {
				t.Errorf("event (-want +got):\n%s", diff)
			}
		})
	}
}

// testPlace is where the tests' job keeps its checkpoints: its reports name s3://b/ml/a/checkpoint-....
var testPlace = Place{NameRoot: "ml/same", RunRoot: "ml/a", Store: "s3://b"}

// TestInRun: a report's latest checkpoint must be one directly in the run's own directory: in its bucket,
// or under wherever the agent's volume is mounted.
func TestInRun(t *testing.T) {
	s3 := Place{RunRoot: "ml/a/uid-1", Store: "s3://b"}
	pvc := Place{RunRoot: "ml/a/uid-1", Mount: "/checkpoints"}
	processNode := Place{RunRoot: "ml/a/uid-1", Mount: "/checkpoints", MountRoots: []string{"/var/lib/node"}}
	for _, tc := range []struct {
		name  string
		place Place
		uri   string
		want  bool
	}{
		{name: "the run's", place: s3, uri: "s3://b/ml/a/uid-1/checkpoint-epoch-4", want: true},
		{name: "mid-epoch, a prefix's slash", place: s3, uri: "s3://b/ml/a/uid-1/checkpoint-epoch-4-step-20/", want: true},
		{name: "another bucket", place: s3, uri: "s3://evil/ml/a/uid-1/checkpoint-epoch-999"},
		{name: "another store", place: s3, uri: "gs://b/ml/a/uid-1/checkpoint-epoch-999"},
		{name: "another run of the name", place: s3, uri: "s3://b/ml/a/uid-0/checkpoint-epoch-9"},
		{name: "a run whose ID the run's extends", place: s3, uri: "s3://b/ml/a/uid-1x/checkpoint-epoch-9"},
		{name: "below the run's directory", place: s3, uri: "s3://b/ml/a/uid-1/x/checkpoint-epoch-9"},
		{name: "up and back", place: s3, uri: "s3://b/ml/a/uid-1/../uid-1/checkpoint-epoch-9"},
		{name: "not a checkpoint", place: s3, uri: "s3://b/ml/a/uid-1/model.pt"},
		{name: "a control character", place: s3, uri: "s3://b/ml/a/uid-1/checkpoint-epoch-4\n"},
		{name: "invalid UTF-8", place: s3, uri: "s3://b/ml/a/uid-1/checkpoint-epoch-4\xff"},
		{name: "mounted", place: pvc, uri: "/checkpoints/ml/a/uid-1/checkpoint-epoch-4", want: true},
		{name: "a process node's mount", place: processNode, uri: "/var/lib/node/v/ckpt/ml/a/uid-1/checkpoint-epoch-4", want: true},
		{name: "mounted elsewhere, on a cluster", place: pvc, uri: "/var/lib/node/v/ckpt/ml/a/uid-1/checkpoint-epoch-4"},
		{name: "another job's directory on a shared claim", place: pvc, uri: "/checkpoints/other/b/uid-9/ml/a/uid-1/checkpoint-epoch-999"},
		{name: "another volume of the pod", place: processNode, uri: "/etc/ml/a/uid-1/checkpoint-epoch-4"},
		{name: "a double slash", place: pvc, uri: "/checkpoints//ml/a/uid-1/checkpoint-epoch-4"},
		{name: "the root twice", place: pvc, uri: "/checkpoints/ml/a/uid-1/ml/a/uid-1/checkpoint-epoch-4"},
		{name: "mounted, an object store's", place: pvc, uri: "s3://evil/ml/a/uid-1/checkpoint-epoch-4"},
		{name: "mounted, a relative path", place: pvc, uri: "ml/a/uid-1/checkpoint-epoch-4"},
		{name: "mounted, another run", place: pvc, uri: "/checkpoints/ml/a/uid-0/checkpoint-epoch-4"},
		{name: "mounted, up and back", place: pvc, uri: "/checkpoints/ml/a/uid-1/../../b/uid-1/checkpoint-epoch-4"},
		{name: "no run", place: Place{Store: "s3://b"}, uri: "s3://b/checkpoint-epoch-4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := InRun(tc.uri, tc.place); got != tc.want {
				t.Errorf("InRun(%q, %+v) = %v, want %v", tc.uri, tc.place, got, tc.want)
			}
		})
	}
}

// TestReportsOfAnotherRun: a report (running or final) or a RESUME_FROM that names a checkpoint outside the
// run's directory changes nothing: what the workers resume from stays the run's own.
func TestReportsOfAnotherRun(t *testing.T) {
	own := &mlv1.CheckpointStatus{Latest: "s3://b/ml/a/checkpoint-epoch-4", LatestEpoch: 4, Count: 2}
	for _, evil := range []string{"s3://evil/x/checkpoint-epoch-999", "s3://b/ml/other/checkpoint-epoch-999"} {
		t.Run(evil, func(t *testing.T) {
			a := agentapi.Status{Time: t0.Time, Latest: evil, LatestEpoch: 999, Count: 1}
			for name, apply := range map[string]func(*mlv1.TrainingJobStatus){
				"running":     func(st *mlv1.TrainingJobStatus) { ApplyCheckpoints(st, testPlace, a, t0) },
				"final":       func(st *mlv1.TrainingJobStatus) { ApplyFinalReport(st, testPlace, a, t0) },
				"RESUME_FROM": func(st *mlv1.TrainingJobStatus) { ApplyResumeFrom(st, evil, "", testPlace) },
			} {
				st := mlv1.TrainingJobStatus{Checkpoint: own.DeepCopy()}
				apply(&st)
				if diff := cmp.Diff(own, st.Checkpoint); diff != "" {
					t.Errorf("%s: status.checkpoint (-want +got):\n%s", name, diff)
				}
			}
		})
	}
}
