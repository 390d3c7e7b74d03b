package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
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
