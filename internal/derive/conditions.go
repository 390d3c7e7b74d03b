package derive

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// setConditions makes the conditions agree with the phase. Created and Running are always present;
// Completed, Failed and Suspended appear once they first become True.
func setConditions(st *mlv1.TrainingJobStatus, created bool, ph phase, now metav1.Time) {
	if created {
		set(st, mlv1.ConditionCreated, true, "ChildrenCreated", "Job, headless Service and ConfigMap created", now)
	} else if c := meta.FindStatusCondition(st.Conditions, mlv1.ConditionCreated); c == nil || ph.reason == ReasonCreateRejected ||
		c.Reason == ReasonCreateRejected {
		set(st, mlv1.ConditionCreated, false, ph.reason, ph.message, now)
	}
	set(st, mlv1.ConditionRunning, ph.state == mlv1.StateRunning, ph.reason, ph.message, now)
	for _, c := range []struct {
		condition string
		state     mlv1.State
	}{
		{mlv1.ConditionCompleted, mlv1.StateCompleted},
		{mlv1.ConditionFailed, mlv1.StateFailed},
		{mlv1.ConditionSuspended, mlv1.StateSuspended},
	} {
		if ph.state == c.state || meta.FindStatusCondition(st.Conditions, c.condition) != nil {
			set(st, c.condition, ph.state == c.state, ph.reason, ph.message, now)
		}
	}
}

func set(st *mlv1.TrainingJobStatus, t string, status bool, reason, message string, now metav1.Time) {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: t, Status: s, Reason: reason, Message: message,
		ObservedGeneration: st.ObservedGeneration, LastTransitionTime: now,
	})
}
