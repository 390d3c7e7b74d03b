package controllers

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// budgetRun plays jobs that each want a routine write all the time against a budget of qps: a job asks,
// and when deferred comes back when it was told to (a job in gone never asks again). It returns the order of
// the writes made in the first d, and the most time a job went without a write.
func budgetRun(t *testing.T, qps float64, jobs int, d time.Duration, gone map[string]bool) ([]string, time.Duration) {
	t.Helper()
	clock := clocktesting.NewFakePassiveClock(t0.Time)
	b := newWriteBudget(qps, clock)
	back, last := map[string]time.Time{}, map[string]time.Time{}
	var order []string
	var gap time.Duration
	for now := t0.Time; now.Before(t0.Add(d)); now = now.Add(10 * time.Millisecond) {
		clock.SetTime(now)
		for i := range jobs {
			key := fmt.Sprintf("job-%d", i)
			if b, ok := back[key]; ok && now.Before(b) || gone[key] && ok {
				continue
			}
			ok, wait := b.admit(key, true)
			if !ok {
				back[key] = now.Add(wait)
				continue
			}
			order, back[key] = append(order, key), now
			if l, ok := last[key]; ok {
				gap = max(gap, now.Sub(l))
			}
			last[key] = now
		}
	}
	return order, gap
}

// TestRoutineWritesTakeTurns: routine writes of many jobs share the budget round-robin: no more than the
// budget (its burst and its rate) is written, in the jobs' order, and no job waits much longer than its
// turn (jobs/qps).
func TestRoutineWritesTakeTurns(t *testing.T) {
	for _, tc := range []struct {
		name   string
		qps    float64
		jobs   int
		maxGap time.Duration
	}{
		{name: "10 jobs, 50/s: each written every 200 ms", qps: 50, jobs: 10, maxGap: 300 * time.Millisecond},
		{name: "200 jobs, 20/s: each written every 10 s", qps: 20, jobs: 200, maxGap: 11 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			order, gap := budgetRun(t, tc.qps, tc.jobs, 30*time.Second, nil)
			if most := int(tc.qps) + int(tc.qps)*30; len(order) > most || len(order) < most*9/10 {
				t.Errorf("%d writes in 30 s, want the budget's %d (its burst and 30 s of its rate), or nearly", len(order), most)
			}
			if gap > tc.maxGap {
				t.Errorf("a job went %v without a write, want at most %v", gap, tc.maxGap)
			}
			// After the first round (the burst), the jobs take turns in the order they joined.
			for i := tc.jobs; i < len(order); i++ {
				if order[i] != order[i-tc.jobs] {
					t.Fatalf("write %d went to %s, want %s (round-robin): %v", i, order[i], order[i-tc.jobs], order[max(0, i-tc.jobs):i+1])
				}
			}
		})
	}
}

// TestATurnNotClaimedPasses: a job whose controller does not come back for its turn (deleted) costs that
// turn only; the jobs behind it are written on time.
func TestATurnNotClaimedPasses(t *testing.T) {
	order, gap := budgetRun(t, 1, 3, 20*time.Second, map[string]bool{"job-1": true})
	for _, k := range order {
		if k == "job-1" {
			t.Fatalf("job-1, deferred and gone, was written: %v", order)
		}
	}
	if len(order) < 18 || gap > 3100*time.Millisecond { // 3 s: the first round has the lost turn
		t.Errorf("%d writes in 20 s at 1/s, a job %v without one: the turn of a job gone held the others back: %v", len(order), gap, order)
	}
}

// TestUrgentWritesAreNotDeferred: a transition is written at once, also with the budget spent; it spends the
// budget into debt (at most maxDebt seconds of it), which routine writes then wait out; a routine write
// that became urgent leaves the line.
func TestUrgentWritesAreNotDeferred(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(t0.Time)
	b := newWriteBudget(10, clock)
	for i := range 1000 {
		if ok, _ := b.admit(fmt.Sprintf("urgent-%d", i), false); !ok {
			t.Fatalf("urgent write %d deferred", i)
		}
	}
	ok, wait := b.admit("routine", true)
	if ok || wait < 9*time.Second || wait > 12*time.Second {
		t.Errorf("routine write after 1,000 urgent ones at 10/s: admitted %t, wait %v; want a wait of about maxDebt (10 s)", ok, wait)
	}
	if ok, _ := b.admit("routine", false); !ok || len(b.turns) != 0 {
		t.Errorf("the same job's urgent write: admitted %t, %d waiting; want written at once and the line empty", ok, len(b.turns))
	}
	var none *writeBudget
	if ok, wait := none.admit("any", true); !ok || wait != 0 {
		t.Errorf("no budget: admitted %t after %v; want every write at once", ok, wait)
	}
}

// TestRoutineWrite: which changes are routine (wait their turn) and which are transitions (written at once).
func TestRoutineWrite(t *testing.T) {
	running := mlv1.TrainingJobStatus{State: mlv1.StateRunning, Attempt: 0, Progress: "10%", CurrentEpoch: 1,
		Conditions: []metav1.Condition{{Type: mlv1.ConditionRunning, Status: metav1.ConditionTrue, Reason: "AllWorkersRunning",
			LastTransitionTime: t0},
			{Type: mlv1.ConditionProgressReported, Status: metav1.ConditionTrue, Reason: "Reporting", Message: "epoch 1"}},
		Goodput: &mlv1.GoodputStatus{Category: "Productive", Percent: "50%"}}
	advanced := metav1.NewTime(t0.Add(time.Minute)) // after the Running condition's change
	change := func(f func(st *mlv1.TrainingJobStatus)) mlv1.TrainingJobStatus {
		st := *running.DeepCopy()
		f(&st)
		return st
	}
	for _, tc := range []struct {
		name    string
		manager string
		st      mlv1.TrainingJobStatus
		want    bool
	}{
		{name: "progress figures", manager: statusController, st: change(func(st *mlv1.TrainingJobStatus) {
			st.Progress, st.CurrentEpoch, st.Conditions[1].Message = "20%", 2, "epoch 2"
		}), want: true},
		{name: "a hang declared", manager: statusController, st: change(func(st *mlv1.TrainingJobStatus) {
			st.Conditions = append(st.Conditions, metav1.Condition{Type: mlv1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "NoProgress"})
		}), want: false},
		{name: "progress no longer read", manager: statusController, st: change(func(st *mlv1.TrainingJobStatus) {
			st.Conditions[1].Status, st.Conditions[1].Reason = metav1.ConditionFalse, "ScrapeFailed"
		}), want: false},
		{name: "the first advance of an attempt (the end of its startup)", manager: statusController,
			st: change(func(st *mlv1.TrainingJobStatus) { st.LastProgressTime = &advanced }), want: false},
		{name: "a condition's reason (a worker fault, ImagePullBackOff)", manager: jobController,
			st: change(func(st *mlv1.TrainingJobStatus) { st.Conditions[0].Reason = "ImagePullBackOff" }), want: false},
		{name: "a reason of normal progress (the workers finishing)", manager: jobController,
			st: change(func(st *mlv1.TrainingJobStatus) { st.Conditions[0].Reason = "WorkersFinishing" }), want: true},
		{name: "worker counts", manager: jobController, st: change(func(st *mlv1.TrainingJobStatus) { st.Workers.Active = 2 }), want: true},
		{name: "the goodput shown", manager: jobController, st: change(func(st *mlv1.TrainingJobStatus) { st.Goodput.Percent = "60%" }),
			want: true},
		{name: "goodput's category", manager: jobController, st: change(func(st *mlv1.TrainingJobStatus) { st.Goodput.Category = "Stalled" }),
			want: false},
		{name: "a state change", manager: jobController, st: change(func(st *mlv1.TrainingJobStatus) { st.State = mlv1.StateCompleted }),
			want: false},
		{name: "a new attempt", manager: jobController, st: change(func(st *mlv1.TrainingJobStatus) { st.Attempt = 1 }), want: false},
		{name: "a checkpoint", manager: checkpointController, st: change(func(st *mlv1.TrainingJobStatus) {
			st.Checkpoint = &mlv1.CheckpointStatus{Latest: "s3://b/ckpt/checkpoint-epoch-1"}
		}), want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, routineWrite(tc.manager, running, tc.st)); diff != "" {
				t.Errorf("routine (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLateTurnsAreNotWrittenAtOnce: turns claimed long after their time (their reconciles delayed) take
// the next free turns instead of all being written at the same moment.
func TestLateTurnsAreNotWrittenAtOnce(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(t0.Time)
	b := newWriteBudget(1, clock)
	for i := range 50 {
		b.admit(fmt.Sprintf("m/ns/j%d", i), true)
	}
	clock.SetTime(t0.Add(50 * time.Second))
	admitted := 0
	for i := range 50 {
		if ok, _ := b.admit(fmt.Sprintf("m/ns/j%d", i), true); ok {
			admitted++
		}
	}
	if admitted > 2 {
		t.Errorf("%d writes admitted at one instant at 1/s (burst 1), want at most 2 (a turn claimed within lateClaim, a free token)",
			admitted)
	}
}

// TestAGoneJobGivesUpItsTurns: the turns reserved for a job that is deleted are given back at once.
func TestAGoneJobGivesUpItsTurns(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(t0.Time)
	w := &statusWrites{budget: newWriteBudget(1, clock)}
	job := client.ObjectKey{Namespace: "ml", Name: "gone"}
	w.budget.admit("other", true) // spends the burst
	for _, m := range []string{statusController, jobController} {
		if ok, _ := w.budget.admit(budgetKey(m, job), true); ok {
			t.Fatalf("%s's routine write admitted with the budget spent", m)
		}
	}
	w.forget(job)
	if n := len(w.budget.turns); n != 0 {
		t.Errorf("%d turns held after the job was forgotten, want none", n)
	}
	var none *statusWrites
	none.forget(job) // a reconciler built without Setup
}
