package controllers

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/meta"
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

// headTimeout is how long the head of the waiting line keeps its turn: a job whose controller did not come
// back for it (deleted, or nothing left to write) gives it up.
const headTimeout = time.Second

// writeBudget is the one budget the four controllers' status writes share. It never blocks a reconcile:
//   - an urgent write (a state, an attempt, a condition's status or reason, goodput's category, and every
//     write of the checkpoint and tracking controllers) is made at once and charged, the budget going into
//     debt when it must, up to maxDebt;
//   - a routine write waits in one line, oldest first, and is made when it is at the head and a token is
//     free; after writing, its job joins the line's end again with its next update: round-robin over the
//     jobs, so that with N jobs updating, each job's status is written about every N/qps seconds.
//
// A deferred reconcile is told when to come back (its place in the line over the rate); it computes its
// status again then, so the line holds keys only. A nil budget (a reconciler built without Setup) or one
// with a rate of zero or less admits every write.
type writeBudget struct {
	clock   clock.PassiveClock
	limiter *rate.Limiter
	every   time.Duration // one token

	mu        sync.Mutex
	line      []string         // waiting keys, oldest first; a key whose place no longer matches has left
	waiting   map[string]place // each waiting key's place
	next      uint64           // the place the next key to join gets
	head      uint64           // the place of line[0]
	headSince time.Time        // when line[0] became the head, or a token became free for it
}

// place is a waiting key's place in the line, and when its reconcile was told to come back.
type place struct {
	seq uint64
	due time.Time
}

func newWriteBudget(qps float64, c clock.PassiveClock) *writeBudget {
	if qps <= 0 || math.IsInf(qps, 0) || math.IsNaN(qps) {
		return nil
	}
	burst := max(1, int(qps))
	return &writeBudget{clock: c, limiter: rate.NewLimiter(rate.Limit(qps), burst),
		every: time.Duration(float64(time.Second) / qps), waiting: map[string]place{}}
}

// admit says whether a write for key (a controller and a job) may be made now, and when not, how long to
// wait. A routine write that is admitted, and every urgent write, are charged.
func (b *writeBudget) admit(key string, routine bool) (bool, time.Duration) {
	if b == nil {
		return true, 0
	}
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if !routine {
		b.leaveLocked(key) // the write carries the waiting update too
		if b.limiter.TokensAt(now) > -maxDebt*float64(b.limiter.Limit()) {
			b.limiter.ReserveN(now, 1)
		}
		return true, 0
	}
	if _, ok := b.waiting[key]; !ok {
		if len(b.line) == 0 {
			b.headSince = now
		}
		b.waiting[key] = place{seq: b.next}
		b.next++
		b.line = append(b.line, key)
	}
	b.settleHeadLocked(now)
	if b.line[0] == key && b.limiter.AllowN(now, 1) {
		b.leaveLocked(key)
		return true, 0
	}
	p := b.waiting[key]
	wait := time.Duration(p.seq-b.head) * b.every
	if t := b.limiter.TokensAt(now); t < 1 {
		wait += time.Duration((1 - t) * float64(b.every))
	}
	wait = max(wait, b.every)
	p.due = now.Add(wait)
	b.waiting[key] = p
	return false, wait
}

// leave takes key out of the line: its controller has nothing left to write for it.
func (b *writeBudget) leave(key string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.leaveLocked(key)
}

func (b *writeBudget) leaveLocked(key string) {
	if _, ok := b.waiting[key]; !ok {
		return
	}
	delete(b.waiting, key)
	b.settleHeadLocked(b.clock.Now())
}

// settleHeadLocked drops from the line's front the keys that left, and the head that held its turn, with a
// token free, longer than headTimeout; it records how many keys wait.
func (b *writeBudget) settleHeadLocked(now time.Time) {
	if b.limiter.TokensAt(now) < 1 {
		b.headSince = now // the head could not have written: its time to claim its turn starts with a token
	}
	for len(b.line) > 0 {
		// line[i] joined at place head+i; its key has left, or joined again further on, when seq says otherwise
		p, ok := b.waiting[b.line[0]]
		ok = ok && p.seq == b.head
		if ok && now.Sub(maxTime(b.headSince, p.due)) <= headTimeout {
			break
		}
		if ok {
			delete(b.waiting, b.line[0]) // it did not come back for its turn
		}
		b.line[0] = ""
		b.line = b.line[1:]
		b.head++
		b.headSince = now
	}
	if len(b.line) == 0 {
		b.line = nil // let the array go
		b.head = b.next
	}
	metrics.StatusWritesWaiting.Set(float64(len(b.waiting)))
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// routineWrite reports whether manager's change of a job's status from old to st is routine: figures and
// details that may wait their turn, not a transition a person or another controller acts on.
func routineWrite(manager string, old, st mlv1.TrainingJobStatus) bool {
	switch manager {
	case statusController:
		return sameConditions(old, st, ownerOf(manager).Conditions)
	case jobController:
		if goodputCategory(old.Goodput) != goodputCategory(st.Goodput) {
			return false
		}
		old.Goodput, st.Goodput = nil, nil
		return !derive.Significant(old, st)
	}
	return false // the checkpoint and tracking controllers' writes are few, and RESUME_FROM waits on them
}

// sameConditions reports whether old and st have the same conditions of types, by status and reason.
func sameConditions(old, st mlv1.TrainingJobStatus, types []string) bool {
	for _, t := range types {
		a, b := meta.FindStatusCondition(old.Conditions, t), meta.FindStatusCondition(st.Conditions, t)
		if (a == nil) != (b == nil) || a != nil && (a.Status != b.Status || a.Reason != b.Reason) {
			return false
		}
	}
	return true
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
