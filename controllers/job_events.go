package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// recordEvents records an event for a state change (Warning for Failed), and a Warning for a new
// worker fault or a claim or input cache that cannot bind.
func (r *JobReconciler) recordEvents(ctx context.Context, tj *mlv1.TrainingJob, old mlv1.TrainingJobStatus) {
	st := tj.Status
	if old.State != st.State {
		recordTransition(ctx, r.Recorder, tj, old.State)
	}
	if old.State == "" && builders.NoTrainingProgram(tj) {
		r.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, derive.ReasonNoTrainingProgram, "Create", "%s",
			"spec.command is empty and spec.image is the framework's default image, which has no training program "+
				"(only the pytorch image has the default runner): the job will end having trained nothing. "+
				"Set spec.command (and spec.image)")
	}
	if st.Attempt != old.Attempt {
		r.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, derive.ReasonRestarting, "Restart", "%s",
			derive.ConditionMessage(st, mlv1.ConditionRestarting))
	}
	if running := derive.ConditionReason(st, mlv1.ConditionRunning); derive.IsFault(st.State, running) &&
		running != derive.ConditionReason(old, mlv1.ConditionRunning) {
		r.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, running, "Observe", "%s", derive.ConditionMessage(st, mlv1.ConditionRunning))
	}
	if fault := derive.ClaimFault(st); fault != "" && fault != derive.ClaimFault(old) {
		r.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, fault, "Observe", "%s",
			derive.ConditionMessage(st, mlv1.ConditionCheckpointClaimBound))
	}
	if fault := derive.InputsFault(st); fault != "" && fault != derive.InputsFault(old) {
		r.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, fault, "Observe", "%s", derive.ConditionMessage(st, mlv1.ConditionInputsReady))
	}
	if created := derive.ConditionReason(st, mlv1.ConditionCreated); created == derive.ReasonCreateRejected &&
		derive.ConditionReason(old, mlv1.ConditionCreated) != created {
		r.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, created, "Create", "%s", derive.ConditionMessage(st, mlv1.ConditionCreated))
	}
}

// recordTransition records a state change: a log line, the created, completed and failed counters,
// and an event when eventful.
func recordTransition(ctx context.Context, rec events.EventRecorder, tj *mlv1.TrainingJob, from mlv1.State) {
	st := tj.Status
	reason := derive.ConditionReason(st, string(st.State))
	ctrl.LoggerFrom(ctx).Info("state changed", "from", from, "to", st.State, "reason", reason)
	countTransition(tj.Namespace, from, st.State, reason)
	if !eventful(from, st.State) {
		return
	}
	kind := corev1.EventTypeNormal
	if st.State == mlv1.StateFailed {
		kind = corev1.EventTypeWarning
	}
	note := derive.ConditionMessage(st, string(st.State))
	if note == "" {
		note = derive.ConditionMessage(st, mlv1.ConditionRunning)
	}
	if st.State == mlv1.StateCompleted || st.State == mlv1.StateFailed {
		note = reason + ": " + note
	}
	rec.Eventf(tj, nil, kind, string(st.State), "Transition", "%s -> %s: %s", stateOrNone(from), st.State, note)
}

// eventful reports whether a state change gets an event: the end of a run, a suspension and a
// resumption do. Healthy start steps do not, to spare the shared API server a write per job.
func eventful(from, to mlv1.State) bool {
	switch to {
	case mlv1.StateCompleted, mlv1.StateFailed, mlv1.StateSuspended:
		return true
	}
	return from == mlv1.StateSuspended
}

// countTransition keeps trainingjob_created_total, _completed_total and _failed_total.
func countTransition(namespace string, from, to mlv1.State, reason string) {
	switch {
	case from == "":
		metrics.Created.WithLabelValues(namespace).Inc()
	case to == mlv1.StateCompleted:
		metrics.Completed.WithLabelValues(reason).Inc()
	case to == mlv1.StateFailed:
		metrics.Completed.WithLabelValues(string(mlv1.StateFailed)).Inc()
		metrics.Failed.WithLabelValues(reason).Inc()
	}
}

func stateOrNone(s mlv1.State) string {
	if s == "" {
		return "New"
	}
	return string(s)
}
