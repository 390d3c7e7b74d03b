package derive

import (
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// Reasons of the Running condition that describe normal progress. Any other reason of an active job is a
// fault a worker is stuck on (Unschedulable, ImagePullBackOff, CreateContainerConfigError,
// CrashLoopBackOff, ...), and is also recorded as a Warning event.
var progressReasons = []string{
	"Accepted", "WorkersStarting", "AllWorkersRunning", "WorkersRestarting", "WorkersFinishing", ReasonRestarting, ReasonFetchingInputs,
}

// Reasons of a job whose workers cannot be placed.
const (
	ReasonUnschedulable     = "Unschedulable"
	ReasonSchedulingTimeout = "SchedulingTimeout"
)

// SchedulingLeft returns the time the current attempt's workers have left to be scheduled and started
// (while a fault holds one: unschedulable, an image that cannot be pulled, a missing Secret) under
// scheduling.schedulingTimeoutSeconds, counted from the creation of the attempt's Job; ok is false when no
// timeout applies.
func SchedulingLeft(tj *mlv1.TrainingJob, job *batchv1.Job, now time.Time) (time.Duration, bool) {
	s := tj.Spec.Scheduling
	if s == nil || s.SchedulingTimeoutSeconds == nil || job == nil || job.CreationTimestamp.IsZero() {
		return 0, false
	}
	return job.CreationTimestamp.Add(time.Duration(*s.SchedulingTimeoutSeconds) * time.Second).Sub(now), true
}

// ProgressReason reports whether reason, of the Running condition, describes normal progress (workers
// starting, running, finishing) rather than a fault.
func ProgressReason(reason string) bool {
	return slices.Contains(progressReasons, reason)
}

// IsFault reports whether a Running condition reason of an active job names a fault.
func IsFault(state mlv1.State, reason string) bool {
	return (state == mlv1.StateInitializing || state == mlv1.StateRunning) && !ProgressReason(reason)
}

// activePhase returns Running when every rank runs (or ran and is being restarted), else Initializing. The
// reason is the first fault a worker is stuck on, if any; Failed once such a fault outlasts
// scheduling.schedulingTimeoutSeconds.
func activePhase(tj *mlv1.TrainingJob, obs Observed, now metav1.Time) phase {
	// A pod that restarts in place is running once ready: its supervisor's probe fails while it holds a
	// failed trainer, restarts, or waits for its order (a replacement), as it passes while the trainer runs.
	inPlace := RestartsInPlace(obs.Job)
	running := countPods(obs.Pods, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && (!inPlace || trainerReady(p)) })
	succeeded := countPods(obs.Pods, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	msg := fmt.Sprintf("%d of %d workers running", running, tj.Spec.NumWorkers)
	if succeeded > 0 {
		msg += fmt.Sprintf(", %d finished", succeeded)
	}
	state := mlv1.StateInitializing
	if running >= int(tj.Spec.NumWorkers) || tj.Status.State == mlv1.StateRunning {
		state = mlv1.StateRunning
	}
	reason, why := waitingReason(obs.Pods)
	if left, ok := SchedulingLeft(tj, obs.Job, now.Time); ok && left <= 0 && state == mlv1.StateInitializing && reason != "" {
		return phase{mlv1.StateFailed, ReasonSchedulingTimeout, fmt.Sprintf(
			"not all workers could be scheduled and started within scheduling.schedulingTimeoutSeconds (%ds): %s: %s",
			*tj.Spec.Scheduling.SchedulingTimeoutSeconds, reason, why)}
	}
	switch {
	case reason != "":
		return phase{state, reason, msg + "; " + why}
	case state == mlv1.StateInitializing && fetching(obs.Pods):
		return phase{state, ReasonFetchingInputs, msg + "; rank 0 is " + FetchingText(builders.FetchedInputs(tj), obs.InputsProgress)}
	case running >= int(tj.Spec.NumWorkers):
		return phase{state, "AllWorkersRunning", msg}
	case succeeded > 0 && running+succeeded >= int(tj.Spec.NumWorkers):
		// Ranks end one by one; the Job completes when the last has.
		return phase{mlv1.StateRunning, "WorkersFinishing", msg}
	case state == mlv1.StateRunning:
		return phase{state, "WorkersRestarting", msg}
	}
	return phase{state, "WorkersStarting", msg}
}

// trainerReady says whether the pod's trainer container is ready (its supervisor's probe passes).
func trainerReady(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == names.ContainerName {
			return cs.Ready
		}
	}
	return false
}

// waitingReason returns the reason and a description of the first worker (by rank) that cannot run ("" when
// every one can): unschedulable, or a container (init containers and sidecars included) stuck waiting
// (image pull errors, a missing Secret or ConfigMap, a crash loop with its last exit code).
func waitingReason(pods []corev1.Pod) (string, string) {
	for _, p := range ByRank(pods) {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return ReasonUnschedulable, fmt.Sprintf("pod %s: %s", p.Name, c.Message)
			}
		}
		for _, cs := range containerStatuses(p) {
			w := cs.State.Waiting
			if w == nil || w.Reason == "" || w.Reason == "ContainerCreating" || w.Reason == "PodInitializing" ||
				w.Reason == ReasonRestartingAllContainers {
				continue
			}
			why := fmt.Sprintf("pod %s: %s", p.Name, w.Message)
			if t := cs.LastTerminationState.Terminated; t != nil {
				why += "; " + describeExit(p, cs.Name, t, "")
			}
			return w.Reason, why
		}
	}
	return "", ""
}

// ReasonRestartingAllContainers is the waiting reason the kubelet gives every container of a pod it restarts
// in place (a gang restart in place): the containers are about to start again, nothing is stuck.
const ReasonRestartingAllContainers = "RestartingAllContainers"

// containerStatuses returns a pod's init container (sidecars included) then main container statuses: init
// containers first, since one stuck or failed there holds the whole pod.
func containerStatuses(p *corev1.Pod) []corev1.ContainerStatus {
	return append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
}

// ReasonFetchingInputs is the Initializing reason while rank 0 fetches the model or dataset sources.
const ReasonFetchingInputs = "FetchingInputs"

// fetching reports whether rank 0's fetch-inputs init container runs.
func fetching(pods []corev1.Pod) bool {
	_, cs := Rank0Fetcher(pods)
	return cs != nil && cs.State.Running != nil
}
