package text

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCutAndClip: Cut, Last and Clip cut at a character's boundary; Clip also marks the cut, within the same bound.
func TestCutAndClip(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  func(string, int) string
		s    string
		n    int
		want string
	}{
		{name: "Cut short", cut: Cut, s: "abc", n: 5, want: "abc"},
		{name: "Cut exact", cut: Cut, s: "abc", n: 3, want: "abc"},
		{name: "Cut ascii", cut: Cut, s: "abcdef", n: 4, want: "abcd"},
		{name: "Cut inside a character", cut: Cut, s: "aé", n: 2, want: "a"},
		{name: "Cut after a character", cut: Cut, s: "aéb", n: 3, want: "aé"},
		{name: "Cut zero", cut: Cut, s: "abc", n: 0, want: ""},
		{name: "Last short", cut: Last, s: "abc", n: 5, want: "abc"},
		{name: "Last ascii", cut: Last, s: "abcdef", n: 4, want: "cdef"},
		{name: "Last inside a character", cut: Last, s: "aéb", n: 2, want: "b"},
		{name: "Last after a character", cut: Last, s: "aéb", n: 3, want: "éb"},
		{name: "Clip short", cut: Clip, s: "abc", n: 5, want: "abc"},
		{name: "Clip exact", cut: Clip, s: "abcdef", n: 6, want: "abcdef"},
		{name: "Clip cut and marked", cut: Clip, s: "abcdefgh", n: 6, want: "abc…"},
		{name: "Clip inside a character", cut: Clip, s: "abéfgh", n: 6, want: "ab…"},
		{name: "Clip spaces before the mark", cut: Clip, s: "ab  \ncdefgh", n: 8, want: "ab…"},
		{name: "Clip no room but the mark", cut: Clip, s: "abcdef", n: 2, want: "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.cut(tc.s, tc.n)); diff != "" {
				t.Errorf("(%q, %d) (-want +got):\n%s", tc.s, tc.n, diff)
			}
		})
	}
}

// TestPrintable: what a terminal acts on is dropped, what a reader reads stays.
func TestPrintable(t *testing.T) {
	for _, tc := range []struct {
		name, s, want string
	}{
		{name: "plain", s: "Traceback:\n\tValueError: é", want: "Traceback:\n\tValueError: é"},
		{name: "colours", s: "\x1b[1;31mERROR\x1b[0m done", want: "ERROR done"},
		{name: "window title and link", s: "\x1b]0;pwned\x07a\x1b]8;;http://evil.example/\x1b\\b", want: "ab"},
		{name: "clear screen, hidden text", s: "x\x1b[2J\x1b[8my", want: "xy"},
		{name: "carriage return, backspace, bell, C1", s: "a\rb\bc\x07d\u009be", want: "abcde"},
		{name: "bidi override, zero width", s: "a\u202eb\u200bc\u2066d", want: "abcd"},
		{name: "invalid UTF-8", s: "a\xffb", want: "a\ufffdb"},
		{name: "an escape at the end", s: "a\x1b", want: "a"},
		{name: "DCS and APC strings", s: "a\x1bPq#0;2;0\x1b\\b\x1b_hidden\x07c", want: "abc"},
		{name: "an unterminated OSC ends at the next escape", s: "a\x1b]0;t\x1b[1mb", want: "ab"},
		{name: "an unterminated CSI", s: "a\x1b[12", want: "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Printable(tc.s)); diff != "" {
				t.Errorf("Printable(%q) (-want +got):\n%s", tc.s, diff)
			}
		})
	}
}
