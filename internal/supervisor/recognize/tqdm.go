package recognize

import (
	"bytes"
	"math"
)

// bar is a tqdm bar's parts.
type bar struct {
	desc, unit, post  []byte
	n, total, rate    float64
	hasTotal, hasRate bool
}

var vNum = []byte("v_num=")

// tqdm reads a tqdm bar: generic ("tqdm") or Lightning's, with its "v_num=" postfix ("lightning").
func (r *Recognizer) tqdm(s []byte, rd *reading) string {
	b, ok := parseBar(s)
	if !ok {
		b, ok = parseTotalless(s)
	}
	if !ok || !trainingBar(b) {
		return ""
	}
	e := findCount(b.desc, "epoch")
	lightning := bytes.Contains(b.post, vNum)
	if !e.ok && !lightning && r.runSteps > 0 && b.hasTotal && b.total != r.runSteps {
		return "" // a loop inside the run's (Hugging Face's evaluation bar)
	}
	rd.put(fStep, b.n)
	if b.hasTotal {
		rd.put(fSteps, b.total)
	}
	if b.hasRate {
		rd.put(fThroughput, b.rate)
	}
	if e.ok {
		rd.put(fEpoch, e.n)
		if e.hasTotal {
			rd.put(fEpochs, e.total)
		}
	}
	scanMetrics(b.post, rd, false)
	r.otherPairs(b.post)
	r.barFraction(rd, e, b, lightning)
	if lightning {
		return FormatLightning
	}
	return FormatTQDM
}

// barFraction: Lightning's 0-based (epoch + n/total)/TotalEpochs; a description's 1-based "E/M",
// (E-1 + n/total)/M; a bar without an epoch n/total.
func (r *Recognizer) barFraction(rd *reading, e count, b bar, lightning bool) {
	within := 0.0
	if b.hasTotal {
		within = math.Min(b.n/b.total, 1)
	}
	switch {
	case e.ok && lightning:
		epochs, _ := r.known(rd, fEpochs)
		rd.fraction(e.n+within, epochs, epochCounter)
	case e.ok && e.hasTotal:
		rd.fraction(e.n-1+within, e.total, epochCounter)
	case e.ok:
		rd.counter = epochCounter
	case b.hasTotal:
		rd.fraction(b.n, b.total, stepCounter)
	default:
		rd.counter = stepCounter
	}
}

// parseBar reads "{desc}: {percentage}%|{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}{postfix}]".
func parseBar(s []byte) (bar, bool) {
	i := bytes.Index(s, pctBar)
	if i < 0 {
		return bar{}, false
	}
	p := i
	for p > 0 && (isDigit(s[p-1]) || s[p-1] == '.') {
		p--
	}
	j := bytes.IndexByte(s[i+2:], '|')
	if p == i || j < 0 {
		return bar{}, false
	}
	rest := trimLeftSpace(s[i+2+j+1:])
	n, l, ok := siNumber(rest)
	if !ok || l >= len(rest) || rest[l] != '/' {
		return bar{}, false
	}
	total, l2, ok := siNumber(rest[l+1:])
	rest = rest[l+1+l2:]
	if !ok || !bytes.HasPrefix(rest, spaceBrack) {
		return bar{}, false
	}
	b := bar{desc: trimDesc(s[:p]), n: n, total: total, hasTotal: total > 0}
	return b.bracket(rest[2:])
}

// parseTotalless reads "{desc}: {n}{unit} [{elapsed}, {rate}{postfix}]", the bar of a loop without a
// length.
func parseTotalless(s []byte) (bar, bool) {
	for from, tries := 0, 0; tries < 4; tries++ {
		i := bytes.Index(s[from:], spaceBrack)
		if i < 0 {
			return bar{}, false
		}
		i += from
		start := bytes.LastIndexByte(s[:i], ' ') + 1
		tok := s[start:i]
		if n, l, ok := siNumber(tok); ok && letters(tok[l:]) {
			b := bar{desc: trimDesc(s[:start]), n: n}
			if b, ok := b.bracket(s[i+2:]); ok {
				return b, true
			}
		}
		from = i + 2
	}
	return bar{}, false
}

// bracket reads "{elapsed}[<{remaining}], {rate}[, {postfix}]" up to the closing "]" (or the end of a
// cut line).
func (b bar) bracket(r []byte) (bar, bool) {
	if end := bytes.LastIndexByte(r, ']'); end >= 0 {
		r = r[:end]
	}
	k := bytes.Index(r, []byte(", "))
	if k < 0 || !timeLike(r[:k]) {
		return bar{}, false
	}
	rate := r[k+2:]
	if k := bytes.Index(rate, []byte(", ")); k >= 0 {
		rate, b.post = rate[:k], rate[k+2:]
	}
	var ok bool
	if b.rate, b.unit, b.hasRate, ok = parseRate(trimSpace(rate)); !ok {
		return bar{}, false
	}
	return b, true
}

// timeLike reports whether b is a time of tqdm's: "00:10<00:12", "1:02:03<?" or "00:10".
func timeLike(b []byte) bool {
	return len(b) >= 4 && isDigit(b[0]) && bytes.IndexByte(b, ':') > 0
}

// parseRate reads "4.50it/s", "1.23s/it" (the rate is 1/1.23), "12.3kit/s" or "?it/s" (no rate).
func parseRate(b []byte) (rate float64, unit []byte, has, ok bool) {
	if len(b) > 0 && b[0] == '?' {
		unit, ok = bytes.CutSuffix(b[1:], []byte("/s"))
		return 0, unit, false, ok
	}
	v, n, ok := siNumber(b)
	if !ok {
		return 0, nil, false, false
	}
	b = b[n:]
	if unit, ok := bytes.CutSuffix(b, []byte("/s")); ok {
		return v, trimSpace(unit), true, true
	}
	if unit, ok := bytes.CutPrefix(b, []byte("s/")); ok && v > 0 {
		rate = 1 / v
		return rate, trimSpace(unit), !math.IsInf(rate, 0), true
	}
	return 0, nil, false, false
}

// trimDesc cuts the spaces and the ": " around a bar's description.
func trimDesc(b []byte) []byte {
	b = trimSpace(b)
	if len(b) > 0 && b[len(b)-1] == ':' {
		b = b[:len(b)-1]
	}
	return b
}

func letters(b []byte) bool {
	for _, c := range b {
		if !isLetter(c) {
			return false
		}
	}
	return true
}

// trainingBar reports whether the bar is not an evaluation, data-preparation or download bar.
func trainingBar(b bar) bool {
	switch string(b.unit) {
	case "B", "iB", "bytes", "b":
		return false
	}
	var wb [16]byte
	w := b.desc
	for i, c := range w {
		if !isLetter(c) {
			w = w[:i]
			break
		}
	}
	return !notTraining(lowerInto(wb[:0], w))
}

// notTraining reports whether a description's first word names evaluation or data preparation.
func notTraining(w []byte) bool {
	switch string(w) {
	case "validation", "validating", "valid", "val", "eval", "evaluating", "evaluation", "evaluate", "test",
		"testing", "sanity", "predicting", "prediction", "predict", "inference", "downloading", "download",
		"uploading", "upload", "extracting", "map", "filter", "generating", "loading", "fetching", "resolving",
		"tokenizing", "tokenization", "preprocessing", "saving", "writing", "converting", "caching", "shuffling",
		"verifying", "computing", "encoding", "running", "grouping", "creating", "processing", "building", "compiling",
		"packing", "concatenating", "sorting", "indexing", "formatting", "parsing", "reading":
		return true
	}
	return false
}
