package recognize

import (
	"bytes"
	"math"
)

var (
	hfEpochKey    = []byte("'epoch'")
	hfRuntimeKey  = []byte("'train_runtime'")
	hfNumEpochs   = []byte("Num Epochs = ")
	hfTotalSteps  = []byte("Total optimization steps = ")
	epochWord     = []byte("Epoch ")
	kerasUnknown  = []byte("Unknown")
	kerasPerStep  = []byte("/step")
	hfTrainingKey = [][]byte{[]byte("'loss'"), []byte("'learning_rate'"), []byte("'eval_"), []byte("'train_")}
)

// hfDict reads Hugging Face Trainer's log dictionary, "{'loss': 0.6931, ..., 'epoch': 0.05}".
func (r *Recognizer) hfDict(s []byte, rd *reading) string {
	i := bytes.Index(s, dictStart)
	if i < 0 || !hfLog(s[i:]) {
		return ""
	}
	d := s[i:]
	scanMetrics(d, rd, true)
	r.hfNames(d)
	if i := bytes.Index(d, hfEpochKey); i >= 0 {
		if e, _, ok := valueAfter(d[i+len(hfEpochKey):]); ok && rd.put(fEpoch, e) {
			total, _ := r.known(rd, fEpochs)
			rd.fraction(e, total, stepCounter) // the Trainer's epoch is its global step over steps per epoch
		}
	}
	return FormatHuggingFace
}

// hfLog reports whether the dictionary has 'epoch' and a training or evaluation key, or is the final
// 'train_runtime' one.
func hfLog(d []byte) bool {
	if bytes.Contains(d, hfRuntimeKey) {
		return true
	}
	if !bytes.Contains(d, hfEpochKey) {
		return false
	}
	for _, k := range hfTrainingKey {
		if bytes.Contains(d, k) {
			return true
		}
	}
	return false
}

// hfBanner reads the Trainer's "  Num Epochs = 3" and "  Total optimization steps = 1,875".
func (r *Recognizer) hfBanner(s []byte, rd *reading) string {
	if v, ok := bannerValue(s, hfNumEpochs); ok && v > 0 {
		rd.put(fEpochs, v)
		return FormatHuggingFace
	}
	if v, ok := bannerValue(s, hfTotalSteps); ok && v > 0 {
		rd.put(fSteps, v)
		r.runSteps = v
		return FormatHuggingFace
	}
	return ""
}

// bannerValue reads the number after key, with thousands separators ("1,875"), that ends the line.
func bannerValue(s, key []byte) (float64, bool) {
	i := bytes.Index(s, key)
	if i < 0 {
		return 0, false
	}
	var nb [maxNumberBytes]byte
	num := nb[:0]
	for _, c := range trimSpace(s[i+len(key):]) {
		if len(num) == cap(num) {
			return 0, false
		}
		if c != ',' {
			num = append(num, c)
		}
	}
	v, n, ok := number(num)
	return v, ok && n == len(num)
}

// kerasEpoch reads Keras's "Epoch 3/10" line, the start of the third of ten epochs.
func (r *Recognizer) kerasEpoch(s []byte, rd *reading) string {
	s = trimSpace(s)
	if !bytes.HasPrefix(s, epochWord) {
		return ""
	}
	n, l, ok := integer(s[len(epochWord):])
	rest := s[len(epochWord)+l:]
	if !ok || len(rest) < 2 || rest[0] != '/' {
		return ""
	}
	m, l, ok := integer(rest[1:])
	if !ok || 1+l != len(rest) || m == 0 {
		return ""
	}
	rd.put(fEpoch, n)
	rd.put(fEpochs, m)
	rd.fraction(n-1, m, epochCounter)
	r.keras = kerasEpoch{epoch: n, epochs: m, ok: true}
	return FormatKeras
}

// kerasStep reads Keras's step line: "469/938 [====>....] - ETA: 5s - loss: 0.2973" (Keras 2),
// "469/938 ━━━━━━━━━━ 5s 3ms/step - loss: 0.2973" (Keras 3), "938/938 - 3s - loss: 0.2973" (verbose=2)
// or "    469/Unknown ..." (no total).
func (r *Recognizer) kerasStep(s []byte, rd *reading) string {
	s = trimLeftSpace(s)
	n, l, ok := integer(s)
	if !ok || l >= len(s) || s[l] != '/' {
		return ""
	}
	rest := s[l+1:]
	total, l, hasTotal := integer(rest)
	if !hasTotal && bytes.HasPrefix(rest, kerasUnknown) {
		l = len(kerasUnknown)
	}
	rest = rest[l:]
	if !kerasShape(rest, hasTotal) || hasTotal && (total == 0 || !r.kerasSteps(total)) {
		return ""
	}
	rd.put(fStep, n)
	if hasTotal {
		rd.put(fSteps, total)
	}
	scanMetrics(rest, rd, false)
	r.otherPairs(rest)
	if t, ok := perStep(rest); ok {
		rd.put(fThroughput, 1/t)
	}
	r.kerasFraction(rd, n, total, hasTotal)
	return FormatKeras
}

// kerasShape reports whether, after "n/total" comes Keras 2's "[==>..]", Keras 3's "━" bar or verbose=2's " - "; after
// "n/Unknown", a time per step.
func kerasShape(rest []byte, hasTotal bool) bool {
	switch {
	case !hasTotal:
		return len(rest) > 0 && rest[0] == ' ' && bytes.Contains(rest, kerasPerStep)
	case bytes.HasPrefix(rest, dashSep), bytes.HasPrefix(rest, []byte(" ━")):
		return true
	case !bytes.HasPrefix(rest, spaceBrack):
		return false
	}
	end := bytes.IndexByte(rest, ']')
	if end < 2 {
		return false
	}
	for _, c := range rest[2:end] {
		if c != '=' && c != '>' && c != '.' {
			return false
		}
	}
	return true
}

// kerasSteps reports whether a step line's total is the epoch's (the first one after "Epoch N/M"), not that of
// model.evaluate or predict run after it.
func (r *Recognizer) kerasSteps(total float64) bool {
	switch {
	case !r.keras.ok:
		return true
	case r.keras.steps == 0:
		r.keras.steps = total
		return true
	}
	return total == r.keras.steps
}

// kerasFraction: (epoch-1 + step/steps)/epochs within fit's epochs, else step/steps.
func (r *Recognizer) kerasFraction(rd *reading, n, total float64, hasTotal bool) {
	within := 0.0
	if hasTotal {
		within = math.Min(n/total, 1)
	}
	switch {
	case r.keras.ok:
		rd.fraction(r.keras.epoch-1+within, r.keras.epochs, epochCounter)
	case hasTotal:
		rd.fraction(n, total, stepCounter)
	default:
		rd.counter = stepCounter
	}
}

// perStep reads Keras's time per step, "3s/step", "45ms/step" or "120us/step", in seconds.
func perStep(b []byte) (float64, bool) {
	i := bytes.Index(b, kerasPerStep)
	if i < 0 {
		return 0, false
	}
	j := bytes.LastIndexByte(b[:i], ' ') + 1
	v, n, ok := number(b[j:i])
	if !ok || v <= 0 {
		return 0, false
	}
	switch string(b[j+n : i]) {
	case "s":
		return v, true
	case "ms":
		return v / 1e3, true
	case "us":
		return v / 1e6, true
	}
	return 0, false
}

// rich reads Lightning's RichProgressBar line, "Epoch 3/9  ━━━━━━ 938/938 0:00:12 • 0:00:00 75.21it/s
// v_num: 0 train_loss: 0.123", where 3/9 is the current and the last epoch index.
func (r *Recognizer) rich(s []byte, rd *reading) string {
	s = trimLeftSpace(s)
	if !bytes.HasPrefix(s, epochWord) {
		return ""
	}
	e, l, ok := integer(s[len(epochWord):])
	rest := s[len(epochWord)+l:]
	if !ok {
		return ""
	}
	rd.put(fEpoch, e)
	if len(rest) > 0 && rest[0] == '/' {
		last, l, ok := number(rest[1:]) // max_epochs=-1 prints "/-2"
		if ok && last >= 0 && last == math.Trunc(last) {
			rd.put(fEpochs, last+1)
		}
		rest = rest[1+l:]
	}
	n, total, hasTotal, rest, ok := richCount(trimLeftSpace(rest))
	if !ok {
		return ""
	}
	r.richFields(rd, e, n, total, hasTotal, rest)
	return FormatLightning
}

// richCount skips the bar (box-drawing characters) and reads "938/938" or "422/--".
func richCount(b []byte) (n, total float64, hasTotal bool, rest []byte, ok bool) {
	if len(b) < 3 || b[0] != 0xe2 || b[1] != 0x94 && b[1] != 0x95 {
		return 0, 0, false, nil, false
	}
	if i := bytes.IndexByte(b, ' '); i >= 0 {
		b = trimLeftSpace(b[i:])
	}
	n, l, ok := integer(b)
	if !ok || l >= len(b) || b[l] != '/' {
		return 0, 0, false, nil, false
	}
	b = b[l+1:]
	if bytes.HasPrefix(b, []byte("--")) {
		return n, 0, false, b[2:], true
	}
	total, l, ok = number(b)
	return n, total, ok && total > 0, b[l:], ok
}

// richFields reads the rate and the metrics after the counts, and the fraction (epoch + n/total)/epochs.
func (r *Recognizer) richFields(rd *reading, e, n, total float64, hasTotal bool, rest []byte) {
	rd.put(fStep, n)
	within := 0.0
	if hasTotal {
		rd.put(fSteps, total)
		within = math.Min(n/total, 1)
	}
	if i := bytes.Index(rest, []byte("it/s")); i >= 0 {
		j := bytes.LastIndexByte(rest[:i], ' ') + 1
		if v, l, ok := number(rest[j:i]); ok && j+l == i {
			rd.put(fThroughput, v)
		}
	}
	scanMetrics(rest, rd, false)
	r.otherPairs(rest)
	epochs, _ := r.known(rd, fEpochs)
	rd.fraction(e+within, epochs, epochCounter)
}
