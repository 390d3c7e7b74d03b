package controllers

import (
	"testing"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// TestEventful: which changes of state are told in an event: the end of a run, a suspension and a
// resumption; not the steps of a healthy start.
func TestEventful(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to mlv1.State
		want     bool
	}{
		{name: "new to Initializing", from: "", to: mlv1.StateInitializing, want: false},
		{name: "new to Pending", from: "", to: mlv1.StatePending, want: false},
		{name: "Pending to Initializing", from: mlv1.StatePending, to: mlv1.StateInitializing, want: false},
		{name: "Initializing to Running", from: mlv1.StateInitializing, to: mlv1.StateRunning, want: false},
		{name: "Running to Initializing (a restart: its own Warning event)", from: mlv1.StateRunning, to: mlv1.StateInitializing,
			want: false},
		{name: "Running to Completed", from: mlv1.StateRunning, to: mlv1.StateCompleted, want: true},
		{name: "Running to Failed", from: mlv1.StateRunning, to: mlv1.StateFailed, want: true},
		{name: "new to Failed (refused at creation)", from: "", to: mlv1.StateFailed, want: true},
		{name: "Running to Suspended", from: mlv1.StateRunning, to: mlv1.StateSuspended, want: true},
		{name: "Suspended to Pending (resumed)", from: mlv1.StateSuspended, to: mlv1.StatePending, want: true},
	} {
		if got := eventful(tc.from, tc.to); got != tc.want {
			t.Errorf("%s: eventful = %t, want %t", tc.name, got, tc.want)
		}
	}
}
