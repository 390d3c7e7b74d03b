package controllers

import (
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

// goodput returns status.goodput for st, accounted up to now (derive.AccountGoodput), and whether
// to write it at once: its category or attempt changed, a newer checkpoint bounds it, or the shown
// percent changed (goodputRecheck).
func (r *JobReconciler) goodput(tj *mlv1.TrainingJob, old, st mlv1.TrainingJobStatus, now time.Time) (*mlv1.GoodputStatus, bool) {
	// Account up to now in the status as read first, so a hang the StatusController declared is
	// counted before the restart this reconcile decides.
	asRead := r.account(tj, old, now)
	next := asRead
	if next != nil {
		mine := st
		mine.Goodput = next
		next = r.account(tj, mine, now)
	}
	prev := old.Goodput
	moved := next != nil && (prev == nil || prev.AccountedTime == nil || prev.Category != next.Category || prev.Attempt != next.Attempt ||
		derive.NewCheckpointBound(prev, next) || prev.Percent != next.Percent && goodputMoves(tj, st.State))
	if moved || goodputDue(old, st, next) {
		return next, moved
	}
	return st.Goodput, false
}

// account returns tj's goodput with st as its status, accounted up to now (derive.AccountGoodput).
func (r *JobReconciler) account(tj *mlv1.TrainingJob, st mlv1.TrainingJobStatus, now time.Time) *mlv1.GoodputStatus {
	// Only the status is replaced; the rest is read.
	c := *tj
	c.Status = st
	var secs *float64
	if r.checkpointSeconds != nil {
		secs = r.checkpointSeconds(&c)
	}
	return derive.AccountGoodput(&c, secs, now)
}

// goodputRecheck is how often the JobController rechecks a monitored running job's goodput percent.
// The GOODPUT column lags the live figure by at most this much.
const goodputRecheck = 30 * time.Second

// goodputMoves reports whether tj's percent changes with time alone: it is running with its
// progress read.
func goodputMoves(tj *mlv1.TrainingJob, state mlv1.State) bool {
	return state == mlv1.StateRunning && tj.MonitoringEnabled()
}

// goodputDue reports whether next must be written: its category or attempt changed, or the rest of
// the status changed from old to cur.
func goodputDue(old, cur mlv1.TrainingJobStatus, next *mlv1.GoodputStatus) bool {
	prev := old.Goodput
	switch {
	case next == nil:
		return false
	case prev == nil || prev.AccountedTime == nil || prev.Category != next.Category || prev.Attempt != next.Attempt:
		return true
	}
	old.Goodput, cur.Goodput = nil, nil
	return !apiequality.Semantic.DeepEqual(old, cur)
}
