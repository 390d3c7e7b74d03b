package controllers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestGoodputDue: when the accounting is put into the status.
func TestGoodputDue(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	acc := func(category string, at time.Duration, productive float64) *mlv1.GoodputStatus {
		return &mlv1.GoodputStatus{Category: category, AccountedTime: &metav1.MicroTime{Time: t0.Add(at)}, ProductiveSeconds: productive}
	}
	running := mlv1.TrainingJobStatus{State: mlv1.StateRunning, Goodput: acc(mlv1.GoodputProductive, 0, 10)}
	progressed := *running.DeepCopy()
	progressed.CurrentEpoch = 3
	for _, tc := range []struct {
		name     string
		old, cur mlv1.TrainingJobStatus
		next     *mlv1.GoodputStatus
		want     bool
	}{
		{name: "the first accounting", old: mlv1.TrainingJobStatus{}, cur: mlv1.TrainingJobStatus{},
			next: acc(mlv1.BadputScheduling, time.Second, 0), want: true},
		{name: "a new category", old: running, cur: running,
			next: acc(mlv1.BadputHang, 5*time.Second, 5), want: true},
		{name: "the same category, nothing else changed", old: running, cur: running,
			next: acc(mlv1.GoodputProductive, 5*time.Second, 15), want: false},
		{name: "the same category, the status is written anyway", old: running, cur: progressed,
			next: acc(mlv1.GoodputProductive, 5*time.Second, 15), want: true},
		{name: "an hour passed, nothing else changed: no write on a timer", old: running, cur: running,
			next: acc(mlv1.GoodputProductive, time.Hour, 3610), want: false},
		{name: "nothing to account (a job over before it was seen)", old: running, cur: running,
			next: nil, want: false},
	} {
		if got := goodputDue(tc.old, tc.cur, tc.next); got != tc.want {
			t.Errorf("%s: due = %t, want %t", tc.name, got, tc.want)
		}
	}
}

// TestGoodputOfAHangActedOn: the StatusController declares a hang (Stalled) and the JobController restarts
// the gang in the reconcile that sees it: the time since rank 0's last progress is hang, accounted in the
// category the status was read in before the restart's.
func TestGoodputOfAHangActedOn(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s int) metav1.Time { return metav1.NewTime(t0.Add(time.Duration(s) * time.Second)) }
	tj := tjtest.NewTJ("ml", "hung").Obj()
	tj.CreationTimestamp = at(0)
	running := metav1.Condition{Type: mlv1.ConditionRunning, Status: metav1.ConditionTrue, Reason: "AllWorkersRunning",
		LastTransitionTime: at(10)}
	stalled := metav1.Condition{Type: mlv1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "NoProgress",
		LastTransitionTime: at(60)}
	old := mlv1.TrainingJobStatus{State: mlv1.StateRunning, Workers: mlv1.WorkerCounts{Active: 2}, LastProgressTime: ptr.To(at(40)),
		Conditions: []metav1.Condition{running, stalled},
		Goodput: &mlv1.GoodputStatus{Category: mlv1.GoodputProductive, AccountedTime: &metav1.MicroTime{Time: at(30).Time},
			ProductiveSeconds: 18, BadputSeconds: mlv1.BadputSeconds{Scheduling: 10, Startup: 2}}}
	restarted := *old.DeepCopy()
	restarted.State, restarted.Attempt, restarted.Conditions = mlv1.StateInitializing, 1, []metav1.Condition{
		{Type: mlv1.ConditionRunning, Status: metav1.ConditionFalse, Reason: "Restarting", LastTransitionTime: at(61)}}
	r := &JobReconciler{}
	g, moved := r.goodput(tj, old, restarted, at(61).Time)
	if !moved || g.Category != mlv1.BadputRestart || g.Attempt != 1 {
		t.Fatalf("goodput %+v (moved %t), want the restart's category and attempt, moved", g, moved)
	}
	// Productive until the last progress (40 s), hang from then until the restart (61 s).
	if got, want := []float64{g.ProductiveSeconds + g.BadputSeconds.LostWork, g.BadputSeconds.Hang}, []float64{28, 21}; !cmp.Equal(got, want) {
		t.Errorf("productive (lost included), hang = %v, want %v: %+v", got, want, g)
	}
}

// TestGoodputPercentShownIsWritten: a running job whose percent moved with time alone (the GOODPUT
// column) is written when the JobController looks again; one whose percent did not move is not.
func TestGoodputPercentShownIsWritten(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tj := tjtest.NewTJ("ml", "fit").Obj()
	tj.CreationTimestamp = metav1.NewTime(t0)
	running := metav1.Condition{Type: mlv1.ConditionRunning, Status: metav1.ConditionTrue, Reason: "AllWorkersRunning",
		LastTransitionTime: metav1.NewTime(at(2))}
	st := mlv1.TrainingJobStatus{State: mlv1.StateRunning, Workers: mlv1.WorkerCounts{Active: 2},
		LastProgressTime: ptr.To(metav1.NewTime(at(3))), Conditions: []metav1.Condition{running},
		Goodput: &mlv1.GoodputStatus{Category: mlv1.GoodputProductive, AccountedTime: &metav1.MicroTime{Time: at(4)},
			ProductiveSeconds: 1, BadputSeconds: mlv1.BadputSeconds{Scheduling: 2, Startup: 1}, Percent: "25%"}}
	for _, tc := range []struct {
		name      string
		now       time.Time
		wantMoved bool
	}{
		{name: "30 s on: 25% is 91% now", now: at(34), wantMoved: true},
		{name: "a moment on: still 25%", now: at(4).Add(10 * time.Millisecond), wantMoved: false},
	} {
		g, moved := (&JobReconciler{}).goodput(tj, st, st, tc.now)
		if moved != tc.wantMoved {
			t.Errorf("%s: moved %t (percent %q), want %t", tc.name, moved, g.Percent, tc.wantMoved)
		}
	}
}
