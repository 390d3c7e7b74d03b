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
		now      time.Duration
		want     bool
	}{
		{"the first accounting", mlv1.TrainingJobStatus{}, mlv1.TrainingJobStatus{}, acc(mlv1.BadputScheduling, time.Second, 0), time.Second, true},
		{"a new category", running, running, acc(mlv1.BadputHang, 5*time.Second, 5), 5 * time.Second, true},
		{"the same category, nothing else changed", running, running, acc(mlv1.GoodputProductive, 5*time.Second, 15), 5 * time.Second, false},
		{"the same category, the status is written anyway", running, progressed, acc(mlv1.GoodputProductive, 5*time.Second, 15), 5 * time.Second, true},
		{"the interval passed", running, running, acc(mlv1.GoodputProductive, 30*time.Second, 40), 30 * time.Second, true},
		{"nothing to account (a job over before it was seen)", running, running, nil, time.Minute, false},
	} {
		if got := goodputDue(tc.old, tc.cur, tc.next, t0.Add(tc.now), 30*time.Second); got != tc.want {
			t.Errorf("%s: due = %t, want %t", tc.name, got, tc.want)
		}
	}
}
