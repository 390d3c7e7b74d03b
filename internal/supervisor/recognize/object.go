package recognize

import (
	"bytes"
	"math"
)

// object reads the top-level members of a JSON object, or of a Python dict's repr, one at a time and
// without allocating: nested objects and arrays, strings (escapes honoured) and literals (true, null, NaN,
// None...) are skipped as values.
type object struct {
	b []byte
	i int
	// python: strings may be quoted with "'" too, and a quoted number is a number (Hugging Face's
	// dictionaries print some values as strings).
	python bool
	// bad: the object is not well formed; closed: its "}" was read.
	bad, closed bool
	members     int
}

// member is one "key": value of an object.
type member struct {
	key []byte // between its quotes, escapes not decoded
	// escaped: the key holds a backslash, so key is not its text.
	escaped bool
	// num is the value's text when it is a number, nil otherwise.
	num []byte
	// nonFinite: the value is NaN, Infinity or -Infinity (Python's json.dumps prints them).
	nonFinite bool
}

// newObject starts reading the object at the start of b (after spaces).
func newObject(b []byte, python bool) object {
	b = trimLeftSpace(b)
	o := object{b: b, python: python}
	if len(b) == 0 || b[0] != '{' {
		o.bad = true
		return o
	}
	o.i = 1
	return o
}

// next returns the next member; false at the object's end or at what is not well formed (bad says which).
func (o *object) next() (member, bool) {
	if o.bad || o.closed {
		return member{}, false
	}
	o.space()
	if o.i < len(o.b) && o.b[o.i] == ',' && o.members > 0 {
		o.i++
		o.space()
	}
	if o.i < len(o.b) && o.b[o.i] == '}' {
		o.i++
		o.closed = true
		return member{}, false
	}
	var m member
	q := o.byteAt(o.i)
	if !o.quote(q) {
		return o.fail()
	}
	key, esc, ok := o.str(q)
	if !ok {
		return o.fail()
	}
	m.key, m.escaped = key, esc
	o.space()
	if o.byteAt(o.i) != ':' {
		return o.fail()
	}
	o.i++
	o.space()
	if !o.value(&m) {
		return o.fail()
	}
	o.space()
	if c := o.byteAt(o.i); c != ',' && c != '}' {
		return o.fail()
	}
	o.members++
	return m, true
}

// rest returns what follows the object's "}".
func (o *object) rest() []byte { return o.b[o.i:] }

func (o *object) fail() (member, bool) {
	o.bad = true
	return member{}, false
}

func (o *object) byteAt(i int) byte { return byteAt(o.b, i) }

func (o *object) space() {
	for o.i < len(o.b) && (o.b[o.i] == ' ' || o.b[o.i] == '\t') {
		o.i++
	}
}

func (o *object) quote(c byte) bool { return c == '"' || o.python && c == '\'' }

// str reads the string quoted by q at o.i and returns its text; esc says it holds a backslash.
func (o *object) str(q byte) (s []byte, esc, ok bool) {
	for j := o.i + 1; j < len(o.b); j++ {
		switch o.b[j] {
		case q:
			s, o.i = o.b[o.i+1:j], j+1
			return s, esc, true
		case '\\':
			esc = true
			j++
		}
	}
	return nil, false, false
}

// value reads the value at o.i; a number's text goes to m.num.
func (o *object) value(m *member) bool {
	c := o.byteAt(o.i)
	switch {
	case o.quote(c):
		s, _, ok := o.str(c)
		if ok && o.python {
			if _, n, isNum := number(s); isNum && n == len(s) {
				m.num = s
			}
		}
		return ok
	case c == '{' || c == '[':
		return o.nested()
	case c == '-' && isLetter(o.byteAt(o.i+1)): // -Infinity
		o.i++
		m.nonFinite = o.word()
		return true
	case c == '-' || isDigit(c):
		j := o.i
		for j < len(o.b) && (isDigit(o.b[j]) || o.b[j] == '.' || o.b[j] == '-' || o.b[j] == '+' || o.b[j]|0x20 == 'e') {
			j++
		}
		m.num, o.i = o.b[o.i:j], j
		return true
	case isLetter(c):
		m.nonFinite = o.word()
		return true
	}
	return false
}

// word skips a literal (true, null, NaN...) and reports whether it is a non-finite number.
func (o *object) word() (nonFinite bool) {
	j := o.i
	for o.i < len(o.b) && isLetter(o.b[o.i]) {
		o.i++
	}
	return nonFiniteWord(o.b[j:o.i])
}

// nested skips the object or array at o.i, and what it holds.
func (o *object) nested() bool {
	depth := 0
	for o.i < len(o.b) {
		switch c := o.b[o.i]; {
		case o.quote(c):
			if _, _, ok := o.str(c); !ok {
				return false
			}
			continue
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth--; depth == 0 {
				o.i++
				return true
			}
		}
		o.i++
	}
	return false
}

// memberValue returns a member's number when it has a finite one.
// A number too large for a float64 ("1e999") marks the member nonFinite.
func memberValue(m *member) (float64, bool) {
	if m.num == nil {
		return 0, false
	}
	v, n, ok := anyNumber(m.num)
	if ok && n == len(m.num) && math.IsInf(v, 0) {
		m.nonFinite = true
		return 0, false
	}
	return v, ok && n == len(m.num)
}

// json reads a line that is a JSON object, `{"epoch": 3, "loss": 0.2, "val_acc": 0.81}`: its top-level
// numbers (strings, booleans, nested values are skipped). It counts when it has an epoch or step key or a
// loss key ("loss", or a name ending in "_loss", "-loss", "/loss" or ".loss").
func (r *Recognizer) json(s []byte, rd *reading) string {
	o := newObject(s, false)
	counts := false
	for m, ok := o.next(); ok; m, ok = o.next() {
		v, isNum := memberValue(&m)
		if m.escaped || !isNum && !m.nonFinite {
			continue
		}
		var kb [32]byte
		k := lowerInto(kb[:0], m.key)
		if len(m.key) > len(kb) {
			k = nil // no key of a field is that long
		}
		if loggerKey(k) {
			continue
		}
		if !isNum { // NaN or Infinity: a loss's, or a named metric's, forgets the held one
			switch f, ok := jsonField(k); {
			case ok && f == fLoss:
				rd.diverged, counts = true, true
			case !ok:
				r.named.add(math.NaN(), 0, m.key)
			}
			continue
		}
		f, ok := jsonField(k)
		switch {
		case ok:
			counts = counts || f == fEpoch || f == fStep || f == fLoss
			rd.put(f, v)
		default:
			counts = counts || lossKey(m.key)
			r.named.add(v, 0, m.key)
		}
	}
	if o.bad || !o.closed || len(trimSpace(o.rest())) > 0 || !counts {
		return ""
	}
	r.jsonFraction(rd)
	return FormatJSON
}

// jsonFraction: epoch/epochs when the epochs are known (from the line or an earlier one), else step/steps
// likewise (a JSON line's step is the run's); a line with neither total leaves Fraction alone, so that a
// logger's evaluation lines (an epoch alone) do not drop its training lines' step fraction.
func (r *Recognizer) jsonFraction(rd *reading) {
	for _, c := range []struct {
		n, total field
		kind     counter
	}{{fEpoch, fEpochs, epochCounter}, {fStep, fSteps, stepCounter}} {
		n, ok := rd.get(c.n)
		if total, _ := r.known(rd, c.total); ok && total > 0 {
			rd.fraction(n, total, c.kind)
			return
		}
	}
}

// jsonField maps a JSON key (lower case) to its field: the plain format's metric keys, and counters and
// totals.
func jsonField(k []byte) (field, bool) {
	switch string(k) {
	case "epoch":
		return fEpoch, true
	case "epochs", "num_epochs", "total_epochs", "max_epochs", "n_epochs":
		return fEpochs, true
	case "step", "global_step":
		return fStep, true
	case "steps", "total_steps", "max_steps", "num_steps":
		return fSteps, true
	case "throughput", "samples_per_second", "train_samples_per_second", "samples_per_sec", "examples_per_second":
		return fThroughput, true
	}
	if k == nil {
		return 0, false
	}
	return baseMetric(k, nil)
}

// loggerKey reports whether a JSON key (lower case) is a logging library's own number (pino's level and
// time, python-json-logger's lineno...), not a metric.
func loggerKey(k []byte) bool {
	switch string(k) {
	case "level", "time", "ts", "timestamp", "pid", "tid", "thread", "process", "line", "lineno", "msecs", "created",
		"relativecreated", "v":
		return true
	}
	return false
}

// lossKey reports whether a key names a loss: "loss", or ending in "_loss", "-loss", "/loss" or ".loss", in
// any case.
func lossKey(k []byte) bool {
	const loss = "loss"
	n := len(k) - len(loss)
	if n < 0 || !foldAt(k, n, loss) {
		return false
	}
	return n == 0 || bytes.IndexByte([]byte("_-/."), k[n-1]) >= 0
}

// hfNames records a Hugging Face dictionary's other numbers ('grad_norm', 'eval_loss', 'eval_runtime'...)
// as named metrics.
func (r *Recognizer) hfNames(d []byte) {
	o := newObject(d, true)
	for m, ok := o.next(); ok; m, ok = o.next() {
		v, isNum := memberValue(&m)
		if !isNum && !m.nonFinite || m.escaped || string(m.key) == "epoch" {
			continue
		}
		if !isNum {
			v = math.NaN() // forgets a held name
		}
		if _, taken := metricField(m.key, nil, true); !taken {
			r.named.add(v, 0, m.key)
		}
	}
}

// otherPairs records the "key=value" and "key: value" pairs of b that no field takes as named metrics (a
// tqdm postfix's "avg_loss=0.34", Keras's "val_loss: 0.1"): a key is a word of key bytes after a space, a
// "," or the start, its value a number (a "%" may follow) that ends at a space, a "," or the end.
// Lightning's "v_num" is its logger's version, no metric.
func (r *Recognizer) otherPairs(b []byte) {
	for i := 0; i < len(b); {
		if !isLetter(b[i]) || i > 0 && b[i-1] != ' ' && b[i-1] != ',' {
			i++
			continue
		}
		j := i
		for j < len(b) && isKeyByte(b[j]) {
			j++
		}
		key := b[i:j]
		k := j
		switch {
		case k < len(b) && b[k] == '=':
			k++
		case k+1 < len(b) && b[k] == ':' && b[k+1] == ' ':
			k += 2
		default:
			i = j
			continue
		}
		v, n, ok := number(b[k:])
		end := k + n
		if ok && end < len(b) && b[end] == '%' {
			end++
		}
		if l := nonFiniteLen(b[k:]); !ok && l > 0 { // "val_loss: nan" forgets a held val_loss
			v, ok, end = math.NaN(), true, k+l
		}
		if !ok || end < len(b) && b[end] != ' ' && b[end] != ',' {
			i = j
			continue
		}
		if _, taken := metricField(key, nil, false); !taken && string(key) != "v_num" {
			r.named.add(v, 0, key)
		}
		i = end
	}
}
