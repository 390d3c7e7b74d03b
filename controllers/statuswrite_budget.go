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

// DefaultStatusWriteQPS is the default of --status-write-qps: status writes per second, over all jobs and
// controllers, that routine updates (progress, worker counts, the percent of goodput shown) may fill.
const DefaultStatusWriteQPS = 50

// maxDebt bounds, in seconds of the budget, how far urgent writes may run the budget into debt: after a
// burst of transitions (a thousand jobs created at once) routine updates resume within this time.
const maxDebt = 10

// lateClaim is how late a turn may be claimed and still be written at once; later, the write takes the next
// free turn (turns claimed late together would otherwise all be written at the same moment).
const lateClaim = time.Second

// forgetAfter is how long past its turn a reservation is kept for a controller that did not come back for
// it (its job deleted, or nothing left to write).
const forgetAfter = time.Minute

// writeBudget is the one budget the four controllers' status writes share. It never blocks a reconcile:
//   - an urgent write (a state, an attempt, a condition's status or reason other than the Running
//     condition's normal progress, goodput's category, an attempt's first progress, and every write of the
//     checkpoint and tracking controllers) is made at once and
//     charged, the budget going into debt when it must, up to maxDebt;
//   - a routine write reserves the budget's next free turn and is made when its reconcile comes back at
//     that time: turns are given in the order they are asked for, one every 1/qps seconds, and a job asks
//     again only with its next update, so the jobs take turns round-robin; with N jobs updating, each
//     job's status is written about every N/qps seconds. A turn not claimed is lost, not waited for.
//
// The deferred reconcile computes its status again when it comes back, so the budget holds a time per
// key, never a status. A nil budget (a reconciler built without Setup) admits every write.
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

// admit says whether a write for key (a controller and a job) may be made now, and when not, how long to
// wait for its turn.
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
		b.leaveLocked(key, now) // the write carries the waiting update too
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
		// Claimed long after its time: many such would be written at once. It takes the next free turn.
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
		t.reservation.CancelAt(now) // gives the turn back, as far as later turns allow
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

// routineWrite reports whether manager's change of a job's status from old to st is routine: figures and
// details that may wait their turn, not a transition a person or another controller acts on.
func routineWrite(manager string, old, st mlv1.TrainingJobStatus) bool {
	if !sameConditions(old, st, ownerOf(manager).Conditions) {
		return false // a fault's reason (ImagePullBackOff, Unschedulable) and its event are not held back
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
	return false // the checkpoint and tracking controllers' writes are few, and RESUME_FROM waits on them
}

// sameConditions reports whether old and st have the same conditions of types, by status and reason; a
// change between two reasons of normal progress of the Running condition (WorkersStarting,
// AllWorkersRunning, WorkersFinishing) counts as the same.
func sameConditions(old, st mlv1.TrainingJobStatus, types []string) bool {
	for _, t := range types {
		a, b := meta.FindStatusCondition(old.Conditions, t), meta.FindStatusCondition(st.Conditions, t)
		if (a == nil) != (b == nil) || a != nil && (a.Status != b.Status || a.Reason != b.Reason && !progressing(t, a, b)) {
			return false
		}
	}
	return true
}

// progressing reports whether conditions a and b of type t are both the Running condition's normal progress.
func progressing(t string, a, b *metav1.Condition) bool {
	return t == mlv1.ConditionRunning && derive.ProgressReason(a.Reason) && derive.ProgressReason(b.Reason)
}

// goodputKey is what of status.goodput changes its meaning: whether it is there, its category and attempt.
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
