// Package text holds the operator's string helpers shared by packages that do not otherwise depend on one
// another.
package text

import (
	"strings"
	"unicode/utf8"
)

// Cut returns at most n bytes of s, cut at a character's boundary: a message bounded for an API field, a
// report or a log stays valid UTF-8.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Clip returns at most n bytes of s, cut at a character's boundary and marked with "…" where it was cut
// (the spaces before the mark trimmed): a message a reader should know is longer.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = "…"
	return strings.TrimRight(Cut(s, max(0, n-len(more))), " \n") + more
}
