package derive

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// runningSinceT0 returns a status whose workers all run since t0, with rank 0's last advance at progress
// (nil: none) and its epoch and step.
func runningSinceT0(progress *time.Duration, epoch int32, step int64) mlv1.TrainingJobStatus {
	st := mlv1.TrainingJobStatus{State: mlv1.StateRunning, CurrentEpoch: epoch, CurrentStep: step}
	set(&st, mlv1.ConditionRunning, true, "AllWorkersRunning", "all 2 workers running", t0)
	if progress != nil {
		st.LastProgressTime = &metav1.Time{Time: t0.Add(*progress)}
	}
	return st
}

// TestDetectHang: no progress within the startup timeout, or progress that stood still for the stall
// timeout (explicit, or from the run's pace), is a hang; a run that is not running is never hung.
func TestDetectHang(t *testing.T) {
	at := func(d time.Duration) *time.Duration { return &d }
	policy := func(startup, stall *int32) *mlv1.TrainingJob {
		return tjtest.NewTJ("ml", "h").With(func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{StartupTimeoutSeconds: startup, StallTimeoutSeconds: stall}
		}).Obj()
	}
	def := policy(nil, nil)
	notRunning := runningSinceT0(nil, 0, 0)
	notRunning.State = mlv1.StateInitializing
	cases := []struct {
		name    string
		tj      *mlv1.TrainingJob
		st      mlv1.TrainingJobStatus
		slowest time.Duration
		now     time.Duration // after t0
		want    Hang
	}{
		{name: "not running", tj: def, st: notRunning, slowest: 0, now: time.Hour, want: Hang{}},
		{
			name:    "no progress yet, within the default startup timeout",
			tj:      def,
			st:      runningSinceT0(nil, 0, 0),
			slowest: 0,
			now:     5 * time.Minute,
			want: Hang{Reason: ReasonNoProgressSinceStart, Timeout: 10 * time.Minute, Since: 5 * time.Minute,
				Message: "no progress for 5m0s since all 2 workers of attempt 0 started running (failurePolicy.startupTimeoutSeconds 10m0s)"},
		},
		{
			name:    "no progress past the startup timeout",
			tj:      def,
			st:      runningSinceT0(nil, 0, 0),
			slowest: 0,
			now:     10 * time.Minute,
			want: Hang{Hung: true, Reason: ReasonNoProgressSinceStart, Timeout: 10 * time.Minute, Since: 10 * time.Minute,
				Message: "no progress for 10m0s since all 2 workers of attempt 0 started running (failurePolicy.startupTimeoutSeconds 10m0s)"},
		},
		{
			name:    "an earlier attempt's progress is none of this attempt's",
			tj:      def,
			st:      runningSinceT0(at(-time.Minute), 3, 0),
			slowest: 0,
			now:     11 * time.Minute,
			want: Hang{Hung: true, Reason: ReasonNoProgressSinceStart, Timeout: 10 * time.Minute, Since: 11 * time.Minute,
				Message: "no progress for 11m0s since all 2 workers of attempt 0 started running (failurePolicy.startupTimeoutSeconds 10m0s)"},
		},
		{
			name:    "startup check off",
			tj:      policy(ptr.To[int32](0), nil),
			st:      runningSinceT0(nil, 0, 0),
			slowest: 0,
			now:     time.Hour,
			want:    Hang{Since: time.Hour},
		},
		{
			name:    "stood still within the default floor",
			tj:      def,
			st:      runningSinceT0(at(time.Minute), 7, 1200),
			slowest: time.Minute,
			now:     10*time.Minute + 59*time.Second,
			want: Hang{Reason: ReasonProgressStalled, Timeout: 10 * time.Minute, Since: 9*time.Minute + 59*time.Second,
				Message: "no progress for 9m59s since epoch 7 step 1200 (last advanced at 2026-01-01T00:01:00Z; stall timeout 10m0s)"},
		},
		{
			name:    "stood still past the default floor",
			tj:      def,
			st:      runningSinceT0(at(time.Minute), 7, 1200),
			slowest: time.Minute,
			now:     13 * time.Minute,
			want: Hang{Hung: true, Reason: ReasonProgressStalled, Timeout: 10 * time.Minute, Since: 12 * time.Minute,
				Message: "no progress for 12m0s since epoch 7 step 1200 (last advanced at 2026-01-01T00:01:00Z; stall timeout 10m0s)"},
		},
		{
			name:    "slow epochs stretch the default: 5 × 3m",
			tj:      def,
			st:      runningSinceT0(at(time.Minute), 7, 0),
			slowest: 3 * time.Minute,
			now:     13 * time.Minute,
			want: Hang{Reason: ReasonProgressStalled, Timeout: 15 * time.Minute, Since: 12 * time.Minute,
				Message: "no progress for 12m0s since epoch 7 (last advanced at 2026-01-01T00:01:00Z; stall timeout 15m0s)"},
		},
		{
			name:    "an explicit stall timeout",
			tj:      policy(nil, ptr.To[int32](60)),
			st:      runningSinceT0(at(time.Minute), 2, 0),
			slowest: time.Hour,
			now:     3 * time.Minute,
			want: Hang{Hung: true, Reason: ReasonProgressStalled, Timeout: time.Minute, Since: 2 * time.Minute,
				Message: "no progress for 2m0s since epoch 2 (last advanced at 2026-01-01T00:01:00Z; stall timeout 1m0s)"},
		},
		{
			// Anyone who reaches the pod might make reads fail: no verdict on a failed read alone.
			name:    "stood still, reads failing for less than the timeout",
			tj:      def,
			st:      readsFailing(runningSinceT0(at(time.Minute), 7, 1200), 5*time.Minute),
			slowest: time.Minute,
			now:     13 * time.Minute,
			want: Hang{Reason: ReasonProgressStalled, Timeout: 10 * time.Minute, Since: 12 * time.Minute,
				Message: "no progress for 12m0s since epoch 7 step 1200 (last advanced at 2026-01-01T00:01:00Z; stall timeout 10m0s); " +
					"rank 0 could not be read for the last 8m0s"},
		},
		{
			name:    "stood still, reads failing for the timeout too",
			tj:      def,
			st:      readsFailing(runningSinceT0(at(time.Minute), 7, 1200), 2*time.Minute),
			slowest: time.Minute,
			now:     13 * time.Minute,
			want: Hang{Hung: true, Reason: ReasonProgressStalled, Timeout: 10 * time.Minute, Since: 12 * time.Minute,
				Message: "no progress for 12m0s since epoch 7 step 1200 (last advanced at 2026-01-01T00:01:00Z; stall timeout 10m0s); " +
					"rank 0 could not be read for the last 11m0s"},
		},
		{
			name:    "stall check off",
			tj:      policy(nil, ptr.To[int32](0)),
			st:      runningSinceT0(at(time.Minute), 2, 0),
			slowest: 0,
			now:     time.Hour,
			want:    Hang{Since: 59 * time.Minute},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := DetectHang(tc.tj, tc.st, tc.slowest, time.Time{}, t0.Add(tc.now))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// readsFailing returns st with ProgressReported False (ScrapeFailed) since t0+from.
func readsFailing(st mlv1.TrainingJobStatus, from time.Duration) mlv1.TrainingJobStatus {
	set(&st, mlv1.ConditionProgressReported, false, ReasonScrapeFailed, "connection reset", metav1.NewTime(t0.Add(from)))
	return st
}

// noSource returns a running status whose rank 0 has no progress source (nothing ever reported).
func noSource() mlv1.TrainingJobStatus {
	st := runningSinceT0(nil, 0, 0)
	set(&st, mlv1.ConditionProgressReported, false, ReasonNoProgressSource, "progress is unknown", t0)
	return st
}

// TestDetectHangWithoutProgressSource: a run with no progress source is never hung by the defaults; the
// timeouts a job sets still act, the stall timeout on its output's silence when the supervisor tells it.
func TestDetectHangWithoutProgressSource(t *testing.T) {
	policy := func(startup, stall *int32) *mlv1.TrainingJob {
		return tjtest.NewTJ("ml", "h").With(func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{StartupTimeoutSeconds: startup, StallTimeoutSeconds: stall}
		}).Obj()
	}
	neverRead := runningSinceT0(nil, 0, 0)
	set(&neverRead, mlv1.ConditionProgressReported, false, ReasonScrapeFailed, "connection refused", t0)
	const unwatched = "(failurePolicy.stallTimeoutSeconds 15m0s): it has no progress source, so the silence of its output is what is watched"
	silent := "rank 0 printed nothing for 20m0s " + unwatched
	cases := []struct {
		name       string
		tj         *mlv1.TrainingJob
		st         mlv1.TrainingJobStatus
		lastOutput time.Duration // after t0; 0: unknown
		now        time.Duration
		want       Hang
	}{
		{name: "defaults: nothing acts, however long", tj: policy(nil, nil), st: noSource(), lastOutput: time.Minute, now: 10 * time.Hour,
			want: Hang{Since: 10 * time.Hour, Unknown: true}},
		{name: "never read counts as no source", tj: policy(nil, nil), st: neverRead, now: time.Hour,
			want: Hang{Since: time.Hour, Unknown: true}},
		{name: "an explicit startup timeout acts", tj: policy(ptr.To[int32](600), nil), st: noSource(), now: 11 * time.Minute,
			want: Hang{Hung: true, Reason: ReasonNoProgressSinceStart, Timeout: 10 * time.Minute, Since: 11 * time.Minute, Unknown: true,
				Message: "no progress for 11m0s since all 2 workers of attempt 0 started running (failurePolicy.startupTimeoutSeconds 10m0s); " +
					"rank 0 has no progress source (no endpoint, no recognised output line)"}},
		{name: "an explicit stall timeout watches the output: printing", tj: policy(nil, ptr.To[int32](900)), st: noSource(),
			lastOutput: 2 * time.Hour, now: 2*time.Hour + time.Minute,
			want: Hang{Reason: ReasonOutputSilent, Timeout: 15 * time.Minute, Since: time.Minute, Unknown: true,
				Message: "rank 0 printed nothing for 1m0s " + unwatched}},
		{name: "an explicit stall timeout watches the output: silent", tj: policy(nil, ptr.To[int32](900)), st: noSource(),
			lastOutput: time.Hour, now: time.Hour + 20*time.Minute,
			want: Hang{Hung: true, Reason: ReasonOutputSilent, Timeout: 15 * time.Minute, Since: 20 * time.Minute, Unknown: true, Message: silent}},
		{name: "an explicit stall timeout without the output's time acts on nothing", tj: policy(nil, ptr.To[int32](900)), st: noSource(),
			now: 5 * time.Hour, want: Hang{Since: 5 * time.Hour, Unknown: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var last time.Time
			if tc.lastOutput > 0 {
				last = t0.Add(tc.lastOutput)
			}
			got := DetectHang(tc.tj, tc.st, 0, last, t0.Add(tc.now))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestApplyHang: the Stalled condition turns True once, with the ranks' log lines, keeps the message of
// that moment while the run stays hung, and turns False when the run advances.
func TestApplyHang(t *testing.T) {
	st := runningSinceT0(nil, 0, 0)
	quiet := Hang{Reason: ReasonNoProgressSinceStart, Timeout: time.Minute, Message: "m1"}
	hung := Hang{Hung: true, Reason: ReasonNoProgressSinceStart, Timeout: time.Minute, Message: "m2"}
	var got []any
	for _, step := range []struct {
		h    Hang
		logs string
	}{
		{h: quiet, logs: ""},
		{h: hung, logs: "rank 0, last: x"},
		{h: Hang{Hung: true, Reason: ReasonNoProgressSinceStart, Message: "m3"}, logs: "y"},
		{h: quiet, logs: ""},
	} {
		turned := ApplyHang(&st, step.h, step.logs, t0)
		c := meta.FindStatusCondition(st.Conditions, mlv1.ConditionStalled)
		got = append(got, turned, string(c.Status), c.Reason, c.Message)
	}
	want := []any{false, "False", ReasonProgressing, "rank 0 advances within the 1m0s timeout",
		true, "True", ReasonNoProgressSinceStart, "m2; rank 0, last: x",
		false, "True", ReasonNoProgressSinceStart, "m2; rank 0, last: x",
		false, "False", ReasonProgressing, "rank 0 advances within the 1m0s timeout"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestHungPhase: the JobController acts on a Stalled condition of the current attempt by onHang and the
// rules, through the same restart budget; a verdict older than the attempt's start is not acted on.
func TestHungPhase(t *testing.T) {
	running := func(f func(*mlv1.FailurePolicy), restarts int32, stalledAt time.Duration) (*mlv1.TrainingJob, Observed) {
		tj := tjtest.NewTJ("ml", "h").BackoffLimit(3, mlv1.RestartGang).Obj()
		if f != nil {
			f(tj.Spec.FailurePolicy)
		}
		j := job()
		j.Labels = map[string]string{names.AttemptLabel: "0"}
		obs := Observed{Job: j, Pods: pods(pod("0", corev1.PodRunning), pod("1", corev1.PodRunning))}
		tj.Status = Status(tj, obs, t0)
		tj.Status.RestartCount = restarts
		set(&tj.Status, mlv1.ConditionStalled, true, ReasonProgressStalled, "no progress for 12m0s since epoch 7",
			metav1.NewTime(t0.Add(stalledAt)))
		return tj, obs
	}
	const hang = "Hang: no progress for 12m0s since epoch 7"
	cases := []struct {
		name      string
		f         func(*mlv1.FailurePolicy)
		restarts  int32
		stalledAt time.Duration
		want      []any // state, reason (Running's or Failed's), attempt, restartCount, message
	}{
		{
			name:      "Restart (the default): a counted gang restart",
			f:         nil,
			restarts:  0,
			stalledAt: time.Minute,
			want:      []any{mlv1.StateInitializing, ReasonRestarting, int32(1), int32(1), "restart 1/3: " + hang + "; starting attempt 1"},
		},
		{
			name:      "Restart with no budget left fails",
			f:         nil,
			restarts:  3,
			stalledAt: time.Minute,
			want: []any{mlv1.StateFailed, ReasonBackoffLimitExceeded, int32(0), int32(3),
				"3 restarts (failurePolicy.backoffLimit 3), last: " + hang},
		},
		{
			name:      "Fail",
			f:         func(f *mlv1.FailurePolicy) { f.OnHang = mlv1.HangFail },
			restarts:  0,
			stalledAt: time.Minute,
			want:      []any{mlv1.StateFailed, ReasonHung, int32(0), int32(0), "failurePolicy.onHang Fail: " + hang},
		},
		{
			name:      "None: only the condition",
			f:         func(f *mlv1.FailurePolicy) { f.OnHang = mlv1.HangNone },
			restarts:  0,
			stalledAt: time.Minute,
			want:      []any{mlv1.StateRunning, "AllWorkersRunning", int32(0), int32(0), ""},
		},
		{
			name:      "a verdict on an earlier attempt is not this one's",
			f:         nil,
			restarts:  0,
			stalledAt: -time.Second,
			want:      []any{mlv1.StateRunning, "AllWorkersRunning", int32(0), int32(0), ""},
		},
		{
			name: "a rule on kind Hang restarts without counting",
			f: func(f *mlv1.FailurePolicy) {
				f.Rules = []mlv1.FailureRule{
					{Name: "stuck-io", Action: mlv1.RuleRestartWithoutCounting, OnKinds: []mlv1.FailureKind{mlv1.FailureHang}},
				}
			},
			restarts:  3,
			stalledAt: time.Minute,
			want: []any{mlv1.StateInitializing, ReasonRestarting, int32(1), int32(3),
				"restart after a disruption (not counted against failurePolicy.backoffLimit) (failurePolicy.rules[0] stuck-io): " +
					hang + "; starting attempt 1"},
		},
		{
			name:      "restartPolicy Never fails it",
			f:         func(f *mlv1.FailurePolicy) { f.RestartPolicy = mlv1.RestartNever },
			restarts:  0,
			stalledAt: time.Minute,
			want:      []any{mlv1.StateFailed, ReasonHung, int32(0), int32(0), "no gang restart (failurePolicy.restartPolicy Never): " + hang},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tj, obs := running(tc.f, tc.restarts, tc.stalledAt)
			st := Status(tj, obs, metav1.NewTime(t0.Add(12*time.Minute)))
			reason, msg := ConditionReason(st, mlv1.ConditionRunning), ""
			if st.State == mlv1.StateInitializing {
				msg = ConditionMessage(st, mlv1.ConditionRestarting)
			}
			if st.State == mlv1.StateFailed {
				reason, msg = ConditionReason(st, mlv1.ConditionFailed), ConditionMessage(st, mlv1.ConditionFailed)
			}
			if diff := cmp.Diff(tc.want, []any{st.State, reason, st.Attempt, st.RestartCount, msg}); diff != "" {
				t.Errorf("state, reason, attempt, restartCount, message (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAdvanced: only a new epoch, step or percentage moves lastProgressTime; without either, any new
// training figure does, GPU utilisation excepted.
func TestAdvanced(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	tj := tjtest.NewTJ("ml", "a").Epochs(10).Obj()
	base := mlv1.TrainingJobStatus{CurrentEpoch: 3, CurrentStep: 300, Progress: "30%", Metrics: &mlv1.TrainingMetrics{Loss: f(0.5), Epoch: 3}}
	cases := []struct {
		name string
		old  mlv1.TrainingJobStatus
		s    Sample
		want bool
	}{
		{name: "same epoch and step", old: base, s: Sample{Epoch: f(3), Step: f(300), Loss: f(0.4)}, want: false},
		{name: "a new step", old: base, s: Sample{Epoch: f(3), Step: f(301)}, want: true},
		{name: "a new epoch", old: base, s: Sample{Epoch: f(4)}, want: true},
		{name: "epoch 0 served before the rendezvous", old: mlv1.TrainingJobStatus{}, s: Sample{Epoch: f(0), Step: f(0)}, want: false},
		{name: "nothing reported", old: mlv1.TrainingJobStatus{}, s: Sample{}, want: false},
		{name: "loss only, new", old: base, s: Sample{Loss: f(0.3)}, want: true},
		{
			name: "GPU utilisation only",
			old:  mlv1.TrainingJobStatus{Metrics: &mlv1.TrainingMetrics{Loss: f(0.5)}},
			s:    Sample{Loss: f(0.5), GPUUtilization: f(99)},
			want: false,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := *tc.old.DeepCopy()
			ApplySample(&st, tj, tc.s, RateWindow{At: t0.Time}, metav1.NewTime(t0.Add(time.Minute)))
			if got := st.LastProgressTime != nil; got != tc.want {
				t.Errorf("advanced = %v, want %v (status %+v)", got, tc.want, st)
			}
		})
	}
}

// TestLastAttemptHung: a restart the hang detector decided is known from status.lastFailure afterwards
// (the JobController stops that attempt's workers at once); another failure's is not.
func TestLastAttemptHung(t *testing.T) {
	tj := tjtest.NewTJ("ml", "h").BackoffLimit(3, mlv1.RestartGang).Obj()
	hung := tj.Status.DeepCopy()
	hungPhase(tj, hung, &metav1.Condition{Type: mlv1.ConditionStalled, Status: metav1.ConditionTrue, Message: "no progress for 10m0s"})
	crashed := tj.Status.DeepCopy()
	decide(tj, crashed, failure{kind: retryable, class: mlv1.FailureError, what: "rank 1 exited with code 137"})
	for _, tc := range []struct {
		name string
		st   *mlv1.TrainingJobStatus
		want bool
	}{
		{name: "hung", st: hung, want: true},
		{name: "crashed", st: crashed, want: false},
	} {
		if got := LastAttemptHung(*tc.st); got != tc.want || tc.st.Attempt != 1 {
			t.Errorf("%s: LastAttemptHung %t, want %t (attempt %d, lastFailure %q)", tc.name, got, tc.want, tc.st.Attempt, tc.st.LastFailure)
		}
	}
}
