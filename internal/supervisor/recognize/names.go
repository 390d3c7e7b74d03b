package recognize

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// MaxNamedMetrics is how many names the Recognizer holds: the first ones seen; later new names are
	// ignored.
	MaxNamedMetrics = 16
	// MaxMetricNameBytes bounds a named metric's name; a longer name is ignored, not cut, so that two names
	// cannot become one.
	MaxMetricNameBytes = 64
)

// NamedMetric is a figure a recognised line printed under its own name, such as XGBoost's "eval-logloss".
type NamedMetric struct {
	Name  string
	Value float64
}

// pendingName is a named metric of the line being read, held until the line is recognised.
type pendingName struct {
	buf  [MaxMetricNameBytes]byte
	n    uint8
	held int8 // its index in the Recognizer's held names, -1 for a new name
	v    float64
}

func (p *pendingName) name() []byte { return p.buf[:p.n] }

// namedSet is the Recognizer's named metrics: the held ones, and those of the line being read.
type namedSet struct {
	held    [MaxNamedMetrics]NamedMetric
	nHeld   int
	pending [MaxNamedMetrics]pendingName
	nPend   int
	nNew    int // pending names not held yet
}

// reset forgets the line's pending names (a parser that gives up leaves none for the next one).
func (s *namedSet) reset() { s.nPend, s.nNew = 0, 0 }

// add records a named metric of the line, its name the concatenation of parts with sep between them
// (LightGBM's "valid_0" and "binary_logloss" make "valid_0-binary_logloss"); spaces in a part become "_".
// A value that is not finite (a diverged "val_loss: nan") forgets a held name and is ignored for a new one.
// A name that is not valid and a new name once MaxNamedMetrics are held or pending are ignored. It
// allocates nothing.
func (s *namedSet) add(v float64, sep byte, parts ...[]byte) {
	var p pendingName
	n := 0
	for i, part := range parts {
		if i > 0 {
			if n == len(p.buf) {
				return
			}
			p.buf[n], n = sep, n+1
		}
		if n+len(part) > len(p.buf) {
			return
		}
		for _, c := range part {
			if c == ' ' {
				c = '_'
			}
			p.buf[n], n = c, n+1
		}
	}
	p.n = uint8(n)
	name := p.name()
	if !validName(name) {
		return
	}
	for i := range s.nPend {
		if string(s.pending[i].name()) == string(name) {
			s.pending[i].v = v
			return
		}
	}
	p.held, p.v = -1, v
	for i := range s.nHeld {
		if s.held[i].Name == string(name) {
			p.held = int8(i)
			break
		}
	}
	if p.held < 0 {
		if !finite(v) || s.nHeld+s.nNew >= MaxNamedMetrics {
			return
		}
		s.nNew++
	}
	s.pending[s.nPend] = p
	s.nPend++
}

// apply records the recognised line's names: a held name takes its new value (one not finite forgets it),
// a new one is held.
func (s *namedSet) apply() {
	for i := range s.nPend {
		p := &s.pending[i]
		if p.held >= 0 {
			s.held[p.held].Value = p.v
			continue
		}
		s.held[s.nHeld] = NamedMetric{Name: string(p.name()), Value: p.v}
		s.nHeld++
	}
	s.reset()
	kept := 0
	for _, m := range s.held[:s.nHeld] {
		if finite(m.Value) {
			s.held[kept], kept = m, kept+1
		}
	}
	s.nHeld = kept
}

// metrics returns the held names sorted by name; nil for none.
func (s *namedSet) metrics() []NamedMetric {
	if s.nHeld == 0 {
		return nil
	}
	m := slices.Clone(s.held[:s.nHeld])
	slices.SortFunc(m, func(a, b NamedMetric) int { return strings.Compare(a.Name, b.Name) })
	return m
}

// validName reports whether a named metric's name may be held: 1 to MaxMetricNameBytes bytes of valid
// UTF-8, printable characters (unicode.IsPrint) other than '"' and '\'.
func validName(b []byte) bool {
	if len(b) == 0 || len(b) > MaxMetricNameBytes {
		return false
	}
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f || c == '"' || c == '\\' {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return false
		}
		i += n
	}
	return true
}
