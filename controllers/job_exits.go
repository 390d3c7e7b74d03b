package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

// The pod watch's memory of exits (jobMemory.exits). When a rank is killed, Kubernetes' Job controller
// fails the Job on the first failed pod and deletes the others; on real nodes the killed rank's pod can be
// gone (its end reported and the pod deleted in one instant) before the JobController reads the attempt,
// and its peer's error exit (it lost the rank) would then be judged alone: a retryable kill read as a
// permanent error. The watch saw the kill (or the deletion): the verdict reads the remembered ends of pods
// that are gone (derive.Observed.Gone) and the pods deleted at once while they ran
// (derive.Observed.ForceDeleted).

// recordExit remembers p when one of its containers ended with a non-zero code, or when it is deleted at
// once while its trainer runs; an older attempt's pod is ignored, a newer attempt's replaces what was kept.
func (m *memory) recordExit(p *corev1.Pod) {
	key, ok := trainingJobOf(p)
	forced := derive.ForceDeleted(p) && derive.RunningWhenDeleted(p)
	if !ok || !derive.ExitedNonZero(p) && !forced {
		return
	}
	attempt := names.JobAttempt(p)
	m.with(key, func(j *jobMemory) {
		kept := &j.exits
		switch {
		case kept.pods != nil && attempt < kept.attempt:
			return
		case kept.pods == nil || attempt > kept.attempt:
			*kept = attemptExits{attempt: attempt, pods: map[types.UID]corev1.Pod{}, forced: map[types.UID]corev1.Pod{}}
		}
		seen := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, Labels: p.Labels,
			DeletionTimestamp: p.DeletionTimestamp, DeletionGracePeriodSeconds: p.DeletionGracePeriodSeconds},
			Spec: corev1.PodSpec{NodeName: p.Spec.NodeName}, Status: *p.Status.DeepCopy()}
		if forced {
			kept.forced[p.UID] = seen
		}
		if derive.ExitedNonZero(p) {
			kept.pods[p.UID] = seen
		}
	})
}

// forcedWhileRunning returns the remembered pods of the job's attempt deleted at once while their trainer ran.
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

// goneExits returns the remembered pods of the job's attempt that are not among present (the pods listed now).
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

// trainingJobOf returns the TrainingJob a child or a worker pod belongs to, from the name label the builders set.
func trainingJobOf(obj client.Object) (types.NamespacedName, bool) {
	name, ok := obj.GetLabels()[names.NameLabel]
	return types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}, ok && name != ""
}

// recordingExits wraps the pod watch's handler: every pod the watch delivers (updates and the final state of
// a deleted pod) is offered to the memory before the handler enqueues its TrainingJob.
func (m *memory) recordingExits(next handler.EventHandler) handler.EventHandler {
	return recordingPods(m.recordExit, next)
}

// recordingPods wraps a pod watch's handler: record sees every pod the watch delivers (updates, and the
// final state of a deleted pod) before next enqueues its TrainingJob; such pods may be gone when a
// reconcile reads them.
func recordingPods(record func(*corev1.Pod), next handler.EventHandler) handler.EventHandler {
	offer := func(obj client.Object) {
		if p, ok := obj.(*corev1.Pod); ok {
			record(p)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			next.Create(ctx, e, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			offer(e.ObjectNew)
			next.Update(ctx, e, q)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			offer(e.Object)
			next.Delete(ctx, e, q)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			next.Generic(ctx, e, q)
		},
	}
}
