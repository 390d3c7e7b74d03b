package controllers

import (
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

// accountGoodput keeps status.goodput (derive.AccountGoodput): accounted at every reconcile, put into the
// status only when its category or attempt changed or the status is written anyway, never on a timer: a
// job whose figures do not change is not written, however long it runs. The status keeps the accounting
// and its category, so the next reconcile accounts again what is not written yet, and readers (the
// metrics, the plugin) add the time since (derive.GoodputAt).
func (r *StatusReconciler) accountGoodput(tj *mlv1.TrainingJob, old mlv1.TrainingJobStatus, now time.Time) {
	if next := derive.AccountGoodput(tj, r.checkpointSeconds(tj), now); goodputDue(old, tj.Status, next) {
		tj.Status.Goodput = next
	}
}

// checkpointSeconds returns what the current attempt's rank 0 last reported having spent saving checkpoints,
// nil when it reports none or the last sample is older than the attempt's workers.
func (r *StatusReconciler) checkpointSeconds(tj *mlv1.TrainingJob) *float64 {
	s, ok := r.jobs.peek(tj)
	running := meta.FindStatusCondition(tj.Status.Conditions, mlv1.ConditionRunning)
	if !ok || s.sample == nil || tj.Status.State != mlv1.StateRunning || running == nil || s.at.Before(running.LastTransitionTime.Time) {
		return nil
	}
	return s.sample.CheckpointSeconds
}

// goodputDue reports whether next is to be written.
func goodputDue(old, cur mlv1.TrainingJobStatus, next *mlv1.GoodputStatus) bool {
	prev := old.Goodput
	switch {
	case next == nil:
		return false
	case prev == nil || prev.AccountedTime == nil || prev.Category != next.Category || prev.Attempt != next.Attempt:
		return true
	}
	old.Goodput, cur.Goodput = nil, nil // copies: only the comparison changes
	return !apiequality.Semantic.DeepEqual(old, cur)
}
