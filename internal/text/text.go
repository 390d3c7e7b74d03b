// Package text holds the operator's string helpers shared by packages that do not otherwise depend on one
// another.
package text

import (
	"strings"
	"unicode"
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

// Printable returns s without what a terminal would act on: ANSI escape sequences (CSI "\x1b[...m", OSC
// "\x1b]...\a" such as a window title or a link), other control characters but "\n" and "\t", and
// format characters (a right-to-left override that reorders what is shown, zero-width ones), and
// with invalid UTF-8 as U+FFFD. A program's output quoted in a status message is shown by kubectl and the
// Python client to people whose terminals must not take orders from it.
func Printable(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == 0x1b:
			i += escapeLen(s[i:])
			continue
		case r == utf8.RuneError && size == 1:
			b.WriteRune(utf8.RuneError)
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || unicode.Is(unicode.Cf, r): // Cf: bidi overrides, zero widths
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// escapeLen returns the length of the escape sequence at the start of s ("\x1b" and what it introduces).
func escapeLen(s string) int {
	if len(s) < 2 {
		return len(s)
	}
	switch s[1] {
	case '[': // CSI: parameters, then a final byte in 0x40-0x7e
		for i := 2; i < len(s); i++ {
			if s[i] >= 0x40 && s[i] <= 0x7e {
				return i + 1
			}
		}
		return len(s)
	case ']', 'P', '_', '^': // OSC, DCS, APC, PM: up to BEL or ESC \
		for i := 2; i < len(s); i++ {
			if s[i] == 0x07 {
				return i + 1
			}
			if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '\\' {
				return i + 2
			}
		}
		return len(s)
	}
	return 2
}
