// Package pattern compiles the regular expressions a tenant writes (failurePolicy.rules[].onMessage,
// monitoring.progressPattern) within fixed bounds, and matches them against a bounded text: the operator
// runs them for every tenant, so none may cost more than a fixed amount of memory or CPU.
//
// RE2's parser accepts a repeat of a long literal ((?:aaa…a){1000}) whose program holds a million
// instructions; Compile refuses a pattern whose program would exceed MaxInstructions before compiling it.
// Compiled patterns are kept (at most CacheEntries), so a job's patterns compile once, not at each failure.
package pattern

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"sync"
)

const (
	// MaxBytes is the longest pattern Compile takes: the CRD's maxLength of both fields, 1,024 characters
	// of up to 4 bytes each.
	MaxBytes = 4096
	// MaxInstructions bounds the compiled program (about one instruction per literal character, class or
	// operator, a repeat's body once per repetition): matching costs at most this much per byte of text.
	MaxInstructions = 2048
	// MaxTextBytes is how much of a text Match searches: its end (a termination message, the last log
	// lines), where the cause is.
	MaxTextBytes = 4096
	// CacheEntries bounds the compiled patterns kept.
	CacheEntries = 256
)

// Compile returns the compiled RE2 pattern expr, or an error that says which bound it exceeds or why it
// does not compile; the error does not repeat the pattern. Results (errors too) are cached.
func Compile(expr string) (*regexp.Regexp, error) {
	if re, err, ok := cache.get(expr); ok {
		return re, err
	}
	re, err := compile(expr)
	cache.put(expr, re, err)
	return re, err
}

func compile(expr string) (*regexp.Regexp, error) {
	if len(expr) > MaxBytes {
		return nil, fmt.Errorf("is %d bytes, over the limit of %d", len(expr), MaxBytes)
	}
	tree, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("is not an RE2 regular expression: %w", err)
	}
	if n := size(tree); n > MaxInstructions {
		return nil, fmt.Errorf("compiles to more than %d instructions (repeat counts multiply what they repeat)", MaxInstructions)
	}
	return regexp.Compile(expr)
}

// size returns about how many instructions re compiles to, at most MaxInstructions+1 (it stops counting
// there, so a nest of repeats costs no more to count than to parse).
func size(re *syntax.Regexp) int {
	const over = MaxInstructions + 1
	mul := func(a, b int) int {
		if a != 0 && b > over/a {
			return over
		}
		return min(a*b, over)
	}
	add := func(a, b int) int { return min(a+b, over) }
	switch re.Op {
	case syntax.OpLiteral:
		return max(1, len(re.Rune))
	case syntax.OpCapture:
		return add(2, size(re.Sub[0]))
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		return add(1, size(re.Sub[0]))
	case syntax.OpRepeat:
		n := re.Max
		if n < 0 {
			n = re.Min + 1
		}
		return add(mul(max(n, 1), size(re.Sub[0])), n)
	case syntax.OpConcat, syntax.OpAlternate:
		n := len(re.Sub)
		for _, s := range re.Sub {
			if n = add(n, size(s)); n >= over {
				return over
			}
		}
		return n
	}
	return 1
}

// Match reports whether re matches the end of text: its last MaxTextBytes bytes.
func Match(re *regexp.Regexp, text string) bool {
	return re.MatchString(Tail(text))
}

// Tail returns the last MaxTextBytes bytes of s, from a character's start.
func Tail(s string) string {
	if len(s) <= MaxTextBytes {
		return s
	}
	i := len(s) - MaxTextBytes
	for i < len(s) && s[i]&0xC0 == 0x80 {
		i++
	}
	return s[i:]
}

// compiled is the cache of Compile: a bounded map, an arbitrary entry dropped when full.
type compiled struct {
	mu sync.Mutex
	m  map[string]result
}

type result struct {
	re  *regexp.Regexp
	err error
}

var cache = &compiled{m: map[string]result{}}

func (c *compiled) get(expr string) (*regexp.Regexp, error, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[expr]
	return r.re, r.err, ok
}

func (c *compiled) put(expr string, re *regexp.Regexp, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		if len(c.m) < CacheEntries {
			break
		}
		delete(c.m, k)
	}
	c.m[expr] = result{re, err}
}
