package controllers

import (
	"fmt"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// Reasons a run completes early under spec.successPolicy.
const (
	ReasonTargetReached = "TargetReached"
	ReasonEarlyStopped  = "EarlyStopped"
)

// successDecision is a success-policy verdict: done with a reason and message, or not done.
type successDecision struct {
	done            bool
	reason, message string
}

// decideSuccess applies spec.successPolicy to a sample. It tracks the best value of the early-stopping
// metric in st.Best (so the verdict survives operator restarts) and is otherwise pure.
func decideSuccess(tj *mlv1.TrainingJob, st *mlv1.TrainingJobStatus, s Sample) successDecision {
	p := tj.Spec.SuccessPolicy
	if p == nil {
		return successDecision{}
	}
	if p.TargetAccuracy != nil && s.Accuracy != nil && *s.Accuracy >= *p.TargetAccuracy {
		return successDecision{true, ReasonTargetReached, fmt.Sprintf("accuracy %g reached targetAccuracy %g", *s.Accuracy, *p.TargetAccuracy)}
	}
	if p.TargetLoss != nil && s.Loss != nil && *s.Loss <= *p.TargetLoss {
		return successDecision{true, ReasonTargetReached, fmt.Sprintf("loss %g reached targetLoss %g", *s.Loss, *p.TargetLoss)}
	}
	if p.EarlyStoppingPatience == nil || s.Epoch == nil {
		return successDecision{}
	}
	metric, value, ok := trackedMetric(p, s)
	if !ok {
		return successDecision{}
	}
	epoch := int32(*s.Epoch)
	if b := st.Best; b == nil || b.Metric != metric || improves(metric, value, b.Value) {
		st.Best = &mlv1.BestMetric{Metric: metric, Value: value, Epoch: epoch}
		return successDecision{}
	}
	if waited := epoch - st.Best.Epoch; waited >= *p.EarlyStoppingPatience {
		return successDecision{true, ReasonEarlyStopped, fmt.Sprintf("%s did not improve for %d epochs (best %g at epoch %d)",
			metric, waited, st.Best.Value, st.Best.Epoch)}
	}
	return successDecision{}
}

// trackedMetric is the metric early stopping watches: accuracy when only targetAccuracy is set, else loss
// when reported, else accuracy.
func trackedMetric(p *mlv1.SuccessPolicy, s Sample) (string, float64, bool) {
	preferAccuracy := p.TargetAccuracy != nil && p.TargetLoss == nil
	switch {
	case preferAccuracy && s.Accuracy != nil:
		return "accuracy", *s.Accuracy, true
	case s.Loss != nil:
		return "loss", *s.Loss, true
	case s.Accuracy != nil:
		return "accuracy", *s.Accuracy, true
	}
	return "", 0, false
}

// improves: lower loss, higher accuracy.
func improves(metric string, v, best float64) bool {
	if metric == "loss" {
		return v < best
	}
	return v > best
}
