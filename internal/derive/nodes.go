package derive

import (
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// NodeUntaintedGrace is how long a node whose Ready condition is not True may go without the NoSchedule
// taint that the node lifecycle controller gives such a node before it counts as lost all the same (a
// control plane that does not taint, or a taint pass that failed).
const NodeUntaintedGrace = 15 * time.Second

// NodeTrouble returns why a node can no longer run or report its pods, "" when it can or does not count as
// lost yet; wait is, for a node that is not Ready but does not count yet, how long until it does (0
// otherwise). A node is lost when it is gone (n is nil), or its Ready condition is not True (the node
// lifecycle controller sets Unknown once the kubelet has not renewed its lease for
// node-monitor-grace-period, 50 s by default) and the scheduler places no new pod on it: the lifecycle
// controller taints it NoSchedule (node.kubernetes.io/unreachable or not-ready) in a pass of its own, a
// moment after it changes the condition. A gang restarted in that moment had a rank of its new attempt
// placed on the lost node, and the attempt waited for that rank until its rendezvous timed out (found in
// the chaos suite).
func NodeTrouble(n *corev1.Node, now time.Time) (why string, wait time.Duration) {
	if n == nil {
		return "is gone", 0
	}
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady || c.Status == corev1.ConditionTrue {
			continue
		}
		why = fmt.Sprintf("is not Ready (%s: %s)", c.Reason, c.Message)
		if left := c.LastTransitionTime.Add(NodeUntaintedGrace).Sub(now); left > 0 && !lifecycleTainted(n) {
			return "", left
		}
		return why, 0
	}
	return "", 0
}

// lifecycleTainted reports whether the node carries a NoSchedule taint that the node lifecycle controller
// gives a node that is not Ready.
func lifecycleTainted(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule && (t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady) {
			return true
		}
	}
	return false
}

// Heartbeat is a node's last heartbeat: its Lease's renewTime and leaseDurationSeconds.
type Heartbeat struct {
	Renewed  time.Time
	Duration time.Duration
}

// NodeFateWait bounds how long a verdict waits, from a node's last heartbeat, for a node whose heartbeat
// stopped to count as lost: the node lifecycle controller's node-monitor-grace-period (50 s by default),
// its taint after that (NodeUntaintedGrace) and some slack.
const NodeFateWait = 90 * time.Second

// maxRenewInterval bounds the renewal interval a lease's duration implies (the kubelet's: 10 s of 40 s).
const maxRenewInterval = 15 * time.Second

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// heartbeatSlack is how much later than its interval (a quarter of the lease's duration, as the kubelet
// renews) a node's renewal may come before its heartbeat counts as stopped.
const heartbeatSlack = 5 * time.Second

// NodeFateLeft returns how long the verdict on an attempt's failure at `at` still waits for the fate of a
// node of the attempt's workers that have not ended (and the node waited for): a node whose heartbeat
// stopped waits until it counts as lost (then the failure is a disruption: a rank that loses its peer
// exits with an error at once, long before the control plane knows) or NodeFateWait after its last
// heartbeat; with due (a verdict that would end the run), so does a node not heard from since the failure
// whose next renewal is not due yet. 0 when none is waited for: every such node renewed its lease after the
// failure, has none, or is past the bound.
func NodeFateLeft(obs Observed, at, now time.Time, due bool) (left time.Duration, node string) {
	obs = obs.withHeld()
	if at.After(now) {
		return 0, "" // a clock ahead (a node's, a pod's word): no wait can be bounded from it
	}
	for i := range obs.Pods {
		p := &obs.Pods[i]
		hb, ok := obs.Heartbeats[p.Spec.NodeName]
		// Renewed since: alive. A failure's time is kept to the second (a container's end), and a node may
		// renew once more as it goes: a renewal within heartbeatSlack after it tells nothing.
		if !ok || Ended(p) || Stranded(p, obs.NodeTrouble) || hb.Renewed.After(at.Add(heartbeatSlack)) {
			continue
		}
		renewed := hb.Renewed
		if renewed.After(now) {
			renewed = now
		}
		until := renewed.Add(min(max(hb.Duration, 0)/4, maxRenewInterval) + heartbeatSlack) // the renewal due
		if !now.Before(until) {
			until = minTime(renewed, at).Add(NodeFateWait) // stopped: its fate
		} else if !due {
			continue
		}
		until = minTime(until, at.Add(NodeFateWait))
		if l := until.Sub(now); l > left {
			left, node = l, p.Spec.NodeName
		}
	}
	return left, node
}

// Ended reports whether the pod reached a terminal phase.
func Ended(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// RunsNothing reports whether p is being deleted and nothing of it runs: it ended, or no node took it.
// Finalizers (a tenant's) may keep it in the API for good; the next attempt does not wait for it.
func RunsNothing(p *corev1.Pod) bool {
	return p.DeletionTimestamp != nil && (Ended(p) || p.Spec.NodeName == "")
}

// Stranded reports whether the pod has not ended and its node is in trouble (trouble maps node names to
// NodeTrouble). Nobody will report its end until the node comes back or the control plane removes the pod
// (the pod garbage collector does so for a deleted Node, not for an unreachable one), so waiting for it
// would hang the run.
func Stranded(p *corev1.Pod, trouble map[string]string) bool {
	return !Ended(p) && p.Spec.NodeName != "" && trouble[p.Spec.NodeName] != ""
}

// AttemptFailure returns the Job condition that says the current attempt failed, as soon as that is known
// (nil before):
//   - Failed;
//   - FailureTarget: Kubernetes' Job controller has decided that the Job fails; it stops the pods still running
//     and adds Failed once they have ended;
//   - before Kubernetes' Job controller says so (it batches pod updates for about a second), a worker that failed
//     where the Job allows no failure (restartPolicy Gang or Never: backoffLimit 0), as the FailureTarget
//     Kubernetes' Job controller will add (failedWorker).
//
// Deciding at once overlaps the old gang's graceful stop with the decision and the deletion of its Job;
// the next attempt's Job is still created only once every pod of this one is gone (the JobController's
// startBlocked), so a new gang never starts beside workers of the old one.
func AttemptFailure(tj *mlv1.TrainingJob, obs Observed) *batchv1.JobCondition {
	obs = obs.withHeld()
	if obs.Job == nil {
		return nil
	}
	if c := JobCondition(obs.Job, batchv1.JobFailed); c != nil {
		return c
	}
	if c := JobCondition(obs.Job, batchv1.JobFailureTarget); c != nil {
		return c
	}
	if c := failedWorker(tj, obs); c != nil {
		return c
	}
	return strandedWorker(tj, obs)
}

// strandedWorker returns a FailureTarget for a worker that has not ended on a node that is lost
// (Observed.NodeTrouble, read for pods the node lifecycle controller marked not ready: MarkedNotReady),
// dated when it was marked: its peers may all be blocked on it, as NCCL blocks, and no pod would fail for
// minutes. nil when there is none, or when the Job restarts containers in place (OnFailure).
func strandedWorker(tj *mlv1.TrainingJob, obs Observed) *batchv1.JobCondition {
	if tj.RestartPolicy() == mlv1.RestartOnFailure {
		return nil
	}
	for i := range obs.Pods {
		p := &obs.Pods[i]
		if !Stranded(p, obs.NodeTrouble) || p.DeletionTimestamp != nil {
			continue
		}
		at := p.CreationTimestamp
		if c := readyCondition(p); c != nil && c.Status != corev1.ConditionTrue {
			at = c.LastTransitionTime
		}
		if last := tj.Status.LastFailureTime; last != nil && !at.After(last.Time) {
			continue // the failure the last restart was for: a pod it left on the node
		}
		return failureTarget(at)
	}
	return nil
}

// readyCondition returns the pod's Ready condition, nil when it has none.
func readyCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; c.Type == corev1.PodReady {
			return c
		}
	}
	return nil
}

// MarkedNotReady reports whether a running pod is not Ready while all its containers are: what the node
// lifecycle controller does to every pod of a node whose heartbeat stopped (its kubelet would have set the
// containers' readiness too). Its node is then worth a read.
func MarkedNotReady(p *corev1.Pod) bool {
	c := readyCondition(p)
	if p.Status.Phase != corev1.PodRunning || c == nil || c.Status == corev1.ConditionTrue || len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if !cs.Ready {
			return false
		}
	}
	return true
}

// failedWorker returns the FailureTarget condition Kubernetes' Job controller will add for a failed worker of a Job
// with backoffLimit 0 (nil when none failed, or when the Job restarts containers in place: OnFailure),
// dated at the worker's end.
//
// A worker that was stopped (its pod being deleted: Kubernetes' Job controller ends the other ranks once a success
// policy is met, a user deletes a pod, an eviction) does not count here: Kubernetes' Job controller's own verdict
// decides then, as does a Job that met its success criteria; except for a Job that restarts in place
// (RestartsInPlace), which gives no verdict.
func failedWorker(tj *mlv1.TrainingJob, obs Observed) *batchv1.JobCondition {
	if tj.RestartPolicy() == mlv1.RestartOnFailure || JobCondition(obs.Job, batchv1.JobSuccessCriteriaMet) != nil ||
		JobCondition(obs.Job, batchv1.JobComplete) != nil {
		return nil
	}
	inPlace := RestartsInPlace(obs.Job)
	for i := range obs.Pods {
		p := &obs.Pods[i]
		if p.Status.Phase != corev1.PodFailed || p.DeletionTimestamp != nil && (!inPlace || stoppedBySuspension(obs.Job, p)) {
			continue
		}
		at := p.CreationTimestamp
		if e := firstExit([]corev1.Pod{*p}); e != nil {
			at = e.t.FinishedAt
		}
		return failureTarget(at)
	}
	if !inPlace {
		return nil
	}
	gone := slices.DeleteFunc(slices.Clone(obs.Gone), func(p corev1.Pod) bool { return stoppedBySuspension(obs.Job, &p) })
	if e := firstExit(gone); e != nil {
		return failureTarget(e.t.FinishedAt)
	}
	if p := deletedWhileRunning(obs, nil); p != nil && !stoppedBySuspension(obs.Job, p) {
		return failureTarget(*p.DeletionTimestamp)
	}
	return nil
}

// stoppedBySuspension says whether p, being deleted, was stopped by a suspension of job (Kueue's preemption,
// the user's suspend), maybe since undone: its deletion was asked no later than the Job's latest suspension
// or resumption. A pod still stopping carries the end of its grace period as its deletionTimestamp: the
// request came that grace period earlier.
func stoppedBySuspension(job *batchv1.Job, p *corev1.Pod) bool {
	if p.DeletionTimestamp == nil {
		return false
	}
	asked := p.DeletionTimestamp.Time
	if g := p.DeletionGracePeriodSeconds; g != nil {
		asked = asked.Add(-time.Duration(*g) * time.Second)
	}
	for _, c := range job.Status.Conditions { // True since the suspension, False (JobResumed) since the resumption
		if c.Type == batchv1.JobSuspended {
			return !asked.After(c.LastTransitionTime.Time)
		}
	}
	return false
}

func failureTarget(at metav1.Time) *batchv1.JobCondition {
	return &batchv1.JobCondition{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded,
		Message: "Job has reached the specified backoff limit", LastTransitionTime: at}
}

// RestartsInPlace reports whether job, not suspended, was built to restart its pods in place: its Job
// controller never fails it (builders.inPlaceJob), so a worker's pod that failed, even deleted, or that is
// gone (Observed.Gone, Observed.ForceDeleted) fails the attempt here. A suspended Job's pods are stopped,
// not failed, also while its Suspended condition still says so after the resumption.
func RestartsInPlace(job *batchv1.Job) bool {
	return job != nil && job.Annotations[names.InPlaceAnnotation] != "" && (job.Spec.Suspend == nil || !*job.Spec.Suspend) &&
		JobCondition(job, batchv1.JobSuspended) == nil // resumed, but not yet seen so by Kubernetes' Job controller
}

// lostNodeNames returns the nodes of the attempt's workers that are in trouble, mapped to why.
func lostNodeNames(obs Observed) map[string]string {
	lost := map[string]string{}
	for i := range obs.Pods {
		if n := obs.Pods[i].Spec.NodeName; n != "" && obs.NodeTrouble[n] != "" {
			lost[n] = obs.NodeTrouble[n]
		}
	}
	return lost
}

// lostNodes returns descriptions of the workers whose node is in trouble, for example "rank 1's node n-2 is gone".
func lostNodes(obs Observed) []string {
	var lost []string
	for _, p := range ByRank(obs.Pods) {
		if why := obs.NodeTrouble[p.Spec.NodeName]; why != "" && p.Spec.NodeName != "" {
			lost = append(lost, fmt.Sprintf("rank %s's node %s %s", p.Labels[names.RankLabel], p.Spec.NodeName, why))
		}
	}
	return lost
}
