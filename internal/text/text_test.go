package text

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    string
		n    int
		want string
	}{
		{name: "short", s: "abc", n: 5, want: "abc"},
		{name: "exact", s: "abc", n: 3, want: "abc"},
		{name: "ascii", s: "abcdef", n: 4, want: "abcd"},
		{name: "inside a character", s: "aé", n: 2, want: "a"},
		{name: "after a character", s: "aéb", n: 3, want: "aé"},
		{name: "zero", s: "abc", n: 0, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Cut(tc.s, tc.n)); diff != "" {
				t.Errorf("Cut(%q, %d) (-want +got):\n%s", tc.s, tc.n, diff)
			}
		})
	}
}

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    string
		n    int
		want string
	}{
		{name: "short", s: "abc", n: 5, want: "abc"},
		{name: "exact", s: "abcdef", n: 6, want: "abcdef"},
		{name: "cut and marked", s: "abcdefgh", n: 6, want: "abc…"},
		{name: "inside a character", s: "abéfgh", n: 6, want: "ab…"},
		{name: "spaces before the mark", s: "ab  \ncdefgh", n: 8, want: "ab…"},
		{name: "no room but the mark", s: "abcdef", n: 2, want: "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Clip(tc.s, tc.n)); diff != "" {
				t.Errorf("Clip(%q, %d) (-want +got):\n%s", tc.s, tc.n, diff)
			}
		})
	}
}
