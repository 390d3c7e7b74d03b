package derive

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// Reasons a run completes early under spec.successPolicy.
const (
	ReasonTargetReached = "TargetReached"
	ReasonEarlyStopped  = "EarlyStopped"
)

// SuccessDecision is a success-policy verdict: done with a reason and message, or not done.
type SuccessDecision struct {
	Done            bool
	Reason, Message string
}

// ApplySuccess records a verdict that the run is done as the SuccessPolicyMet condition, the
// StatusController's report to the state machine (Status completes the run from it). A verdict once
// given stays; given is true when this call gave it.
func ApplySuccess(st *mlv1.TrainingJobStatus, d SuccessDecision, now metav1.Time) (given bool) {
	if d.Done && meta.FindStatusCondition(st.Conditions, mlv1.ConditionSuccessPolicyMet) == nil {
		set(st, mlv1.ConditionSuccessPolicyMet, true, d.Reason, d.Message, now)
		return true
	}
	return false
}

// DecideSuccess returns the verdict of spec.successPolicy on a sample. It tracks the best value of the
// early-stopping metric in st.Best (so the verdict survives operator restarts) and is otherwise pure.
func DecideSuccess(tj *mlv1.TrainingJob, st *mlv1.TrainingJobStatus, s Sample) SuccessDecision {
	p := tj.Spec.SuccessPolicy
	if p == nil {
		return SuccessDecision{}
	}
	if p.TargetAccuracy != nil && s.Accuracy != nil && AccuracyFraction(*s.Accuracy) >= *p.TargetAccuracy {
		msg := fmt.Sprintf("accuracy %g reached targetAccuracy %g", AccuracyFraction(*s.Accuracy), *p.TargetAccuracy)
		return SuccessDecision{true, ReasonTargetReached, msg}
	}
	if p.TargetLoss != nil && s.Loss != nil && *s.Loss <= *p.TargetLoss {
		return SuccessDecision{true, ReasonTargetReached, fmt.Sprintf("loss %g reached targetLoss %g", *s.Loss, *p.TargetLoss)}
	}
	if p.EarlyStoppingPatience == nil || s.Epoch == nil {
		return SuccessDecision{}
	}
	metric, value, ok := trackedMetric(p, s)
	if !ok {
		return SuccessDecision{}
	}
	epoch := int32(*s.Epoch)
	if b := st.Best; b == nil || b.Metric != metric || improves(metric, value, b.Value) {
		st.Best = &mlv1.BestMetric{Metric: metric, Value: value, Epoch: epoch}
		return SuccessDecision{}
	}
	if waited := epoch - st.Best.Epoch; waited >= *p.EarlyStoppingPatience {
		return SuccessDecision{true, ReasonEarlyStopped, fmt.Sprintf("%s did not improve for %d epochs (best %g at epoch %d)",
			metric, waited, st.Best.Value, st.Best.Epoch)}
	}
	return SuccessDecision{}
}

// trackedMetric returns the metric early stopping watches and its value: accuracy when only targetAccuracy
// is set, else loss when reported, else accuracy; false when the sample reports neither.
func trackedMetric(p *mlv1.SuccessPolicy, s Sample) (string, float64, bool) {
	preferAccuracy := p.TargetAccuracy != nil && p.TargetLoss == nil
	switch {
	case preferAccuracy && s.Accuracy != nil:
		return "accuracy", AccuracyFraction(*s.Accuracy), true
	case s.Loss != nil:
		return "loss", *s.Loss, true
	case s.Accuracy != nil:
		return "accuracy", *s.Accuracy, true
	}
	return "", 0, false
}

// improves reports whether v is better than best: lower loss, higher accuracy.
func improves(metric string, v, best float64) bool {
	if metric == "loss" {
		return v < best
	}
	return v > best
}

// AccuracyFraction returns an accuracy as a fraction, 0 to 1: a figure over 1 is a percentage (a script that
// prints "Acc: 91.2%"), as the status's display takes it.
func AccuracyFraction(a float64) float64 {
	if a > 1 {
		return a / 100
	}
	return a
}
