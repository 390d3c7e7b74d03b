package controllers

import (
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// Observed is what a reconcile saw of a TrainingJob's children.
type Observed struct {
	// Job is the workers' Job, nil when it does not exist.
	Job *batchv1.Job
	// Pods are the workers' pods.
	Pods []corev1.Pod
	// CreateRejected is why the API server refused to create a child (invalid, forbidden by admission or
	// quota) before the Job existed; empty otherwise.
	CreateRejected string
	// Claim is the checkpoint claim the operator manages for the job, nil when it manages none; ClaimEvent
	// the claim's newest event while it is not bound.
	Claim      *corev1.PersistentVolumeClaim
	ClaimEvent *corev1.Event
}

// ReasonCreateRejected is the reason of the Created condition while the API server refuses a child.
const ReasonCreateRejected = "CreateRejected"

// phase is a state with the reason and message that explain it.
type phase struct {
	state   mlv1.State
	reason  string
	message string
}

// DeriveStatus computes a TrainingJob's status from what was observed. It is a pure function: the same
// inputs give the same status, and now is used only for the time of new condition transitions.
func DeriveStatus(tj *mlv1.TrainingJob, obs Observed, now metav1.Time) mlv1.TrainingJobStatus {
	st := *tj.Status.DeepCopy()
	st.ObservedGeneration = tj.Generation
	if hp := tj.Spec.Hyperparameters; hp != nil && hp.Epochs != nil {
		st.TotalEpochs = *hp.Epochs
	}
	if obs.Job != nil {
		st.Workers = workerCounts(obs)
		st.RestartCount = restartCount(obs)
	}
	ph := derivePhase(tj, obs)
	st.State = ph.state
	if ph.state == mlv1.StateFailed {
		st.FailureReason = ph.message
	}
	setConditions(&st, obs.Job != nil, ph, now)
	setClaimCondition(&st, obs, now)
	setTimes(&st, obs.Job, ph, now)
	settleProgress(&st, ph)
	if builders.CheckpointEnabled(tj) {
		applyFinalCheckpoints(&st, obs.Pods, now)
	}
	return st
}

// settleProgress clears the ETA of a finished run; a run whose workers all succeeded is at 100%.
func settleProgress(st *mlv1.TrainingJobStatus, ph phase) {
	if ph.state != mlv1.StateCompleted && ph.state != mlv1.StateFailed {
		return
	}
	st.ETA = ""
	if ph.state == mlv1.StateCompleted && ph.reason == "Succeeded" {
		st.Progress = "100%"
	}
}

func derivePhase(tj *mlv1.TrainingJob, obs Observed) phase {
	switch prev := tj.Status.State; {
	case prev == mlv1.StateCompleted || prev == mlv1.StateFailed:
		// Terminal states are final, even if the Job is deleted afterwards.
		return phase{prev, conditionReason(tj.Status, string(prev)), conditionMessage(tj.Status, string(prev))}
	case obs.Job == nil && builders.Suspended(tj):
		return phase{mlv1.StateSuspended, "Suspended", "spec.suspend is true; no workers run"}
	case obs.Job == nil && obs.CreateRejected != "":
		return phase{mlv1.StatePending, ReasonCreateRejected, "the API server rejected the workers' objects: " + obs.CreateRejected}
	case obs.Job == nil:
		return phase{mlv1.StatePending, "Accepted", "accepted; creating the workers' Job, Service and ConfigMap"}
	}
	if c := jobCondition(obs.Job, batchv1.JobComplete); c != nil {
		return phase{mlv1.StateCompleted, "Succeeded", fmt.Sprintf("all %d workers succeeded", tj.Spec.NumWorkers)}
	}
	if c := jobCondition(obs.Job, batchv1.JobFailed); c != nil {
		return phase{mlv1.StateFailed, c.Reason, failureMessage(c, obs.Pods)}
	}
	if builders.Suspended(tj) {
		return phase{mlv1.StateSuspended, "Suspended", "spec.suspend is true; workers are stopped"}
	}
	if ptr.Deref(obs.Job.Spec.Suspend, false) {
		return queuedPhase(tj)
	}
	return activePhase(tj, obs)
}

// queuedPhase: the Job is suspended although the user did not ask: a queue has not admitted it yet.
func queuedPhase(tj *mlv1.TrainingJob) phase {
	if q := builders.QueueName(tj); q != "" {
		return phase{mlv1.StateSuspended, "Queued", fmt.Sprintf("waiting for queue %q (Kueue) to admit the workers' Job", q)}
	}
	return phase{mlv1.StateSuspended, "JobSuspended", "the workers' Job is suspended"}
}

func jobCondition(job *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range job.Status.Conditions {
		if c := &job.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

func conditionReason(st mlv1.TrainingJobStatus, t string) string {
	if c := meta.FindStatusCondition(st.Conditions, t); c != nil {
		return c.Reason
	}
	return t
}

func conditionMessage(st mlv1.TrainingJobStatus, t string) string {
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
	return mlv1.WorkerCounts{
		Active:    js.Active,
		Ready:     ptr.Deref(js.Ready, 0),
		Succeeded: js.Succeeded,
		Failed:    js.Failed,
		Pending: int32(countPods(obs.Pods, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodPending || p.Status.Phase == ""
		})),
	}
}

// restartCount is the number of replaced pods plus in-place container restarts of current pods.
func restartCount(obs Observed) int32 {
	n := obs.Job.Status.Failed
	for i := range obs.Pods {
		for _, cs := range obs.Pods[i].Status.ContainerStatuses {
			n += cs.RestartCount
		}
	}
	return n
}

func setTimes(st *mlv1.TrainingJobStatus, job *batchv1.Job, ph phase, now metav1.Time) {
	if job != nil && st.StartTime == nil && job.Status.StartTime != nil {
		st.StartTime = job.Status.StartTime.DeepCopy()
	}
	if st.CompletionTime == nil && (ph.state == mlv1.StateCompleted || ph.state == mlv1.StateFailed) {
		st.CompletionTime = finishTime(job, ph.state, now)
	}
	if st.StartTime != nil && st.CompletionTime != nil {
		st.Duration = st.CompletionTime.Sub(st.StartTime.Time).Round(time.Second).String()
	}
}

func finishTime(job *batchv1.Job, state mlv1.State, now metav1.Time) *metav1.Time {
	if job == nil {
		return &now
	}
	if state == mlv1.StateCompleted && job.Status.CompletionTime != nil {
		return job.Status.CompletionTime.DeepCopy()
	}
	if c := jobCondition(job, batchv1.JobFailed); c != nil && !c.LastTransitionTime.IsZero() {
		return c.LastTransitionTime.DeepCopy()
	}
	return &now
}
