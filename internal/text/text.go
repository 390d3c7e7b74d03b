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

// Last returns at most the last n bytes of s, cut at a character's boundary (Cut's other end).
func Last(s string, n int) string {
	i := max(0, len(s)-n)
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
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
			i = EscapeEnd(s, i) + 1
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

// EscapeEnd returns the index of the last byte of the escape sequence starting at b[i] (ESC): a CSI
// ("\x1b[" parameters final), a string sequence (OSC "\x1b]", DCS "\x1bP", SOS, PM, APC: up to BEL or
// ESC \; an unterminated one ends where the next sequence starts), or ESC and one byte.
func EscapeEnd[T ~string | ~[]byte](b T, i int) int {
	if i+1 >= len(b) {
		return i
	}
	switch b[i+1] {
	case '[':
		j := i + 2
		for j < len(b) && b[j] >= 0x20 && b[j] <= 0x3f {
			j++
		}
		if j < len(b) && b[j] >= 0x40 && b[j] <= 0x7e {
			return j
		}
		return j - 1
	case ']', 'P', 'X', '^', '_':
		for j := i + 2; j < len(b); j++ {
			switch {
			case b[j] == 0x07:
				return j
			case b[j] == 0x1b && j+1 < len(b) && b[j+1] == '\\':
				return j + 1
			case b[j] == 0x1b:
				return j - 1
			}
		}
		return len(b) - 1
	}
	return i + 1
}
