package recognize

import "bytes"

// parser reads one format; it returns the format's name, or "" and leaves the Recognizer as it was.
type parser struct {
	cand  cand
	parse func(*Recognizer, []byte, *reading) string
}

// parsers are the built-in formats, most specific first.
var parsers = [...]parser{
	{candBar, (*Recognizer).tqdm},
	{candRich, (*Recognizer).rich},
	{candKeras, (*Recognizer).kerasStep},
	{candCounter, (*Recognizer).kerasEpoch},
	{candHF, (*Recognizer).hfDict},
	{candJSON, (*Recognizer).json},
	{candRound, (*Recognizer).round},
	{candCatBoost, (*Recognizer).catboost},
	{candSklearn, (*Recognizer).sklearn},
	{candBanner, (*Recognizer).hfBanner},
	{candCounter, (*Recognizer).plain},
}

// builtin tries the built-in formats among the candidates c on the cleaned line s.
func (r *Recognizer) builtin(s []byte, c cand, rd *reading) string {
	for _, p := range parsers {
		if c&p.cand == 0 {
			continue
		}
		*rd = reading{}
		r.named.reset()
		if f := p.parse(r, s, rd); f != "" {
			return f
		}
	}
	return ""
}

// plain reads a hand-written "epoch 3/10 loss 0.23" or "step 100/1000 lr 1e-4" line: a counter, and a
// total or a metric.
func (r *Recognizer) plain(s []byte, rd *reading) string {
	e, st := findCount(s, "epoch"), findCount(s, "step")
	if !e.ok && !st.ok {
		return ""
	}
	metrics := 0
	if !evalLine(s) { // "Validation - epoch 1/10 - loss: 0.04": its figures are not the training's
		metrics = scanMetrics(s, rd, false)
	}
	if metrics == 0 && !e.hasTotal && !st.hasTotal {
		return ""
	}
	putCount(rd, e, fEpoch, fEpochs)
	putCount(rd, st, fStep, fSteps)
	r.counterFraction(rd)
	return FormatPlain
}

// evalLine reports whether the line's first word names evaluation ("Validation - epoch 1/10 - loss: 0.04").
func evalLine(s []byte) bool {
	i := 0
	for i < len(s) && !isLetter(s[i]) {
		i++
	}
	j := i
	for j < len(s) && isLetter(s[j]) {
		j++
	}
	var wb [16]byte
	return evalWord(lowerInto(wb[:0], s[i:j]))
}

func putCount(rd *reading, c count, n, total field) {
	if !c.ok {
		return
	}
	rd.put(n, c.n)
	if c.hasTotal {
		rd.put(total, c.total)
	}
}

// matchPattern applies the job's pattern; it reports whether it matched and set a field.
func (r *Recognizer) matchPattern(s []byte, rd *reading) bool {
	m := r.pattern.FindSubmatchIndex(s)
	if m == nil {
		return false
	}
	for f, g := range r.groups {
		if g == 0 || 2*g+1 >= len(m) || m[2*g] < 0 {
			continue
		}
		if v, ok := groupNumber(s[m[2*g]:m[2*g+1]]); ok {
			rd.put(field(f), v)
		}
	}
	if rd.set == 0 {
		return false
	}
	r.counterFraction(rd)
	return true
}

// groupNumber reads a pattern group's text as a number: spaces, a trailing "%" and thousands
// separators are allowed, and k, M, G... suffixes.
func groupNumber(b []byte) (float64, bool) {
	b = bytes.TrimSuffix(trimSpace(b), []byte("%"))
	var nb [maxNumberBytes]byte
	num := nb[:0]
	for _, c := range b {
		if len(num) == cap(num) {
			return 0, false
		}
		if c != ',' {
			num = append(num, c)
		}
	}
	v, n, ok := siNumber(num)
	return v, ok && n == len(num)
}
