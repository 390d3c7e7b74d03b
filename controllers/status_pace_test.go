package controllers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

// TestEpochPace: the slowest epoch seen sets the default stall timeout; the first epoch an attempt shows
// counts from when its workers ran, so a script printing one line per 30-minute epoch is not called hung
// 10 minutes after its first line.
func TestEpochPace(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type read struct {
		epoch *float64
		at    time.Duration
	}
	cases := []struct {
		name  string
		reads []read
		want  time.Duration
	}{
		{name: "one line per 30-minute epoch", reads: []read{{epoch: ptr.To(1.0), at: 30 * time.Minute}}, want: 30 * time.Minute},
		{name: "an endpoint at epoch 0 from the start",
			reads: []read{
				{epoch: ptr.To(0.0), at: 5 * time.Second}, {epoch: ptr.To(1.0), at: 65 * time.Second},
				{epoch: ptr.To(2.0), at: 125 * time.Second},
			},
			want: time.Minute},
		{name: "epochs that slow down",
			reads: []read{
				{epoch: ptr.To(1.0), at: time.Minute}, {epoch: ptr.To(2.0), at: 2 * time.Minute}, {epoch: ptr.To(3.0), at: 5 * time.Minute},
			},
			want: 3 * time.Minute},
		{name: "no epoch", reads: []read{{epoch: nil, at: time.Hour}}, want: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p epochPace
			for _, r := range tc.reads {
				p.observe(0, derive.Sample{Epoch: r.epoch}, t0.Add(r.at), t0)
			}
			if diff := cmp.Diff(tc.want, p.slowest); diff != "" {
				t.Errorf("slowest (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStartingUp: an attempt that has not advanced is read every startupInterval, also while what was read
// had no training figure, for at most startupWatch after its workers ran; then at its scrape interval.
func TestStartingUp(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name       string
		since      time.Duration // since the workers all ran
		progressed bool
		reason     string // the ProgressReported condition's
		want       bool
	}{
		{name: "not advanced yet, source known", since: 10 * time.Minute, reason: derive.ReasonScraped, want: true},
		{name: "nothing read yet, just ran", since: 3 * time.Second, reason: derive.ReasonNoProgressSource, want: true},
		{name: "no figure for longer than the watch", since: startupWatch, reason: derive.ReasonNoProgressSource, want: false},
		{name: "advanced in the attempt", since: 5 * time.Second, progressed: true, reason: derive.ReasonScraped, want: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			running := metav1.NewTime(t0)
			st := mlv1.TrainingJobStatus{State: mlv1.StateRunning, Conditions: []metav1.Condition{
				{Type: mlv1.ConditionRunning, Status: metav1.ConditionTrue, LastTransitionTime: running},
				{Type: mlv1.ConditionProgressReported, Status: metav1.ConditionFalse, Reason: tc.reason, LastTransitionTime: running},
			}}
			if tc.progressed {
				st.LastProgressTime = ptr.To(metav1.NewTime(t0.Add(time.Second)))
			}
			if got := startingUp(&mlv1.TrainingJob{Status: st}, t0.Add(tc.since)); got != tc.want {
				t.Errorf("startingUp %v, want %v", got, tc.want)
			}
		})
	}
}
