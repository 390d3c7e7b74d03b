package derive

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
)

// HeldExit is how a trainer ended that its supervisor holds (a gang that restarts in place): the pod keeps
// running, unready, and its supervisor answers with the program's end.
type HeldExit struct {
	ExitCode, Signal      int32
	Message               string
	StartedAt, FinishedAt time.Time
}

// Workers returns the workers' pods as the state machine reads them: a pod whose trainer is held
// (Observed.Held) reads as the kubelet would show it had the trainer's container ended. Other pods are
// returned as listed; obs.Pods is not changed.
func (o Observed) Workers() []corev1.Pod {
	if len(o.Held) == 0 {
		return o.Pods
	}
	pods := make([]corev1.Pod, len(o.Pods))
	for i := range o.Pods {
		pods[i] = o.Pods[i]
		if e, held := o.Held[o.Pods[i].UID]; held {
			pods[i] = *o.Pods[i].DeepCopy()
			asEnded(&pods[i], e)
		}
	}
	return pods
}

// withHeld returns o with its held trainers read as ended (Workers) and Held empty: the form the
// state machine's functions read.
func (o Observed) withHeld() Observed {
	o.Pods, o.Held = o.Workers(), nil
	return o
}

// asEnded makes p read as if its trainer's container had ended as e says: the pod Failed, its times to
// the second, as the kubelet's. Ranks that fail in the same second are then told apart by how they ended.
func asEnded(p *corev1.Pod, e HeldExit) {
	for i := range p.Status.ContainerStatuses {
		cs := &p.Status.ContainerStatuses[i]
		if cs.Name != names.ContainerName {
			continue
		}
		p.Status.Phase = corev1.PodFailed
		cs.Ready = false
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: e.ExitCode, Signal: e.Signal,
			Reason: "Error", Message: e.Message, StartedAt: metav1.NewTime(e.StartedAt.Truncate(time.Second)),
			FinishedAt: metav1.NewTime(e.FinishedAt.Truncate(time.Second))}}
	}
}
