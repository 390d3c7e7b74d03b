package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// recordEvents records an event when the state changed (Warning for Failed), and a Warning when a worker
// became stuck on a new fault.
func (r *JobReconciler) recordEvents(ctx context.Context, tj *mlv1.TrainingJob, old mlv1.TrainingJobStatus) {
	st := tj.Status
	if old.State != st.State {
		r.recordTransition(ctx, tj, old.State)
	}
	if running := conditionReason(st, mlv1.ConditionRunning); isFault(st.State, running) && running != conditionReason(old, mlv1.ConditionRunning) {
		r.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, running, "Observe", "%s", conditionMessage(st, mlv1.ConditionRunning))
	}
	if created := conditionReason(st, mlv1.ConditionCreated); created == ReasonCreateRejected && conditionReason(old, mlv1.ConditionCreated) != created {
		r.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, created, "Create", "%s", conditionMessage(st, mlv1.ConditionCreated))
	}
}

func (r *JobReconciler) recordTransition(ctx context.Context, tj *mlv1.TrainingJob, from mlv1.State) {
	kind := corev1.EventTypeNormal
	if tj.Status.State == mlv1.StateFailed {
		kind = corev1.EventTypeWarning
	}
	note := conditionMessage(tj.Status, string(tj.Status.State))
	if note == "" {
		note = conditionMessage(tj.Status, mlv1.ConditionRunning)
	}
	r.Recorder.Eventf(tj, nil, kind, string(tj.Status.State), "Transition", "%s -> %s: %s", stateOrNone(from), tj.Status.State, note)
	ctrl.LoggerFrom(ctx).Info("state changed", "trainingJob", klog.KObj(tj), "from", from, "to", tj.Status.State)
}

func stateOrNone(s mlv1.State) string {
	if s == "" {
		return "New"
	}
	return string(s)
}
