package controllers

import (
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

// defaultGoodputInterval is how often a job's goodput is written when nothing else changes.
const defaultGoodputInterval = 30 * time.Second

// accountGoodput keeps status.goodput (derive.AccountGoodput): accounted at every reconcile, put into the
// status when its category or attempt changed, when the status is written anyway, or GoodputInterval
// after the last time it was. The status keeps what is accounted, so what is not written yet is
// accounted again by the next reconcile.
func (r *StatusReconciler) accountGoodput(tj *mlv1.TrainingJob, old mlv1.TrainingJobStatus, now time.Time) {
	next := derive.AccountGoodput(tj, r.checkpointSeconds(tj), now)
	if goodputDue(old, tj.Status, next, now, r.goodputInterval(tj)) {
		tj.Status.Goodput = next
	}
}

// waitingGoodputFactor: a job that waits (queued, suspended) has its goodput written this many times less
// often: it changes category only on an event, which is accounted at once, and thousands may wait.
const waitingGoodputFactor = 10

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
func goodputDue(old, cur mlv1.TrainingJobStatus, next *mlv1.GoodputStatus, now time.Time, every time.Duration) bool {
	prev := old.Goodput
	switch {
	case next == nil:
		return false
	case prev == nil || prev.AccountedTime == nil || prev.Category != next.Category || prev.Attempt != next.Attempt:
		return true
	case now.Sub(prev.AccountedTime.Time) >= every:
		return !apiequality.Semantic.DeepEqual(prev, next)
	}
	old.Goodput, cur.Goodput = nil, nil // copies: only the comparison changes
	return !apiequality.Semantic.DeepEqual(old, cur)
}

// goodputInterval returns how often the job's goodput is written when nothing else changes.
func (r *StatusReconciler) goodputInterval(tj *mlv1.TrainingJob) time.Duration {
	every := orDefault(r.GoodputInterval, defaultGoodputInterval)
	if c, _ := derive.GoodputCategory(tj); c == mlv1.BadputQueued {
		every *= waitingGoodputFactor
	}
	return every
}
