package derive

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/text"
)

// Reasons of the Stalled condition, which the StatusController owns: a fact the JobController acts on by
// failurePolicy.onHang.
const (
	// ReasonNoProgressSinceStart: every worker runs, rank 0 has not advanced within startupTimeoutSeconds.
	ReasonNoProgressSinceStart = "NoProgressSinceStart"
	// ReasonProgressStalled: rank 0 advanced, then stood still for the stall timeout.
	ReasonProgressStalled = "ProgressStalled"
	// ReasonProgressing: the run advances within its timeouts (or is not running).
	ReasonProgressing = "Progressing"
	// ReasonNotWatched: the run has no progress source and the job set no hang timeout: nothing is
	// watched, and nothing is restarted for not reporting.
	ReasonNotWatched = "NotWatched"
	// ReasonOutputSilent: the run has no progress source and rank 0 printed nothing for the stall timeout
	// the job set: silence, a weaker sign than a counter that stopped.
	ReasonOutputSilent = "OutputSilent"
	// ReasonHung is the Failed reason of a hung run with onHang Fail.
	ReasonHung = "Hung"
)

// StallFloor and StallPaceFactor make the default stall timeout: the longer of StallFloor and
// StallPaceFactor times the slowest epoch seen.
const (
	StallFloor      = 10 * time.Minute
	StallPaceFactor = 5
)

// DefaultStartupTimeout is failurePolicy.startupTimeoutSeconds when unset, for a run with a progress source.
const DefaultStartupTimeout = 10 * time.Minute

// StartupTimeout returns failurePolicy.startupTimeoutSeconds, DefaultStartupTimeout when unset; ok is false
// when the check is off (0), set reports whether the job set it.
func StartupTimeout(tj *mlv1.TrainingJob) (d time.Duration, ok, set bool) {
	if f := tj.Spec.FailurePolicy; f.StartupTimeoutSeconds != nil {
		s := *f.StartupTimeoutSeconds
		return time.Duration(s) * time.Second, s > 0, true
	}
	return DefaultStartupTimeout, true, false
}

// StallTimeout returns failurePolicy.stallTimeoutSeconds, or (unset) the longer of StallFloor and
// StallPaceFactor times slowest, the slowest epoch seen; ok is false when the check is off.
func StallTimeout(tj *mlv1.TrainingJob, slowest time.Duration) (time.Duration, bool) {
	if d, set := explicitStall(tj); set {
		return d, d > 0
	}
	return max(StallFloor, StallPaceFactor*slowest), true
}

// explicitStall returns failurePolicy.stallTimeoutSeconds and whether the job set it.
func explicitStall(tj *mlv1.TrainingJob) (time.Duration, bool) {
	if f := tj.Spec.FailurePolicy; f.StallTimeoutSeconds != nil {
		return time.Duration(*f.StallTimeoutSeconds) * time.Second, true
	}
	return 0, false
}

// RunningSince returns when every worker of the current attempt ran (the Running condition turned True),
// and whether they all run now.
func RunningSince(st mlv1.TrainingJobStatus) (time.Time, bool) {
	c := meta.FindStatusCondition(st.Conditions, mlv1.ConditionRunning)
	if st.State != mlv1.StateRunning || c == nil || c.Status != metav1.ConditionTrue {
		return time.Time{}, false
	}
	return c.LastTransitionTime.Time, true
}

// SinceProgress returns how long the running attempt has gone without advancing: since rank 0 last
// advanced, or since the workers all ran when it has not in this attempt; started says which. ok is false
// when the run is not Running.
func SinceProgress(st mlv1.TrainingJobStatus, now time.Time) (d time.Duration, started, ok bool) {
	since, running := RunningSince(st)
	if !running {
		return 0, false, false
	}
	if p := st.LastProgressTime; p != nil && !p.Time.Before(since) {
		return now.Sub(p.Time), true, true
	}
	return now.Sub(since), false, true
}

// Hang is the StatusController's verdict on a run's progress.
type Hang struct {
	// Hung: the run is hung; Reason is NoProgressSinceStart, ProgressStalled or OutputSilent, Message says
	// for how long and since what.
	Hung            bool
	Reason, Message string
	// Timeout is the timeout that applies now (0 when none does); Since how long the run has not advanced.
	Timeout, Since time.Duration
	// Unknown: the run has no progress source (ProgressUnknown).
	Unknown bool
}

// DetectHang returns the verdict on whether a Running run is hung: its workers all run and rank 0 has not
// advanced within startupTimeoutSeconds of their start, or has advanced and then stood still for the stall
// timeout (slowest is the slowest epoch seen, for the default). A run with no progress source is judged
// only by the timeouts the job set (lastOutput, when rank 0's supervisor told it, is when rank 0 last
// printed). It is pure.
func DetectHang(tj *mlv1.TrainingJob, st mlv1.TrainingJobStatus, slowest time.Duration, lastOutput, now time.Time) Hang {
	since, started, ok := SinceProgress(st, now)
	if !ok {
		return Hang{}
	}
	if ProgressUnknown(&st) && !started {
		return unknownHang(tj, st, since, lastOutput, now)
	}
	if !started {
		timeout, on, _ := StartupTimeout(tj)
		if !on {
			return Hang{Since: since}
		}
		return withheld(startupHang(tj, st, since, timeout, ""), st, now)
	}
	timeout, on := StallTimeout(tj, slowest)
	if !on {
		return Hang{Since: since}
	}
	h := Hang{Timeout: timeout, Since: since, Reason: ReasonProgressStalled, Hung: since >= timeout}
	h.Message = fmt.Sprintf("no progress for %s since epoch %d%s (last advanced at %s; stall timeout %s)", round(since), st.CurrentEpoch,
		stepSuffix(st.CurrentStep), st.LastProgressTime.UTC().Format(time.RFC3339), round(timeout))
	return withheld(h, st, now)
}

// withheld holds back a verdict while rank 0's reads fail: a failed read is no evidence of a hang (anyone
// who reaches the pod might make reads fail), so the verdict waits until reads have failed for the
// timeout too, and then says so.
func withheld(h Hang, st mlv1.TrainingJobStatus, now time.Time) Hang {
	if failing, ok := readsFailingFor(st, now); ok {
		h.Hung = h.Hung && failing >= h.Timeout
		h.Message += fmt.Sprintf("; rank 0 could not be read for the last %s", round(failing))
	}
	return h
}

// readsFailingFor returns how long rank 0's reads have failed (ProgressReported False, ScrapeFailed);
// false when the last read succeeded.
func readsFailingFor(st mlv1.TrainingJobStatus, now time.Time) (time.Duration, bool) {
	c := meta.FindStatusCondition(st.Conditions, mlv1.ConditionProgressReported)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonScrapeFailed {
		return 0, false
	}
	return now.Sub(c.LastTransitionTime.Time), true
}

// startupHang returns the verdict of the startup timeout on an attempt whose rank 0 has not advanced.
func startupHang(tj *mlv1.TrainingJob, st mlv1.TrainingJobStatus, since, timeout time.Duration, note string) Hang {
	h := Hang{Timeout: timeout, Since: since, Reason: ReasonNoProgressSinceStart, Hung: since >= timeout}
	h.Message = fmt.Sprintf("no progress for %s since all %d workers of attempt %d started running (failurePolicy.startupTimeoutSeconds %s)%s",
		round(since), tj.Spec.NumWorkers, st.Attempt, round(timeout), note)
	return h
}

// unknownHang returns the verdict on a run with no progress source, judged by what the job set:
// startupTimeoutSeconds as for any run, stallTimeoutSeconds against the silence of rank 0's output when its
// supervisor reports it. With neither set nothing acts: no healthy run is restarted for not reporting.
func unknownHang(tj *mlv1.TrainingJob, st mlv1.TrainingJobStatus, since time.Duration, lastOutput, now time.Time) Hang {
	const note = "; rank 0 has no progress source (no endpoint, no recognised output line)"
	if timeout, on, set := StartupTimeout(tj); set && on {
		h := startupHang(tj, st, since, timeout, note)
		h.Unknown = true
		return h
	}
	stall, set := explicitStall(tj)
	if !set || stall <= 0 || lastOutput.IsZero() {
		return Hang{Since: since, Unknown: true}
	}
	silent := now.Sub(lastOutput)
	h := Hang{Timeout: stall, Since: silent, Reason: ReasonOutputSilent, Hung: silent >= stall, Unknown: true}
	h.Message = fmt.Sprintf("rank 0 printed nothing for %s (failurePolicy.stallTimeoutSeconds %s): it has no progress source, so "+
		"the silence of its output is what is watched", round(silent), round(stall))
	return h
}

func stepSuffix(step int64) string {
	if step == 0 {
		return ""
	}
	return fmt.Sprintf(" step %d", step)
}

func round(d time.Duration) time.Duration { return d.Round(time.Second) }

// ApplyHang sets the Stalled condition from h; logs (the ranks' last log lines, read when the run turns
// hung) end its message. A hung run keeps the message of the moment it turned hung, so the status is not
// written at every scrape. It reports whether the run turned hung now.
func ApplyHang(st *mlv1.TrainingJobStatus, h Hang, logs string, now metav1.Time) bool {
	if !h.Hung {
		if meta.FindStatusCondition(st.Conditions, mlv1.ConditionStalled) != nil || h.Timeout > 0 || h.Unknown {
			reason := ReasonProgressing
			if h.Unknown && h.Timeout == 0 {
				reason = ReasonNotWatched
			}
			set(st, mlv1.ConditionStalled, false, reason, progressingMessage(h), now)
		}
		return false
	}
	if !TurnsHung(*st, h) {
		return false
	}
	msg := h.Message
	if logs != "" {
		msg += "; " + logs
	}
	set(st, mlv1.ConditionStalled, true, h.Reason, text.Cut(msg, 4096), now)
	return true
}

// TurnsHung reports whether h says the run is hung and the Stalled condition does not say so yet (with h's
// reason).
func TurnsHung(st mlv1.TrainingJobStatus, h Hang) bool {
	c := meta.FindStatusCondition(st.Conditions, mlv1.ConditionStalled)
	return h.Hung && (c == nil || c.Status != metav1.ConditionTrue || c.Reason != h.Reason)
}

func progressingMessage(h Hang) string {
	switch {
	case h.Unknown && h.Timeout == 0:
		return "progress is unknown (no progress source): the hang checks act only when failurePolicy sets startupTimeoutSeconds " +
			"or stallTimeoutSeconds"
	case h.Reason == ReasonOutputSilent:
		return fmt.Sprintf("rank 0 prints within the %s timeout (no progress source: its output is watched)", round(h.Timeout))
	case h.Timeout == 0:
		return "the run is not running, or its hang checks are off"
	}
	return fmt.Sprintf("rank 0 advances within the %s timeout", round(h.Timeout))
}

// hungCondition returns the Stalled condition when it says the current attempt is hung, else nil: True,
// and turned so after every worker of this attempt ran (a verdict on an earlier attempt, not yet cleared by
// the StatusController, is not this attempt's).
func hungCondition(st mlv1.TrainingJobStatus) *metav1.Condition {
	c := meta.FindStatusCondition(st.Conditions, mlv1.ConditionStalled)
	since, running := RunningSince(st)
	if c == nil || c.Status != metav1.ConditionTrue || !running || c.LastTransitionTime.Time.Before(since) {
		return nil
	}
	return c
}

// hangFailurePrefix starts status.lastFailure when the attempt it ended had hung.
const hangFailurePrefix = "Hang: "

// LastAttemptHung reports whether the attempt before the current one ended because it hung (its failure,
// status.lastFailure, is the hang detector's verdict): its workers are stopped at once.
func LastAttemptHung(st mlv1.TrainingJobStatus) bool {
	return strings.HasPrefix(st.LastFailure, hangFailurePrefix)
}

// hungPhase returns the phase of a hung attempt, acted on by failurePolicy.onHang (Restart: a counted gang
// restart; Fail) after failurePolicy.rules, which may match it by kind Hang or by the ranks' last log lines.
func hungPhase(tj *mlv1.TrainingJob, st *mlv1.TrainingJobStatus, c *metav1.Condition) phase {
	f := failure{kind: retryable, class: mlv1.FailureHang, what: hangFailurePrefix + c.Message, text: c.Message}
	if tj.OnHang() == mlv1.HangFail {
		f.kind = permanent
	}
	return decide(tj, st, applyRules(tj, f))
}
