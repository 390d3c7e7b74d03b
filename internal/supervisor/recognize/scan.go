package recognize

import (
	"bytes"
	"math"
	"strconv"
	"strings"

	"github.com/trainingjob-operator/trainingjob-operator/internal/text"
)

// cand is the set of formats whose bytes a line contains: the cheap pre-filter before any parsing.
type cand uint16

const (
	candBar      cand = 1 << iota // tqdm's bar
	candRich                      // Lightning's rich bar
	candKeras                     // Keras's step line
	candHF                        // Hugging Face's log dictionary
	candBanner                    // Hugging Face's banner
	candCounter                   // a Keras "Epoch N/M" or a plain line
	candRound                     // XGBoost's or LightGBM's "[12]\t..."
	candCatBoost                  // CatBoost's "0:\tlearn: ..."
	candSklearn                   // scikit-learn's "Iteration 4, loss = ...", "-- Epoch 3", "Norm: ..."
	candJSON                      // a JSON object
)

var (
	pctBar     = []byte("%|")
	heavyLine  = []byte("━")
	dashSep    = []byte(" - ")
	spaceBrack = []byte(" [")
	dictStart  = []byte("{'")
)

// sniffBytes are the bytes sniff looks at; it skips the others with one table lookup.
var sniffBytes = [256]bool{'%': true, '[': true, 0xe2: true, '-': true, '/': true, '{': true, '=': true, 'p': true,
	'P': true, 't': true, 'T': true, '\t': true, 'A': true}

var (
	sgdEpoch   = []byte("-- Epoch ")
	sgdAvgLoss = []byte("Avg. loss: ")
)

// sniff says which formats a line may be, in one pass over its bytes: tqdm's "%|" (or a total-less
// bar's " [" and a rate's "/s" or "s/"), "━", Keras's " - " and "/", "{'", " = ", "epoch" or "step"; a
// boosting round's "[12]" and a space or tab, CatBoost's "0:" and a tab, scikit-learn's "-- Epoch " and
// "Avg. loss: ", a JSON object's "{\"". It reads the line as printed: CatBoost's tab is a space once
// cleaned.
func sniff(b []byte) cand {
	var c cand
	var bracket, rate, dash, slash bool
	for i, x := range b {
		if !sniffBytes[x] {
			continue
		}
		next, prev := byteAt(b, i+1), byteAt(b, i-1)
		switch x {
		case '%':
			c |= cond(next == '|', candBar)
		case '[':
			bracket = bracket || prev == ' '
			c |= cond(isDigit(next) && roundAt(b, i+1), candRound)
		case '\t':
			c |= cond(prev == ':' && isDigit(byteAt(b, i-2)), candCatBoost)
		case 'A':
			c |= cond(next == 'v' && bytes.HasPrefix(b[i:], sgdAvgLoss), candSklearn)
		case 0xe2:
			c |= cond(bytes.HasPrefix(b[i:], heavyLine), candRich|candKeras)
		case '-':
			dash = dash || prev == ' ' && next == ' '
			c |= cond(next == '-' && bytes.HasPrefix(b[i:], sgdEpoch), candSklearn)
		case '/':
			slash, rate = true, rate || prev == 's' || next == 's'
		case '{':
			c |= cond(next == '\'', candHF) | cond(next == '"', candJSON)
		case '=':
			c |= cond(prev == ' ' && next == ' ', candBanner|candSklearn)
		case 'p', 'P':
			c |= cond(foldAt(b, i+1, "och"), candCounter)
		case 't', 'T':
			c |= cond(lower(prev) == 's' && foldAt(b, i+1, "ep"), candCounter)
		}
	}
	return c | cond(bracket && rate, candBar) | cond(dash && slash, candKeras)
}

// roundAt reports whether b holds, at i, up to 9 digits, "]" and a tab or a space: a boosting round.
func roundAt(b []byte, i int) bool {
	n := digits(b[i:min(len(b), i+10)])
	return n > 0 && n < 10 && byteAt(b, i+n) == ']' && (byteAt(b, i+n+1) == '\t' || byteAt(b, i+n+1) == ' ')
}

func cond(ok bool, c cand) cand {
	if ok {
		return c
	}
	return 0
}

// byteAt returns b[i], or 0 outside b.
func byteAt(b []byte, i int) byte {
	if i < 0 || i >= len(b) {
		return 0
	}
	return b[i]
}

// foldAt reports whether b holds kw (lower-case ASCII) at i, in any case.
func foldAt(b []byte, i int, kw string) bool {
	if i+len(kw) > len(b) {
		return false
	}
	for j := range len(kw) {
		if lower(b[i+j]) != kw[j] {
			return false
		}
	}
	return true
}

// clean drops escape sequences and control bytes (a tab becomes a space), copying the line into r.buf
// only when it has some, then cuts torchrun's "[default0]:" or "[rank0]:" prefixes.
func (r *Recognizer) clean(raw []byte) []byte {
	i := 0
	for i < len(raw) && raw[i] >= 0x20 && raw[i] != 0x7f {
		i++
	}
	if i == len(raw) {
		return cutPrefix(raw)
	}
	b := append(r.buf[:0], raw[:i]...)
	for ; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == 0x1b:
			i = text.EscapeEnd(raw, i)
		case c == '\t':
			b = append(b, ' ')
		case c >= 0x20 && c != 0x7f:
			b = append(b, c)
		}
	}
	r.buf = b
	return cutPrefix(b)
}

// cutPrefix drops up to three leading "[name0]:" tags (letters, digits, "_" or "-" in the brackets).
func cutPrefix(b []byte) []byte {
	for range 3 {
		if len(b) < 3 || b[0] != '[' {
			return b
		}
		j := 1
		for j < len(b) && j < 32 && (isAlnum(b[j]) || b[j] == '_' || b[j] == '-') {
			j++
		}
		if j == 1 || j+1 >= len(b) || b[j] != ']' || b[j+1] != ':' {
			return b
		}
		b = b[j+2:]
	}
	return b
}

func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func isAlnum(c byte) bool  { return isDigit(c) || isLetter(c) }

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func trimLeftSpace(b []byte) []byte {
	for len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	return b
}

func trimSpace(b []byte) []byte {
	b = trimLeftSpace(b)
	for len(b) > 0 && b[len(b)-1] == ' ' {
		b = b[:len(b)-1]
	}
	return b
}

func digits(b []byte) int {
	n := 0
	for n < len(b) && isDigit(b[n]) {
		n++
	}
	return n
}

// maxNumberBytes bounds a number's text; longer runs of digits are not progress.
const maxNumberBytes = 40

// number reads a decimal number at the start of b ([+-]digits[.digits][e[+-]digits]) and its length;
// ok is false when there is none or it is not finite.
func number(b []byte) (v float64, n int, ok bool) {
	v, n, ok = anyNumber(b)
	if !ok || math.IsInf(v, 0) {
		return 0, 0, false
	}
	return v, n, true
}

// anyNumber is number, with a number too large for a float64 ("1e999") read as an infinity.
func anyNumber(b []byte) (v float64, n int, ok bool) {
	i := 0
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		i++
	}
	d := digits(b[i:])
	i += d
	if i < len(b) && b[i] == '.' {
		f := digits(b[i+1:])
		if d+f > 0 {
			i, d = i+1+f, d+f
		}
	}
	if d == 0 || i > maxNumberBytes {
		return 0, 0, false
	}
	if i < len(b) && b[i]|0x20 == 'e' {
		j := i + 1
		if j < len(b) && (b[j] == '-' || b[j] == '+') {
			j++
		}
		if e := digits(b[j:]); e > 0 && j+e <= maxNumberBytes {
			i = j + e
		}
	}
	v, err := strconv.ParseFloat(string(b[:i]), 64)
	if err != nil && !math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, 0, false
	}
	return v, i, true
}

// integer reads up to 15 digits at the start of b.
func integer(b []byte) (v float64, n int, ok bool) {
	n = digits(b)
	if n == 0 || n > 15 {
		return 0, 0, false
	}
	v, err := strconv.ParseFloat(string(b[:n]), 64)
	return v, n, err == nil
}

// siNumber reads a number with tqdm's unit_scale suffix (k, M, G, T, P, E, Z, Y: powers of 1000).
func siNumber(b []byte) (v float64, n int, ok bool) {
	if v, n, ok = number(b); !ok || n >= len(b) {
		return v, n, ok
	}
	if i := strings.IndexByte("kMGTPEZY", b[n]); i >= 0 && (b[n] != 'E' || n+1 >= len(b) || !isDigit(b[n+1])) {
		v, n = v*math.Pow(1000, float64(i+1)), n+1
	}
	return v, n, !math.IsInf(v, 0)
}

// count is an epoch or step counter found in a line: "epoch 3", "Epoch [3/10]", "step 100 of 600".
type count struct {
	n, total     float64
	hasTotal, ok bool
}

// findCount finds the first word kw (lower case, matched in any case) that is followed by an integer.
func findCount(b []byte, kw string) count {
	for i := 0; i+len(kw) <= len(b); i++ {
		j := indexFold(b[i:], kw)
		if j < 0 {
			break
		}
		i += j
		if c := countAt(b, i, len(kw)); c.ok {
			return c
		}
	}
	return count{}
}

// indexFold returns the index of kw (lower-case ASCII) in b, ignoring case, or -1.
func indexFold(b []byte, kw string) int {
	for i := 0; i+len(kw) <= len(b); i++ {
		if lower(b[i]) != kw[0] {
			continue
		}
		j := 1
		for j < len(kw) && lower(b[i+j]) == kw[j] {
			j++
		}
		if j == len(kw) {
			return i
		}
	}
	return -1
}

// countAt reads the counter whose keyword (k bytes) starts at b[i]: a whole word, separators, an
// integer that ends there, and an optional "/M" or "of M".
func countAt(b []byte, i, k int) count {
	j := i + k
	if i > 0 && isAlnum(b[i-1]) || j < len(b) && (isAlnum(b[j]) || b[j] == '_') {
		return count{}
	}
	for s := 0; s < 4 && j < len(b) && strings.IndexByte(" :=[(#", b[j]) >= 0; s++ {
		j++
	}
	n, l, ok := integer(b[j:])
	if !ok || !intEnds(b, j+l) {
		return count{}
	}
	c := count{n: n, ok: true}
	c.total, c.hasTotal = totalAt(b, j+l)
	return c
}

// intEnds reports whether an integer ending at b[j] is whole (not "3.5", "3rd" or "3_000").
func intEnds(b []byte, j int) bool {
	if j >= len(b) {
		return true
	}
	if b[j] == '.' && j+1 < len(b) && isDigit(b[j+1]) {
		return false
	}
	return !isLetter(b[j]) && b[j] != '_'
}

// totalAt reads "/M", " / M" or " of M" at b[j].
func totalAt(b []byte, j int) (float64, bool) {
	b = trimLeftSpace(b[j:])
	switch {
	case len(b) > 0 && b[0] == '/':
		b = trimLeftSpace(b[1:])
	case len(b) > 3 && lower(b[0]) == 'o' && lower(b[1]) == 'f' && b[2] == ' ':
		b = trimLeftSpace(b[3:])
	default:
		return 0, false
	}
	n, l, ok := integer(b)
	return n, ok && intEnds(b, l)
}

// scanMetrics reads "key: value", "key=value" and "key value" pairs anywhere in b; hf adds Hugging Face's
// eval_accuracy and train_samples_per_second. It returns how many fields it set.
func scanMetrics(b []byte, rd *reading, hf bool) int {
	n := 0
	var prev []byte
	for i := 0; i < len(b); {
		if !isLetter(b[i]) || i > 0 && isKeyByte(b[i-1]) {
			i++
			continue
		}
		j := i
		for j < len(b) && isKeyByte(b[j]) {
			j++
		}
		key := b[i:j]
		if f, ok := metricField(key, prev, hf); ok {
			if v, k, ok := valueAfter(b[j:]); ok && rd.put(f, v) {
				n, j = n+1, j+k
			} else if f == fLoss && nonFiniteLen(b[j:]) > 0 {
				rd.diverged = true
			}
		}
		prev, i = key, j
	}
	return n
}

func isKeyByte(c byte) bool { return isAlnum(c) || c == '_' || c == '-' || c == '/' }

// valueAfter reads a key's value: separators (spaces, a closing quote, ":" or "=", an opening quote)
// then a number that ends there (a "%" may follow). k is how far it read.
func valueAfter(b []byte) (v float64, k int, ok bool) {
	i := separators(b)
	v, n, ok := number(b[i:])
	if !ok || i+n < len(b) && (isLetter(b[i+n]) || b[i+n] == '_') {
		return 0, 0, false
	}
	return v, i + n, true
}

// separators returns the length of the separators between a key and its value (at most 6).
func separators(b []byte) int {
	i := 0
	for i < len(b) && i < 6 && strings.IndexByte(" :='\"", b[i]) >= 0 {
		i++
	}
	return i
}

// nonFiniteLen returns the length of the separators and the value at the start of b when the value is
// nan, inf or infinity (any case, with a sign: how Python, NumPy and PyTorch print a diverged loss) or a
// number too large for a float64; 0 otherwise.
func nonFiniteLen(b []byte) int {
	i := separators(b)
	if i < len(b) && (b[i] == '-' || b[i] == '+') {
		i++
	}
	if v, n, ok := anyNumber(b[i:]); ok { // 1e999: too large a loss is no finite one either
		if j := i + n; math.IsInf(v, 0) && (j == len(b) || !isKeyByte(b[j])) {
			return j
		}
		return 0
	}
	j := i
	for j < len(b) && j-i < 9 && isLetter(b[j]) {
		j++
	}
	if !nonFiniteWord(b[i:j]) || j < len(b) && isKeyByte(b[j]) {
		return 0
	}
	return j
}

// nonFiniteWord reports whether w is nan, inf or infinity in any case.
func nonFiniteWord(w []byte) bool {
	var lb [8]byte
	if len(w) > len(lb) {
		return false
	}
	switch string(lowerInto(lb[:0], w)) {
	case "nan", "inf", "infinity":
		return true
	}
	return false
}

// metricField maps a metric's key to its field; prev, the word before it, skips "Val Loss" and the
// like.
func metricField(key, prev []byte, hf bool) (field, bool) {
	var kb, pb [32]byte
	if len(key) > len(kb) || evalWord(lowerInto(pb[:0], prev)) {
		return 0, false
	}
	k := lowerInto(kb[:0], key)
	if hf {
		switch string(k) {
		case "eval_accuracy":
			return fAccuracy, true
		case "train_samples_per_second":
			return fThroughput, true
		}
	}
	return baseMetric(k, prev)
}

// baseMetric maps a lower-case key, less its "train" prefix and "_step" suffix.
func baseMetric(k, prev []byte) (field, bool) {
	for _, p := range []string{"train_", "train/", "training_"} {
		k = bytes.TrimPrefix(k, []byte(p))
	}
	k = bytes.TrimSuffix(k, []byte("_step"))
	switch string(k) {
	case "loss":
		return fLoss, true
	case "acc", "accuracy", "categorical_accuracy", "sparse_categorical_accuracy", "binary_accuracy":
		return fAccuracy, true
	case "lr", "learning_rate":
		return fLR, true
	case "rate":
		return fLR, len(prev) == 8 && lower(prev[0]) == 'l' && string(prev[1:]) == "earning"
	}
	return fLR, bytes.HasPrefix(k, []byte("lr-"))
}

// lowerInto appends b in lower case to dst (a stack buffer); a word too long for it is cut.
func lowerInto(dst, b []byte) []byte {
	for _, c := range b {
		if len(dst) == cap(dst) {
			break
		}
		dst = append(dst, lower(c))
	}
	return dst
}

// evalWord reports whether a word that makes the metric after it an evaluation one.
func evalWord(w []byte) bool {
	switch string(w) {
	case "val", "valid", "validation", "test", "eval", "evaluation", "dev":
		return true
	}
	return false
}
