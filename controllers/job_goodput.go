package controllers

import (
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

// goodput returns status.goodput for st, the status the JobController is about to write (derive.
// AccountGoodput, up to now), and whether it is to be written at once: its category or its attempt
// changed, a newer checkpoint cut its training since the last one (derive.NewCheckpointBound), or the
// percent shown (the GOODPUT column) of a running job whose progress is read changed (goodputRecheck).
// Otherwise it goes only with the JobController's other writes: a job whose state and percent do not
// change is not written, however long it runs. The status keeps the accounting and its category, so what
// is not written is accounted again next time, and readers (the metrics, the plugin) add the time since
// (derive.GoodputAt). The JobController owns goodput as it makes nearly every change of category (a
// state, an attempt); the StatusController's (a first progress, a hang, no progress source) reach it
// through its watch (goodputMoved).
func (r *JobReconciler) goodput(tj *mlv1.TrainingJob, old, st mlv1.TrainingJobStatus, now time.Time) (*mlv1.GoodputStatus, bool) {
	// First up to now in the category the status as read is in, then the change this write makes: a hang
	// the StatusController declared is accounted (from rank 0's last progress) before the restart the
	// JobController decides on it in the same reconcile.
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
	c := *tj // the status is replaced, the rest only read
	c.Status = st
	var secs *float64
	if r.checkpointSeconds != nil {
		secs = r.checkpointSeconds(&c)
	}
	return derive.AccountGoodput(&c, secs, now)
}

// goodputRecheck is how often the JobController looks again at a running job whose progress is read,
// where the percent shown moves with time: it is written when it changed, so the GOODPUT column lags the
// live figure (the metrics, the plugin) by at most this much, and a job whose percent settled is not
// written at all.
const goodputRecheck = 30 * time.Second

// goodputMoves reports whether tj's percent moves with time alone: it runs (state) with its progress read.
func goodputMoves(tj *mlv1.TrainingJob, state mlv1.State) bool {
	return state == mlv1.StateRunning && tj.MonitoringEnabled()
}

// goodputDue reports whether next is to be written: its category or attempt changed, or the rest of the
// status changed from old to cur (it goes with that write).
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
