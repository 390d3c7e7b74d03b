package controllers

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestLimitNote: an event's note fits the API server's 1 KiB, keeps its start, and stays valid UTF-8.
func TestLimitNote(t *testing.T) {
	long := "Running -> Failed: NonRetryableExitCode: rank 0 exited with code 1 [hint]: " + strings.Repeat("é", 600)
	cases := []struct {
		name, note string
		same       bool
	}{
		{name: "short", note: "Pending -> Initializing: 0 of 2 workers running", same: true},
		{name: "exactly the limit", note: strings.Repeat("a", noteLimit), same: true},
		{name: "a failure's long log lines", note: long, same: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := limitNote(tc.note)
			if len(got) > noteLimit || !utf8.ValidString(got) || (got == tc.note) != tc.same ||
				!strings.HasPrefix(tc.note, strings.TrimSuffix(got, "…")) {
				t.Errorf("limitNote(%d bytes) = %d bytes %q", len(tc.note), len(got), got)
			}
		})
	}
}
