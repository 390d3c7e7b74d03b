package controllers

import (
	"context"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/internal/text"
)

// The pod watch's memory of exits (jobMemory.exits). When a rank is killed, Kubernetes' Job
// controller fails the Job and deletes the other pods, and the killed pod can be gone before the
// JobController reads the attempt. Its peer's error exit alone would turn a retryable kill into a
// permanent error. So the verdict also reads the remembered ends of gone pods
// (derive.Observed.Gone) and of pods force-deleted while running (derive.Observed.ForceDeleted).

// exitsPerRank caps the pods of one rank an attempt's memory keeps, and maxKeptExits all its pods
// (numWorkers is at most maxWorkers): the first ends decide, and a tenant's pods of the Job's name
// cannot grow the operator's memory.
const (
	exitsPerRank = 4
	maxWorkers   = 1024
	maxKeptExits = exitsPerRank * maxWorkers
)

// recordExit remembers p when a container exited non-zero, or when p is force-deleted while its
// trainer runs, for a pod a Job of its job's name controls (ofJobNamed), up to exitsPerRank pods
// per rank. It ignores older attempts of the Job it keeps; a newer attempt or another Job (the pod
// watch passes only the current Job's pods) replaces what was kept.
func (m *memory) recordExit(p *corev1.Pod) {
	key, ok := trainingJobOf(p)
	forced := derive.ForceDeleted(p) && derive.RunningWhenDeleted(p)
	if !ok || !ofJobNamed(key.Name, p) || !worthKeeping(p) {
		return
	}
	attempt, job := names.JobAttempt(p), metav1.GetControllerOf(p).UID
	m.with(key, func(j *jobMemory) {
		kept := &j.exits
		switch {
		case kept.pods == nil || job != kept.job || attempt > kept.attempt:
			// Another Job is the job's now: a new attempt's, or a job of the same name submitted again.
			*kept = newAttemptExits(attempt, job)
		case attempt < kept.attempt:
			return
		}
		rank := p.Labels[names.RankLabel]
		switch {
		case kept.has(p.UID):
		case kept.full(rank):
			return
		default:
			kept.ranks[rank]++
		}
		seen := keptPod(p)
		if forced {
			kept.forced[p.UID] = seen
		}
		if derive.ExitedNonZero(p) {
			kept.pods[p.UID] = seen
		}
	})
}

// keptMessageBytes is how much of a failed end's termination message the memory keeps: its end, where
// the verdict reads the last lines and a hint's cause (a Python traceback ends with the exception).
const keptMessageBytes = 2048

// keptPod returns what the verdict reads of p (derive.classify): its name, our labels, its controller
// reference (the verdict counts only the current Job's pods, madeBy), its deletion, node and phase, its
// DisruptionTarget condition, and its containers' states, a message only where an end failed, cut to
// its last keptMessageBytes. What else the kubelet reports (images, IDs, addresses, resources, other
// conditions) is not kept: a kept pod costs about 1 KiB plus its failed ends' messages, not the whole
// status.
func keptPod(p *corev1.Pod) corev1.Pod {
	kept := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, Labels: keptLabels(p.Labels),
		OwnerReferences:   []metav1.OwnerReference{*metav1.GetControllerOf(p)},
		DeletionTimestamp: p.DeletionTimestamp, DeletionGracePeriodSeconds: p.DeletionGracePeriodSeconds},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName}, Status: corev1.PodStatus{Phase: p.Status.Phase}}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget {
			kept.Status.Conditions = append(kept.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status,
				Reason: text.Cut(c.Reason, 128), Message: text.Last(c.Message, keptMessageBytes)})
		}
	}
	kept.Status.InitContainerStatuses = keptStates(p.Status.InitContainerStatuses)
	kept.Status.ContainerStatuses = keptStates(p.Status.ContainerStatuses)
	return kept
}

// keptContainers bounds the containers' states a kept pod holds, of its init containers and of the
// others (a template's many sidecars cost no more): the failed ends the verdict counts first, the
// earliest first (the first exit decides), then those that ended, then those that run, in their order.
const keptContainers = 8

// keptStates returns the names and states of the containers that ran or ended (keptPod), at most
// keptContainers, in their order.
func keptStates(cs []corev1.ContainerStatus) []corev1.ContainerStatus {
	type failure struct {
		i  int
		at time.Time
	}
	var failed []failure
	for i := range cs {
		f := failure{i: -1}
		for _, t := range []*corev1.ContainerStateTerminated{cs[i].State.Terminated, cs[i].LastTerminationState.Terminated} {
			if derive.FailedEnd(t) && (f.i < 0 || t.FinishedAt.Time.Before(f.at)) {
				f = failure{i: i, at: t.FinishedAt.Time}
			}
		}
		if f.i >= 0 {
			failed = append(failed, f)
		}
	}
	slices.SortStableFunc(failed, func(a, b failure) int { return a.at.Compare(b.at) })
	var picked []int
	for _, f := range failed[:min(len(failed), keptContainers)] {
		picked = append(picked, f.i)
	}
	for _, take := range []func(*corev1.ContainerStatus) bool{
		func(c *corev1.ContainerStatus) bool {
			return c.State.Terminated != nil || c.LastTerminationState.Terminated != nil
		},
		func(c *corev1.ContainerStatus) bool { return c.State.Running != nil },
	} {
		for i := range cs {
			if len(picked) < keptContainers && take(&cs[i]) && !slices.Contains(picked, i) {
				picked = append(picked, i)
			}
		}
	}
	slices.Sort(picked)
	var out []corev1.ContainerStatus
	for _, i := range picked {
		out = append(out, corev1.ContainerStatus{Name: text.Cut(cs[i].Name, 63), State: keptState(cs[i].State),
			LastTerminationState: keptState(cs[i].LastTerminationState)})
	}
	return out
}

// keptState returns a container state without the waiting reason, and with a terminated state's
// message only where it failed.
func keptState(s corev1.ContainerState) corev1.ContainerState {
	out := corev1.ContainerState{}
	if s.Running != nil {
		out.Running = &corev1.ContainerStateRunning{StartedAt: s.Running.StartedAt}
	}
	if t := s.Terminated; t != nil {
		out.Terminated = &corev1.ContainerStateTerminated{ExitCode: t.ExitCode, Signal: t.Signal, Reason: text.Cut(t.Reason, 128),
			StartedAt: t.StartedAt, FinishedAt: t.FinishedAt}
		if t.ExitCode != 0 {
			out.Terminated.Message = text.Last(t.Message, keptMessageBytes)
		}
	}
	return out
}

// keptLabels returns the labels of a remembered pod the operator reads: its own and Kubernetes' Job
// controller's (the tenant's template labels are not kept).
func keptLabels(l map[string]string) map[string]string {
	kept := map[string]string{}
	for k, v := range l {
		if strings.HasPrefix(k, mlv1.GroupVersion.Group+"/") || strings.HasPrefix(k, "batch.kubernetes.io/") {
			kept[k] = v
		}
	}
	return kept
}

// forcedWhileRunning returns the remembered pods of the attempt that were force-deleted while their
// trainer ran.
func (m *memory) forcedWhileRunning(key types.NamespacedName, attempt int32) []corev1.Pod {
	var out []corev1.Pod
	m.peek(key, func(j *jobMemory) {
		if j.exits.pods == nil || j.exits.attempt != attempt {
			return
		}
		out = make([]corev1.Pod, 0, len(j.exits.forced))
		for _, p := range j.exits.forced {
			out = append(out, p)
		}
	})
	return out
}

// goneExits returns the remembered pods of the attempt that are not among present.
func (m *memory) goneExits(key types.NamespacedName, attempt int32, present []corev1.Pod) []corev1.Pod {
	var out []corev1.Pod
	m.peek(key, func(j *jobMemory) {
		if j.exits.pods == nil || j.exits.attempt != attempt {
			return
		}
		listed := map[types.UID]bool{}
		for i := range present {
			listed[present[i].UID] = true
		}
		for uid, p := range j.exits.pods {
			if !listed[uid] {
				out = append(out, p)
			}
		}
	})
	return out
}

// forgetExits drops the remembered exits of a job whose verdict is written.
func (m *memory) forgetExits(key types.NamespacedName) {
	m.peek(key, func(j *jobMemory) { j.exits = attemptExits{} })
}

// trainingJobOf returns the TrainingJob a child or worker pod belongs to, from its name label.
func trainingJobOf(obj client.Object) (types.NamespacedName, bool) {
	name, ok := obj.GetLabels()[names.NameLabel]
	return types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}, ok && name != ""
}

// worthKeeping reports whether the memory keeps p's end: a container exited non-zero, or p is deleted
// at once while its trainer runs.
func worthKeeping(p *corev1.Pod) bool {
	return derive.ExitedNonZero(p) || derive.ForceDeleted(p) && derive.RunningWhenDeleted(p)
}

// recordingExits wraps the pod watch's handler so the memory sees every delivered pod worth keeping
// that the job's current Job made, as the cache holds it, of an attempt the job has reached, before its
// TrainingJob is enqueued. A pod naming the Job with another UID (made by hand), or labelled with an
// attempt to come, takes none of the memory's room.
func (r *JobReconciler) recordingExits(next handler.EventHandler) handler.EventHandler {
	return recordingPods(func(ctx context.Context, p *corev1.Pod) {
		key, ok := trainingJobOf(p)
		if !ok || !worthKeeping(p) {
			return
		}
		job := &batchv1.Job{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: names.JobNameOf(key.Name)}, job); err != nil || !madeBy(job, p) {
			return
		}
		// The status's attempt goes up before any pod is moved into the attempt (a restart in place):
		// a pod labelled past it is no worker, and would make the memory drop the attempt's ends.
		tj := &mlv1.TrainingJob{}
		if err := r.Get(ctx, key, tj); err != nil || names.JobAttempt(p) > tj.Status.Attempt {
			return
		}
		r.memory.recordExit(p)
	}, next)
}

// recordingPods wraps a pod watch's handler: record sees every delivered pod, including a deleted
// pod's final state, before next enqueues its TrainingJob.
func recordingPods(record func(context.Context, *corev1.Pod), next handler.EventHandler) handler.EventHandler {
	offer := func(ctx context.Context, obj client.Object) {
		if p, ok := obj.(*corev1.Pod); ok {
			record(ctx, p)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			next.Create(ctx, e, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			offer(ctx, e.ObjectNew)
			next.Update(ctx, e, q)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			offer(ctx, e.Object)
			next.Delete(ctx, e, q)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			next.Generic(ctx, e, q)
		},
	}
}
