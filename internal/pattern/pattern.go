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
	// MaxInstructions bounds the compiled program (about one instruction per literal character or
	// operator, a repeat's body once per repetition, a large character class one per 16 of its ranges):
	// matching costs at most this much per byte of text, and the program's memory is bounded with it.
	MaxInstructions = 1000
	// MaxTextBytes is how much of a text Match searches: its end (a termination message, the last log
	// lines), where the cause is.
	MaxTextBytes = 4096
	// CacheEntries bounds the compiled patterns kept.
	CacheEntries = 256
)

// Compile returns the compiled RE2 pattern expr, or an error that says which bound it exceeds or why it
// does not compile; the error does not repeat the pattern. Results (errors too) are cached.
func Compile(expr string) (*regexp.Regexp, error) {
	if r, ok := cache.lookup(expr); ok {
		return r.re, r.err
	}
	r := compile(expr)
	cache.put(expr, r)
	return r.re, r.err
}

func compile(expr string) result {
	re, insts, err := build(expr)
	return result{re: re, insts: insts, err: err}
}

func build(expr string) (*regexp.Regexp, int, error) {
	if len(expr) > MaxBytes {
		return nil, 0, fmt.Errorf("is %d bytes, over the limit of %d", len(expr), MaxBytes)
	}
	tree, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, 0, fmt.Errorf("is not an RE2 regular expression: %w", err)
	}
	n := size(tree)
	if n > MaxInstructions {
		return nil, 0, errTooLarge
	}
	// The estimate gated the size: the real program is small enough to build and count (nested stars of
	// empty-matching bodies take more instructions than the estimate says).
	prog, err := syntax.Compile(tree.Simplify())
	if err != nil {
		return nil, 0, fmt.Errorf("is not an RE2 regular expression: %w", err)
	}
	if len(prog.Inst) > MaxInstructions {
		return nil, 0, errTooLarge
	}
	re, err := regexp.Compile(expr)
	return re, max(n, len(prog.Inst)), err
}

var errTooLarge = fmt.Errorf("compiles to more than %d instructions (repeat counts multiply what they repeat)", MaxInstructions)

// Cost returns the work of matching the compiled pattern expr against a text of n bytes: its
// instructions times n (at most MaxTextBytes of it), what a caller that matches many adds up against a
// budget. A pattern not compiled counts as the largest.
func Cost(expr string, n int) int {
	insts := MaxInstructions
	if r, ok := cache.lookup(expr); ok && r.err == nil {
		insts = r.insts
	}
	return insts * min(n, MaxTextBytes)
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
	case syntax.OpCharClass:
		return 1 + len(re.Rune)/2/16 // its ranges: \pL has 659
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
	re    *regexp.Regexp
	insts int
	err   error
}

var cache = &compiled{m: map[string]result{}}

func (c *compiled) lookup(expr string) (result, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[expr]
	return r, ok
}

func (c *compiled) put(expr string, r result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		if len(c.m) < CacheEntries {
			break
		}
		delete(c.m, k)
	}
	c.m[expr] = r
}
