// Package derive is the operator's state machine: pure functions from what the controllers observe (the
// TrainingJob, its Job and pods, rank 0's progress and checkpoint reports) to the TrainingJob's status.
// Nothing here reads the API, a clock or the network; now is always an argument.
//
// Each status field has one writer. The JobController alone derives state, the conditions of the run
// (Created, Running, Completed, Failed, Suspended, Restarting, CheckpointClaimBound), workers, attempt,
// restartCount, times and failureReason (Status). The StatusController writes progress, metrics,
// ETA, best and the ProgressReported and SuccessPolicyMet conditions (ApplySample, DecideSuccess,
// SettleProgress); the CheckpointController writes status.checkpoint and CheckpointStorageReady
// (ApplyCheckpoints). A controller reports a fact to the state machine through a field it owns: the
// success policy's verdict is the SuccessPolicyMet condition, which Status turns into Completed.
package derive

import (
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/inputs"
)

// Observed is what a reconcile of the JobController saw of a TrainingJob's children.
type Observed struct {
	// Job is the workers' Job of the current attempt, nil when it does not exist (yet, or any more).
	Job *batchv1.Job
	// Pods are the workers' pods of the current attempt, as the cache holds them.
	Pods []corev1.Pod
	// Held are the ends of the trainers their supervisors hold, by pod UID (Workers reads them).
	Held map[types.UID]HeldExit
	// Gone are pods of the current attempt that were seen ending with a non-zero exit code and are deleted
	// since (Kubernetes' Job controller deletes a failed Job's pods): their ends still explain the failure.
	Gone []corev1.Pod
	// ForceDeleted are pods of the current attempt as the watch saw them when they were deleted at once
	// (grace period 0) while their trainer ran (RunningWhenDeleted), listed or gone since.
	ForceDeleted []corev1.Pod
	// CreateRejected is why the API server refused to create a child (invalid, forbidden by admission or
	// quota) before the Job existed; empty otherwise.
	CreateRejected string
	// StartBlocked is why the current attempt's Job is not created yet although it should run (workers of
	// an older attempt still stopping, RESUME_FROM not settled); empty otherwise.
	StartBlocked string
	// NodeTrouble maps the nodes of a failing attempt's workers that are lost (gone, or not Ready and
	// tainted: NodeTrouble) to why; read only once the attempt's Job fails. A failure with a worker on such a node is a
	// disruption, whichever rank exited first.
	NodeTrouble map[string]string
	// Schedulable maps the nodes the workers could be placed on, avoidance aside (Ready, schedulable, matching
	// their node selection and tolerating their taints), to how many workers each holds by its allocatable
	// resources; read while the attempt fails and a node may be avoided, possibly only part of the cluster
	// (enough to tell); nil when not read.
	Schedulable map[string]int32
	// Heartbeats are the last heartbeats (Leases in kube-node-lease) of the nodes of a failing attempt's
	// workers that have not ended and are not lost, read with NodeTrouble; a node without a Lease is missing.
	Heartbeats map[string]Heartbeat
	// NodeWait is, when a failing attempt's worker is on a node that is not Ready but does not count as
	// lost yet (NodeTrouble's wait), how long until it does; 0 otherwise.
	NodeWait time.Duration
	// Claim is the checkpoint claim the operator manages for the job, nil when it manages none; ClaimEvent
	// the claim's newest event while it is not bound.
	Claim      *corev1.PersistentVolumeClaim
	ClaimEvent *corev1.Event
	// Logs are the ends of the logs of a failing attempt's trainers that exited with a non-zero code, by pod
	// name (read once the attempt's Job fails): a termination message holds only a log's last 2 KiB, and
	// the cause a hint names can be above it.
	Logs map[string]string
	// Queue is the job's Kueue Workload as observed, nil when the job is not queued.
	Queue *Queue
	// InputsProgress is what rank 0's fetch-inputs init container reports while it fetches the sources.
	InputsProgress []inputs.Status
	// InputsClaim is the input cache claim and, while it is not bound, InputsClaimEvent its newest event.
	InputsClaim      *corev1.PersistentVolumeClaim
	InputsClaimEvent *corev1.Event
}

// ended returns the pods whose exits explain a failure: the listed ones and those gone since they ended.
func (o Observed) ended() []corev1.Pod {
	return append(o.Pods[:len(o.Pods):len(o.Pods)], o.Gone...)
}

// rejectedMessage says who refused the workers' objects: the API server, or the operator itself (its
// message says so: "the operator refuses ...").
func rejectedMessage(why string) string {
	if strings.HasPrefix(why, "the operator refuses") {
		return why
	}
	return "the API server rejected the workers' objects: " + why
}

// ReasonCreateRejected is the reason of the Created condition while the API server refuses a child.
const ReasonCreateRejected = "CreateRejected"

// phase is a state with the reason and message that explain it.
type phase struct {
	state   mlv1.State
	reason  string
	message string
}

// Status returns the JobController's part of a TrainingJob's status, computed from what was observed. It
// is a pure function: the same inputs give the same status. now is the time of new condition transitions and
// the clock deadlines are measured by (failurePolicy.activeDeadlineSeconds,
// scheduling.schedulingTimeoutSeconds). A failed attempt that may be retried becomes a new attempt here
// (see restart.go); the JobController then replaces the Job.
func Status(tj *mlv1.TrainingJob, obs Observed, now metav1.Time) mlv1.TrainingJobStatus {
	obs = obs.withHeld()
	st := *tj.Status.DeepCopy()
	st.ObservedGeneration = tj.Generation
	if obs.Job != nil && names.JobAttempt(obs.Job) != tj.Status.Attempt {
		obs.Job, obs.Pods = nil, nil // an older attempt's Job, being replaced
	}
	if obs.Job != nil {
		st.Workers = workerCounts(obs)
		if tj.RestartPolicy() == mlv1.RestartOnFailure {
			st.RestartCount = inPlaceRestarts(obs)
		}
	}
	setStartTime(&st, obs)
	ph := derivePhase(tj, &st, obs, now)
	st.State = ph.state
	if ph.state == mlv1.StateFailed && tj.Status.State != mlv1.StateFailed {
		st.FailureReason = failureReason(ph)
	}
	setConditions(&st, obs.Job != nil, ph, now)
	setRestartingCondition(&st, ph, now)
	SetClaimCondition(&st, obs, now)
	applyInputs(tj, &st, obs, now)
	setCompletionTime(&st, obs.Job, ph, now)
	return st
}

func derivePhase(tj *mlv1.TrainingJob, st *mlv1.TrainingJobStatus, obs Observed, now metav1.Time) phase {
	if prev := tj.Status.State; prev == mlv1.StateCompleted || prev == mlv1.StateFailed {
		// Terminal states are final, even if the Job is deleted afterwards.
		return phase{prev, ConditionReason(tj.Status, string(prev)), ConditionMessage(tj.Status, string(prev))}
	}
	if c := meta.FindStatusCondition(tj.Status.Conditions, mlv1.ConditionSuccessPolicyMet); c != nil && c.Status == metav1.ConditionTrue {
		return phase{mlv1.StateCompleted, c.Reason, c.Message}
	}
	if ph, over := deadlinePhase(tj, st, now); over {
		return ph
	}
	switch {
	case obs.Job == nil && tj.Suspended():
		return phase{mlv1.StateSuspended, "Suspended", "spec.suspend is true; no workers run"}
	case obs.Job == nil && obs.CreateRejected != "" && tj.Status.Attempt > 0:
		return phase{mlv1.StateInitializing, ReasonCreateRejected,
			fmt.Sprintf("attempt %d: %s", tj.Status.Attempt, rejectedMessage(obs.CreateRejected))}
	case obs.Job == nil && obs.CreateRejected != "":
		return phase{mlv1.StatePending, ReasonCreateRejected, rejectedMessage(obs.CreateRejected)}
	case obs.Job == nil && waitsForQueue(obs):
		return queuePhase(obs.Queue)
	case obs.Job == nil && tj.Status.Attempt > 0:
		return phase{mlv1.StateInitializing, ReasonRestarting, restartMessage(tj.Status, obs.StartBlocked)}
	case obs.Job == nil && obs.StartBlocked != "":
		return phase{mlv1.StatePending, "Accepted", "accepted; " + obs.StartBlocked}
	case obs.Job == nil:
		return phase{mlv1.StatePending, "Accepted", "accepted; creating the workers' Job, Service and ConfigMap"}
	}
	if c := JobCondition(obs.Job, batchv1.JobComplete); c != nil {
		if builders.NoTrainingProgram(tj) {
			return phase{mlv1.StateFailed, ReasonNoTrainingProgram, NoTrainingProgramMessage}
		}
		return phase{mlv1.StateCompleted, "Succeeded", fmt.Sprintf("all %d workers succeeded", tj.Spec.NumWorkers)}
	}
	if c := AttemptFailure(tj, obs); c != nil {
		return failedAttempt(tj, st, obs, c, now)
	}
	if tj.Suspended() {
		return phase{mlv1.StateSuspended, "Suspended", "spec.suspend is true; workers are stopped"}
	}
	if waitsForQueue(obs) {
		return queuePhase(obs.Queue)
	}
	if ptr.Deref(obs.Job.Spec.Suspend, false) {
		return queuedPhase(tj)
	}
	if c := hungCondition(tj.Status); c != nil && tj.OnHang() != mlv1.HangNone {
		return hungPhase(tj, st, c)
	}
	if ph, failed := inputsFailedPhase(obs); failed {
		return ph
	}
	return activePhase(tj, obs, now)
}

// failureReason returns status.failureReason: the reason, then what a user can act on.
func failureReason(ph phase) string {
	if strings.HasPrefix(ph.message, ph.reason) {
		return ph.message
	}
	return ph.reason + ": " + ph.message
}

// queuedPhase returns the phase of a Job that is suspended although neither the user nor a queue asked
// (someone suspended the Job itself).
func queuedPhase(_ *mlv1.TrainingJob) phase {
	return phase{mlv1.StateSuspended, "JobSuspended", "the workers' Job is suspended"}
}

// deadlinePhase returns the Failed phase of a run whose workers first started more than
// activeDeadlineSeconds ago (wall time, restarts and suspension included); false for any other run.
func deadlinePhase(tj *mlv1.TrainingJob, st *mlv1.TrainingJobStatus, now metav1.Time) (phase, bool) {
	left, ok := DeadlineLeft(tj, st.StartTime, now.Time)
	if !ok || left > 0 {
		return phase{}, false
	}
	d := time.Duration(*tj.Spec.FailurePolicy.ActiveDeadlineSeconds) * time.Second
	return phase{mlv1.StateFailed, ReasonDeadlineExceeded,
		fmt.Sprintf("the run started %s ago, past failurePolicy.activeDeadlineSeconds (%s); its workers were stopped",
			now.Sub(st.StartTime.Time).Round(time.Second), d)}, true
}

// ReasonDeadlineExceeded is the Failed reason of a run past failurePolicy.activeDeadlineSeconds.
const ReasonDeadlineExceeded = "DeadlineExceeded"

// DeadlineLeft returns the time left before failurePolicy.activeDeadlineSeconds, counted from start; ok is
// false when no deadline applies (none set, or not started).
func DeadlineLeft(tj *mlv1.TrainingJob, start *metav1.Time, now time.Time) (time.Duration, bool) {
	f := tj.Spec.FailurePolicy
	if f == nil || f.ActiveDeadlineSeconds == nil || start == nil {
		return 0, false
	}
	return start.Add(time.Duration(*f.ActiveDeadlineSeconds) * time.Second).Sub(now), true
}

// JobCondition returns the Job's condition of type t when it is True, else nil.
func JobCondition(job *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range job.Status.Conditions {
		if c := &job.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// ConditionReason returns the reason of condition t, or t when it is absent.
func ConditionReason(st mlv1.TrainingJobStatus, t string) string {
	if c := meta.FindStatusCondition(st.Conditions, t); c != nil {
		return c.Reason
	}
	return t
}

// ConditionMessage returns the message of condition t, "" when it is absent.
func ConditionMessage(st mlv1.TrainingJobStatus, t string) string {
	if c := meta.FindStatusCondition(st.Conditions, t); c != nil {
		return c.Message
	}
	return ""
}

func countPods(pods []corev1.Pod, match func(*corev1.Pod) bool) int {
	n := 0
	for i := range pods {
		if pods[i].DeletionTimestamp == nil && match(&pods[i]) {
			n++
		}
	}
	return n
}

func workerCounts(obs Observed) mlv1.WorkerCounts {
	js := obs.Job.Status
	var w mlv1.WorkerCounts
	for i := range obs.Pods {
		p := &obs.Pods[i]
		switch {
		case p.Status.Phase == corev1.PodSucceeded:
			w.Succeeded++
		case p.Status.Phase == corev1.PodFailed:
			w.Failed++
		case p.DeletionTimestamp != nil:
		case p.Status.Phase == corev1.PodPending || p.Status.Phase == "":
			w.Active++
			w.Pending++
		default:
			w.Active++
			if podReady(p) {
				w.Ready++
			}
		}
	}
	// The Job counts the pods gone since they finished; its active and ready counts lag the pods, which the
	// state is read from, and are not used: a status written with the state carries the same counts.
	w.Succeeded, w.Failed = max(w.Succeeded, js.Succeeded), max(w.Failed, js.Failed)
	return w
}

func podReady(p *corev1.Pod) bool {
	c := readyCondition(p)
	return c != nil && c.Status == corev1.ConditionTrue
}

// inPlaceRestarts returns the number of replaced pods plus in-place container restarts of current pods
// (restartPolicy OnFailure).
func inPlaceRestarts(obs Observed) int32 {
	n := obs.Job.Status.Failed
	for i := range obs.Pods {
		for _, cs := range obs.Pods[i].Status.ContainerStatuses {
			n += cs.RestartCount
		}
	}
	return n
}

// setStartTime keeps the first start of the workers, over all attempts: the Job's start, or, before its
// controller wrote it, the creation of its first pod that is not being deleted (the Job's start is written as
// it creates its pods).
func setStartTime(st *mlv1.TrainingJobStatus, obs Observed) {
	switch {
	case obs.Job == nil || st.StartTime != nil:
	case obs.Job.Status.StartTime != nil:
		st.StartTime = obs.Job.Status.StartTime.DeepCopy()
	default:
		for i := range obs.Pods {
			p := &obs.Pods[i]
			t := p.CreationTimestamp
			if t.IsZero() || p.DeletionTimestamp != nil || t.Before(&obs.Job.CreationTimestamp) {
				continue // not one of this Job's workers starting
			}
			if st.StartTime == nil || t.Before(st.StartTime) {
				st.StartTime = t.DeepCopy()
			}
		}
	}
}

func setCompletionTime(st *mlv1.TrainingJobStatus, job *batchv1.Job, ph phase, now metav1.Time) {
	if st.CompletionTime == nil && (ph.state == mlv1.StateCompleted || ph.state == mlv1.StateFailed) {
		st.CompletionTime = finishTime(job, ph, now)
	}
	if st.StartTime != nil && st.CompletionTime != nil {
		st.Duration = st.CompletionTime.Sub(st.StartTime.Time).Round(time.Second).String()
	}
}

func finishTime(job *batchv1.Job, ph phase, now metav1.Time) *metav1.Time {
	if job == nil {
		return &now
	}
	if ph.state == mlv1.StateCompleted && ph.reason == "Succeeded" && job.Status.CompletionTime != nil {
		return job.Status.CompletionTime.DeepCopy()
	}
	if c := JobCondition(job, batchv1.JobFailed); c != nil && !c.LastTransitionTime.IsZero() {
		return c.LastTransitionTime.DeepCopy()
	}
	return &now
}

// Significant reports whether st differs from old in what users and the other controllers act on (the
// state, a condition's status, attempt, restarts, the failure, the checkpoint, times other than startTime)
// rather than only in details: worker counts, startTime, or a condition's reason and message under the same
// status. The JobController writes details at most once per interval, or with the next significant change.
func Significant(old, st mlv1.TrainingJobStatus) bool {
	return !apiequality.Semantic.DeepEqual(withoutDetails(old), withoutDetails(st))
}

func withoutDetails(st mlv1.TrainingJobStatus) mlv1.TrainingJobStatus {
	st = *st.DeepCopy()
	st.Workers, st.StartTime = mlv1.WorkerCounts{}, nil
	for i := range st.Conditions {
		c := &st.Conditions[i]
		c.Reason, c.Message, c.LastTransitionTime, c.ObservedGeneration = "", "", metav1.Time{}, 0
	}
	return st
}
