package derive

import (
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/text"
)

// Reasons of a failed attempt's outcome.
const (
	// ReasonRestarting: the workers of a failed attempt are stopped and a new set starts.
	ReasonRestarting = "Restarting"
	// ReasonNoTrainingProgram: the workers ran a framework's default image that has no training program
	// (not PyTorch's, which has the runner) with neither command nor args, and "succeeded": nothing was
	// trained.
	ReasonNoTrainingProgram = "NoTrainingProgram"
	// ReasonWorkerDefaultsApplied (an event): the cluster's worker defaults gave an attempt's pods these
	// settings, beneath the job's own.
	ReasonWorkerDefaultsApplied = "WorkerDefaultsApplied"
	// ReasonBackoffLimitExceeded: a retryable failure with no restart left.
	ReasonBackoffLimitExceeded = "BackoffLimitExceeded"
	// ReasonNonRetryableExitCode: a trainer exited with a code that is not retried.
	ReasonNonRetryableExitCode = "NonRetryableExitCode"
	// ReasonWorkerFailed: a worker failed under restartPolicy Never.
	ReasonWorkerFailed = "WorkerFailed"
)

// NoTrainingProgramMessage says why a job that ran the default image with no command failed, and what to do.
const NoTrainingProgramMessage = "the workers ran the framework's default image with no command: it has no training program of its own " +
	"(only the pytorch default image has the default runner), so they ended at once having trained nothing. " +
	"Set spec.command (and spec.image to an image that holds your script)"

// failureKind says whether a failure restarts the gang, and whether that restart counts.
type failureKind int

const (
	// retryable restarts the gang and counts against backoffLimit.
	retryable failureKind = iota
	// disruption (preemption, eviction, node loss: the pod's DisruptionTarget condition) restarts the
	// gang without counting.
	disruption
	// permanent fails the run at once.
	permanent
)

// failure is a classified failure of an attempt, a description a user can act on, and the facts
// failurePolicy.rules match.
type failure struct {
	kind failureKind
	what string
	// class, exitCode (0: none) and text (the termination message, or a hang's log lines) are what rules
	// match; node is where the failing rank ran ("" unknown), rank which it is ("" unknown: no rank's
	// exit); lost the nodes of workers that were lost.
	class    mlv1.FailureKind
	exitCode int32
	text     string
	node     string
	rank     string
	lost     map[string]string
	// tied are exits that cannot be told apart from the first (same second, same kind): a rule that
	// matches one of them decides, and its node is the failing one.
	tied []failure
	// rule names the rule that decided the kind ("" none); avoidNode is that rule's avoidNode.
	rule      string
	avoidNode bool
	// inputs: the exit is the fetch-inputs init container's (a model or dataset source failed).
	inputs bool
	// at is when the failing rank's container ended; zero when the failure is no exit.
	at time.Time
	// schedulable are the nodes the workers could run on and how many each holds (Observed.Schedulable;
	// nil: not read), workers the job's: avoidance leaves room for them all.
	schedulable map[string]int32
	workers     int32
}

// failedAttempt returns the phase the failed Job of the current attempt leads to. With restartPolicy Gang a
// disruption or a retryable failure within the budget starts a new attempt (see decide). Anything else
// fails the run with a reason naming the rank, its exit code and the budget.
func failedAttempt(tj *mlv1.TrainingJob, st *mlv1.TrainingJobStatus, obs Observed, c *batchv1.JobCondition, now metav1.Time) phase {
	if tj.RestartPolicy() == mlv1.RestartOnFailure {
		// The Job itself restarted the workers in place until its backoffLimit (the budget).
		return phase{mlv1.StateFailed, c.Reason, failureMessage(c, obs.ended(), obs.Logs)}
	}
	f := classify(tj, obs, c)
	f.schedulable, f.workers = obs.Schedulable, tj.Spec.NumWorkers
	f = applyRules(tj, f)
	ends := f.kind == permanent || f.kind == retryable && st.RestartCount >= tj.BackoffLimit()
	if f.kind == permanent && SettleLeft(obs, c, now) > 0 ||
		f.kind != disruption && nodeFateAwaited(obs, c.LastTransitionTime.Time, now.Time, ends) {
		// Another rank may have failed first, unreported yet, or a worker's node may be lost: decide on the
		// whole story.
		prev := tj.Status.State
		return phase{prev, ConditionReason(tj.Status, string(prev)), ConditionMessage(tj.Status, string(prev))}
	}
	return decide(tj, st, f)
}

// decide returns the run's next phase for a classified failure. A disruption or a retryable failure
// within the budget starts a new attempt: st gets the next attempt number, the restart count (when it
// counts), lastFailure and the nodes to avoid, and the phase is Initializing/Restarting.
func decide(tj *mlv1.TrainingJob, st *mlv1.TrainingJobStatus, f failure) phase {
	limit := tj.BackoffLimit()
	by := ""
	if f.rule != "" {
		by = " (" + f.rule + ")"
	}
	switch {
	case tj.RestartPolicy() != mlv1.RestartGang && f.class == mlv1.FailureHang:
		return phase{mlv1.StateFailed, ReasonHung,
			fmt.Sprintf("no gang restart (failurePolicy.restartPolicy %s): %s", tj.RestartPolicy(), f.what)}
	case tj.RestartPolicy() == mlv1.RestartNever:
		return phase{mlv1.StateFailed, ReasonWorkerFailed, "no restarts (failurePolicy.restartPolicy Never): " + f.what}
	case f.kind == permanent && f.inputs && f.rule == "":
		return phase{mlv1.StateFailed, ReasonInputsFailed, "a model or dataset source cannot be fetched: " + f.what}
	case f.kind == permanent && f.rule != "":
		return phase{mlv1.StateFailed, ReasonFailureRule, "failed by " + f.rule + ": " + f.what}
	case f.kind == permanent && f.class == mlv1.FailureHang:
		return phase{mlv1.StateFailed, ReasonHung, "failurePolicy.onHang Fail: " + f.what}
	case f.kind == permanent:
		return phase{mlv1.StateFailed, ReasonNonRetryableExitCode, "not retried (failurePolicy.nonRetryableExitCodes, default 1-128): " + f.what}
	case f.kind == retryable && st.RestartCount >= limit:
		return phase{mlv1.StateFailed, ReasonBackoffLimitExceeded,
			fmt.Sprintf("%d restarts (failurePolicy.backoffLimit %d), last: %s", st.RestartCount, limit, f.what)}
	}
	note := avoidNodes(tj, st, f)
	st.Attempt++
	st.LastFailure = text.Cut(f.what, 2048)
	st.LastFailureTime = nil
	if !f.at.IsZero() {
		st.LastFailureTime = &metav1.Time{Time: f.at}
	}
	st.Workers = mlv1.WorkerCounts{}
	if f.kind == retryable {
		st.RestartCount++
		return phase{mlv1.StateInitializing, ReasonRestarting,
			fmt.Sprintf("restart %d/%d%s: %s%s; starting attempt %d", st.RestartCount, limit, by, f.what, note, st.Attempt)}
	}
	return phase{mlv1.StateInitializing, ReasonRestarting, fmt.Sprintf(
		"restart after a disruption (not counted against failurePolicy.backoffLimit)%s: %s%s; starting attempt %d", by, f.what, note, st.Attempt)}
}

// nodeFateAwaited reports whether the verdict on a failure at `at` waits for a worker's node (NodeFateLeft).
func nodeFateAwaited(obs Observed, at, now time.Time, ends bool) bool {
	left, _ := NodeFateLeft(obs, at, now, ends)
	return left > 0
}

// ReasonFailureRule is the Failed reason of a failure a rule of failurePolicy.rules fails.
const ReasonFailureRule = "FailureRule"

// FailureSettle is how long a failed attempt whose first reported exit would end the run (an error exit,
// not retried) waits for the attempt's other pods to report their end. A rank killed by a signal (OOM,
// a crash: retried) makes its peers exit with an error at once, and on a cluster each node's kubelet
// reports its own pods: the peer's error exit often reaches the API server first, and deciding on it alone
// failed runs that should have restarted (found on real nodes; a process node reports at once).
const FailureSettle = 10 * time.Second

// SettleLeft returns how long the verdict on a failed attempt still waits for pods of the attempt that have
// not reported their end; 0 once they all have, or FailureSettle has passed since the Job failed.
func SettleLeft(obs Observed, c *batchv1.JobCondition, now metav1.Time) time.Duration {
	obs = obs.withHeld()
	left := c.LastTransitionTime.Add(FailureSettle).Sub(now.Time)
	if left <= 0 {
		return 0
	}
	for i := range obs.Pods {
		if p := &obs.Pods[i]; !Ended(p) && !Stranded(p, obs.NodeTrouble) && !ExitedNonZero(p) {
			return left
		}
	}
	return 0
}

// ExitedNonZero reports whether a container of the pod (init containers included) has ended with a
// non-zero code, other than the end a restart in place gives every container.
func ExitedNonZero(p *corev1.Pod) bool {
	for _, cs := range containerStatuses(p) {
		if FailedEnd(cs.State.Terminated) {
			return true
		}
	}
	return false
}

// FailedEnd says whether a container's end is a failure: a non-zero code, but not the end (137,
// RestartingAllContainers) a restart in place gives every container, which is the gang's restart, no cause.
func FailedEnd(t *corev1.ContainerStateTerminated) bool {
	return t != nil && t.ExitCode != 0 && t.Reason != ReasonRestartingAllContainers
}

// classify returns why an attempt failed: a disrupted pod (the Job's pod failure policy names
// DisruptionTarget, or a failed pod carries it), else the first rank that exited non-zero and its exit
// code's class, else (a pod failed without an exit code) a retryable failure described by the Job.
func classify(tj *mlv1.TrainingJob, obs Observed, c *batchv1.JobCondition) failure {
	disrupted := failure{kind: disruption, class: mlv1.FailureDisruption, lost: lostNodeNames(obs)}
	if c.Reason == batchv1.JobReasonPodFailurePolicy && strings.Contains(c.Message, string(corev1.DisruptionTarget)) {
		disrupted.what, disrupted.text = c.Message, c.Message
		return disrupted
	}
	if lost := lostNodes(obs); len(lost) > 0 {
		// A rank that loses its peer usually exits with an error at once, long before the control plane
		// marks the lost node's pods: the lost node is the cause.
		disrupted.what = strings.Join(lost, "; ")
		disrupted.text, disrupted.at = disrupted.what, c.LastTransitionTime.Time
		return disrupted
	}
	ended := obs.ended()
	for i := range ended {
		if d := podCondition(&ended[i], corev1.DisruptionTarget); d != nil {
			disrupted.what = fmt.Sprintf("pod %s was disrupted (%s %s: %s)", ended[i].Name, corev1.DisruptionTarget, d.Reason, d.Message)
			disrupted.text, disrupted.node = disrupted.what, ended[i].Spec.NodeName
			return disrupted
		}
	}
	e := firstExit(ended)
	if p := deletedWhileRunning(obs, e); p != nil {
		disrupted.what = fmt.Sprintf("pod %s (rank %s) was deleted at once (grace period 0) while it ran, with no exit of its own; "+
			"the exits of its peers that followed do not decide", p.Name, p.Labels[names.RankLabel])
		disrupted.text, disrupted.node = disrupted.what, p.Spec.NodeName
		return disrupted
	}
	if e == nil {
		what := strings.TrimSuffix(c.Reason+": "+c.Message, ": ")
		return failure{kind: retryable, class: mlv1.FailureError, what: what, text: what}
	}
	f := exitFailure(tj, e, obs.Logs)
	for _, o := range e.tied {
		f.tied = append(f.tied, exitFailure(tj, o, obs.Logs))
	}
	return f
}

// ForceDeleted reports whether p is being deleted with no grace period (`kubectl delete pod --force`, the pod
// garbage collector): it leaves the API server at once, its end unreported.
func ForceDeleted(p *corev1.Pod) bool {
	return p.DeletionTimestamp != nil && p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds == 0
}

// deletedWhileRunning returns the earliest pod deleted at once while its trainer ran (RunningWhenDeleted: the
// state the watch saw at the deletion, Observed.ForceDeleted, or the pod as listed now), no later than the
// second after the first exit (first, nil: none): the rank vanished, and a peer that lost it exits with an
// error (1, a permanent code) that is no cause. The kubelet's own last delete of a pod that ended (its
// graceful stop done) also has grace period 0, but comes after the containers ended: it is not one.
func deletedWhileRunning(obs Observed, first *rankExit) *corev1.Pod {
	var out *corev1.Pod
	candidates := append(obs.ForceDeleted[:len(obs.ForceDeleted):len(obs.ForceDeleted)], obs.Pods...)
	for i := range candidates {
		p := &candidates[i]
		if !ForceDeleted(p) || !RunningWhenDeleted(p) || first != nil && p.DeletionTimestamp.After(first.t.FinishedAt.Add(time.Second)) {
			continue
		}
		if out == nil || p.DeletionTimestamp.Before(out.DeletionTimestamp) {
			out = p
		}
	}
	return out
}

// RunningWhenDeleted reports whether a pod's containers ran and none had ended: as seen at a deletion with
// no grace period, a rank that vanished while it ran.
func RunningWhenDeleted(p *corev1.Pod) bool {
	running := false
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated != nil {
			return false
		}
		running = running || cs.State.Running != nil
	}
	return running
}

// exitFailure returns the failure of a rank's exit, which rules match.
func exitFailure(tj *mlv1.TrainingJob, e *rankExit, logs map[string]string) failure {
	f := failure{kind: exitKind(tj, e.t.ExitCode), class: mlv1.FailureError, what: e.describe(logs), exitCode: e.t.ExitCode,
		text: e.t.Message, node: e.pod.Spec.NodeName, rank: e.pod.Labels[names.RankLabel], inputs: e.container == names.InputsContainerName,
		at: e.t.FinishedAt.Time}
	if e.t.Reason == "OOMKilled" {
		f.class = mlv1.FailureOOM
	}
	return f
}

// exitKind returns the kind of a trainer's exit code: the spec's lists first, then the default: 129-255
// (killed by a signal: OOM-kill 137, SIGTERM 143, a crash) retryable, anything else up to 128 (1-127: the
// program's own error) permanent.
func exitKind(tj *mlv1.TrainingJob, code int32) failureKind {
	f := tj.Spec.FailurePolicy
	switch {
	case slices.Contains(f.RetryableExitCodes, code):
		return retryable
	case slices.Contains(f.NonRetryableExitCodes, code):
		return permanent
	case code > 128:
		return retryable
	}
	return permanent
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// restartMessage returns the explanation of a restart in progress: the failure that caused it and what the
// new attempt waits for.
func restartMessage(st mlv1.TrainingJobStatus, blocked string) string {
	msg := fmt.Sprintf("attempt %d after: %s", st.Attempt, st.LastFailure)
	if blocked == "" {
		blocked = "creating its workers"
	}
	return msg + "; " + blocked
}

// setRestartingCondition sets the Restarting condition: True from the restart decision until the new
// attempt runs all its workers.
func setRestartingCondition(st *mlv1.TrainingJobStatus, ph phase, now metav1.Time) {
	switch c := meta.FindStatusCondition(st.Conditions, mlv1.ConditionRestarting); {
	case ph.reason == ReasonRestarting && strings.HasPrefix(ph.message, "restart "):
		set(st, mlv1.ConditionRestarting, true, ReasonRestarting, ph.message, now) // the decision
	case c == nil || c.Status != metav1.ConditionTrue || ph.state == mlv1.StateInitializing:
		return // none yet, over, or the new attempt is still starting: the decision's message stays
	default:
		set(st, mlv1.ConditionRestarting, false, ph.reason, fmt.Sprintf("attempt %d: %s", st.Attempt, ph.message), now)
	}
}
