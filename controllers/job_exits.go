package controllers

import (
	"context"
	"sync"

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

// exitMemory keeps, per TrainingJob, the worker pods of its newest attempt seen ending with a non-zero exit
// code or deleted at once while their trainer ran (derive.ForceDeleted), as the pod watch delivered them.
// When a rank is killed, the Job controller fails the Job on the first failed pod and deletes the others;
// on real nodes the killed rank's pod can be gone (its end reported and the pod deleted in one instant)
// before the JobController reads the attempt, and its peer's error exit (it lost the rank) would then be
// judged alone: a retryable kill read as a permanent error. The watch saw the kill (or the deletion): the
// verdict reads the remembered ends of pods that are gone (derive.Observed.Gone) and the pods deleted at
// once while they ran (derive.Observed.ForceDeleted).
// Kept in memory only: an operator that restarts in that instant judges on what is left, as before.
type exitMemory struct {
	mu   sync.Mutex
	jobs map[types.NamespacedName]attemptExits
}

// attemptExits are the remembered pods of one attempt, by pod UID: those that ended with a non-zero code
// (pods), and those deleted at once while their trainer ran (forced, as seen then: a later state, killed by
// the kubelet, does not replace it).
type attemptExits struct {
	attempt int32
	pods    map[types.UID]corev1.Pod
	forced  map[types.UID]corev1.Pod
}

// record remembers p when one of its containers ended with a non-zero code, or when it is deleted at once
// while its trainer runs; an older attempt's pod is ignored, a newer attempt's replaces what was kept.
func (m *exitMemory) record(p *corev1.Pod) {
	key, ok := trainingJobOf(p)
	forced := derive.ForceDeleted(p) && derive.RunningWhenDeleted(p)
	if !ok || !derive.ExitedNonZero(p) && !forced {
		return
	}
	attempt := names.JobAttempt(p)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.jobs == nil {
		m.jobs = map[types.NamespacedName]attemptExits{}
	}
	kept := m.jobs[key]
	switch {
	case kept.pods != nil && attempt < kept.attempt:
		return
	case kept.pods == nil || attempt > kept.attempt:
		kept = attemptExits{attempt: attempt, pods: map[types.UID]corev1.Pod{}, forced: map[types.UID]corev1.Pod{}}
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
	m.jobs[key] = kept
}

// forcedWhileRunning returns the remembered pods of the job's attempt deleted at once while their trainer ran.
func (m *exitMemory) forcedWhileRunning(key types.NamespacedName, attempt int32) []corev1.Pod {
	m.mu.Lock()
	defer m.mu.Unlock()
	kept, ok := m.jobs[key]
	if !ok || kept.attempt != attempt {
		return nil
	}
	out := make([]corev1.Pod, 0, len(kept.forced))
	for _, p := range kept.forced {
		out = append(out, p)
	}
	return out
}

// gone returns the remembered pods of the job's attempt that are not among present (the pods listed now).
func (m *exitMemory) gone(key types.NamespacedName, attempt int32, present []corev1.Pod) []corev1.Pod {
	m.mu.Lock()
	defer m.mu.Unlock()
	kept, ok := m.jobs[key]
	if !ok || kept.attempt != attempt {
		return nil
	}
	listed := map[types.UID]bool{}
	for i := range present {
		listed[present[i].UID] = true
	}
	var out []corev1.Pod
	for uid, p := range kept.pods {
		if !listed[uid] {
			out = append(out, p)
		}
	}
	return out
}

// forget drops what is kept for a job (it is gone).
func (m *exitMemory) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.jobs, key)
}

// trainingJobOf returns the TrainingJob a child or a worker pod belongs to, from the name label the builders set.
func trainingJobOf(obj client.Object) (types.NamespacedName, bool) {
	name, ok := obj.GetLabels()[names.NameLabel]
	return types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}, ok && name != ""
}

// recordingExits wraps the pod watch's handler: every pod the watch delivers (updates and the final state of
// a deleted pod) is offered to the memory before the handler enqueues its TrainingJob.
func (m *exitMemory) recordingExits(next handler.EventHandler) handler.EventHandler {
	return recordingPods(m.record, next)
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
