package controllers

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	"github.com/trainingjob-operator/trainingjob-operator/internal/text"
)

// noteLimit is the most an event's note may hold (events.k8s.io/v1: 1 KiB): the API server refuses
// a longer event, and it is lost.
const noteLimit = 1024

// limitedRecorder records events with notes cut to noteLimit, keeping their start. Failure and hang
// notes carry log lines and can run longer.
type limitedRecorder struct{ events.EventRecorder }

// Eventf implements events.EventRecorder.
func (r limitedRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, "%s", limitNote(fmt.Sprintf(note, args...)))
}

// limitNote cuts s to noteLimit bytes, at a character's boundary, marking the cut with "…".
func limitNote(s string) string { return text.Clip(s, noteLimit) }
