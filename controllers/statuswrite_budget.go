package controllers

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// DefaultStatusWriteQPS is the default of --status-write-qps: the routine status writes per second
// over all jobs and controllers.
const DefaultStatusWriteQPS = 50

// maxDebt bounds, in seconds of budget, how far urgent writes may run the budget into debt, so
// routine updates resume within this time after a burst.
const maxDebt = 10

// lateClaim is how late a turn may be claimed and still be written at once. Later claims take the
// next free turn, so they are not written all at once.
const lateClaim = time.Second

// forgetAfter is how long past its turn a reservation is kept for a controller that did not come
// back for it.
const forgetAfter = time.Minute

// writeBudget is the one budget the four controllers' status writes share. It never blocks a
// reconcile:
//   - an urgent write (a state, an attempt, a condition's status or reason other than the Running
//     condition's normal progress, goodput's category, an attempt's first progress, and every write
//     of the checkpoint and tracking controllers) is made at once and charged, the budget going
//     into debt when it must, up to maxDebt;
//   - a routine write reserves the budget's next free turn and is made when its reconcile comes
//     back at that time: turns are given in the order they are asked for, one every 1/qps seconds,
//     and a job asks again only with its next update, so the jobs take turns round-robin; with N
//     jobs updating, each job's status is written about every N/qps seconds. A turn not claimed is
//     lost, not waited for.
//
// The deferred reconcile computes its status again when it comes back, so the budget holds a time
// per key, never a status. A nil budget (a reconciler built without Setup) admits every write.
type writeBudget struct {
	clock   clock.PassiveClock
	limiter *rate.Limiter

	mu        sync.Mutex
	turns     map[string]turn // the reserved turn of each key waiting for one
	lastSweep time.Time
}

type turn struct {
	at          time.Time
	reservation *rate.Reservation
}

// newWriteBudget returns a budget of qps writes a second; nil (none) for a rate of zero or less.
func newWriteBudget(qps float64, c clock.PassiveClock) *writeBudget {
	if qps <= 0 || math.IsInf(qps, 0) || math.IsNaN(qps) {
		return nil
	}
	return &writeBudget{clock: c, limiter: rate.NewLimiter(rate.Limit(qps), max(1, int(qps))), turns: map[string]turn{},
		lastSweep: c.Now()}
}

// admit reports whether a write for key (a controller and a job) may be made now, and if not, how
// long to wait for its turn.
func (b *writeBudget) admit(key string, routine bool) (bool, time.Duration) {
	if b == nil {
		return true, 0
	}
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	defer func() { metrics.StatusWritesWaiting.Set(float64(len(b.turns))) }()
	b.sweepLocked(now)
	if !routine {
		// The write carries the waiting update too.
		b.leaveLocked(key, now)
		if b.limiter.TokensAt(now) > -maxDebt*float64(b.limiter.Limit()) {
			b.limiter.ReserveN(now, 1)
		}
		return true, 0
	}
	if t, ok := b.turns[key]; ok {
		if now.Before(t.at) {
			return false, t.at.Sub(now)
		}
		delete(b.turns, key)
		if now.Sub(t.at) <= lateClaim {
			return true, 0
		}
		// Claimed long after its time, it takes the next free turn so such writes do not bunch up.
	}
	r := b.limiter.ReserveN(now, 1)
	wait := r.DelayFrom(now)
	if wait == 0 {
		return true, 0
	}
	b.turns[key] = turn{at: now.Add(wait), reservation: r}
	return false, wait
}

// leave gives up key's turn: its controller has nothing left to write for it.
func (b *writeBudget) leave(key string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.leaveLocked(key, b.clock.Now())
	metrics.StatusWritesWaiting.Set(float64(len(b.turns)))
}

func (b *writeBudget) leaveLocked(key string, now time.Time) {
	if t, ok := b.turns[key]; ok {
		// Gives the turn back, as far as later turns allow.
		t.reservation.CancelAt(now)
		delete(b.turns, key)
	}
}

// sweepLocked forgets, once a minute, the turns not claimed for forgetAfter.
func (b *writeBudget) sweepLocked(now time.Time) {
	if now.Sub(b.lastSweep) < forgetAfter {
		return
	}
	b.lastSweep = now
	for k, t := range b.turns {
		if now.Sub(t.at) > forgetAfter {
			delete(b.turns, k)
		}
	}
}

// routineWrite reports whether manager's change of a job's status from old to st is routine:
// figures and details that may wait, not a transition anyone acts on.
func routineWrite(manager string, old, st mlv1.TrainingJobStatus) bool {
	if !sameConditions(old, st, ownerOf(manager).Conditions) {
		// A fault's reason (ImagePullBackOff, Unschedulable) and its event are not held back.
		return false
	}
	switch manager {
	case statusController:
		// The first advance of an attempt ends its startup: goodput reads it from lastProgressTime.
		return derive.ProgressedInAttempt(&old) == derive.ProgressedInAttempt(&st)
	case jobController:
		if goodputCategory(old.Goodput) != goodputCategory(st.Goodput) {
			return false
		}
		old.Goodput, st.Goodput = nil, nil
		return !derive.Significant(old, st)
	}
	// The checkpoint and tracking controllers' writes are few, and RESUME_FROM waits on them.
	return false
}

// sameConditions reports whether old and st have the same status and reason for the conditions of
// types. Changes between the Running condition's normal progress reasons count as the same.
func sameConditions(old, st mlv1.TrainingJobStatus, types []string) bool {
	for _, t := range types {
		a, b := meta.FindStatusCondition(old.Conditions, t), meta.FindStatusCondition(st.Conditions, t)
		if (a == nil) != (b == nil) || a != nil && (a.Status != b.Status || a.Reason != b.Reason && !progressing(t, a, b)) {
			return false
		}
	}
	return true
}

// progressing reports whether conditions a and b of type t are both in the Running condition's
// normal progress.
func progressing(t string, a, b *metav1.Condition) bool {
	return t == mlv1.ConditionRunning && derive.ProgressReason(a.Reason) && derive.ProgressReason(b.Reason)
}

// goodputKey is the part of status.goodput that changes its meaning: presence, category and
// attempt.
type goodputKey struct {
	set      bool
	category string
	attempt  int32
}

func goodputCategory(g *mlv1.GoodputStatus) goodputKey {
	if g == nil {
		return goodputKey{}
	}
	return goodputKey{set: true, category: g.Category, attempt: g.Attempt}
}
