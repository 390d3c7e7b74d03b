package text

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCutAndClip: both cut at a character's boundary; Clip also marks the cut, within the same bound.
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
