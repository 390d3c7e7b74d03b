package recognize

import (
	"bytes"
)

var (
	lgbOf        = []byte("'s ")
	plusMinus    = []byte("±")
	catTotal     = []byte(" total: ")
	mlpIteration = []byte("Iteration ")
	mlpLoss      = []byte(", loss = ")
	sgdNormLine  = []byte("Norm: ")
)

// round reads a boosting round's evaluation line: XGBoost's "[12]\ttrain-logloss:0.25514\teval-logloss:0.25627"
// or LightGBM's "[10]\tvalid_0's binary_logloss: 0.213\tvalid_0's auc: 0.95" (the tabs are spaces by now).
func (r *Recognizer) round(s []byte, rd *reading) string {
	s = trimLeftSpace(s)
	if len(s) < 4 || s[0] != '[' {
		return ""
	}
	n, l, ok := integer(s[1:])
	if !ok || 2+l >= len(s) || s[1+l] != ']' || s[2+l] != ' ' {
		return ""
	}
	pairs := trimLeftSpace(s[2+l:])
	if i := bytes.Index(pairs, lgbOf); i > 0 && bytes.IndexByte(pairs[:i], ':') < 0 {
		return r.lightgbm(n, pairs, rd)
	}
	return r.xgboost(n, pairs, rd)
}

// boostMetrics picks Loss and Accuracy among a round's metrics: those of its first dataset (XGBoost's and
// LightGBM's first eval set, the training set when it is listed first).
type boostMetrics struct {
	first         []byte
	loss, acc, ok bool
}

func (b *boostMetrics) pair(rd *reading, data, metric []byte, v float64) {
	if !b.ok {
		b.first, b.ok = data, true
	}
	if !bytes.Equal(data, b.first) {
		return
	}
	metric = metric[bytes.LastIndexByte(metric, ' ')+1:] // lgb.cv's "valid l2"
	var mb [32]byte
	m := lowerInto(mb[:0], metric)
	switch {
	case len(metric) > len(mb):
	case !b.loss && lossMetric(m):
		b.loss = rd.put(fLoss, v)
	case !b.acc && accuracyMetric(m):
		b.acc = rd.put(fAccuracy, v)
	}
}

// xgboost reads XGBoost's pairs, "train-logloss:0.25514" (xgb.cv's "train-logloss:0.25514+0.00666" or
// "...±0.00666"): every token must be one. Rounds count from 0: round 12 is 13 rounds done.
func (r *Recognizer) xgboost(n float64, pairs []byte, rd *reading) string {
	var bm boostMetrics
	for len(pairs) > 0 {
		end := bytes.IndexByte(pairs, ' ')
		if end < 0 {
			end = len(pairs)
		}
		tok := pairs[:end]
		pairs = trimLeftSpace(pairs[end:])
		c := bytes.IndexByte(tok, ':')
		if c < 0 {
			return ""
		}
		name, val := tok[:c], tok[c+1:]
		d := bytes.IndexByte(name, '-')
		if d <= 0 || d == len(name)-1 {
			return ""
		}
		v, l, ok := number(val)
		if !ok || !stdAfter(val[l:]) {
			return ""
		}
		bm.pair(rd, name[:d], name[d+1:], v)
		r.named.add(v, 0, name)
	}
	if !bm.ok {
		return ""
	}
	rd.put(fEpoch, n+1)
	r.counterFraction(rd)
	return FormatXGBoost
}

// stdAfter reports whether b is empty or xgb.cv's standard deviation, "+0.00666" or "±0.00666".
func stdAfter(b []byte) bool {
	switch {
	case len(b) == 0:
		return true
	case b[0] == '+':
		b = b[1:]
	case bytes.HasPrefix(b, plusMinus):
		b = b[len(plusMinus):]
	default:
		return false
	}
	_, l, ok := number(b)
	return ok && l == len(b)
}

// lightgbm reads LightGBM's pairs, "valid_0's binary_logloss: 0.213" (lgb.cv's "cv_agg's valid l2: 0.5 +
// 0.01"): the whole line must be such pairs. Rounds count from 1. A round below the last one read, other
// than a new training's round 1, is the "best iteration is:" summary after early stopping: ignored.
func (r *Recognizer) lightgbm(n float64, pairs []byte, rd *reading) string {
	if n < r.lgbRound && n != 1 {
		return ""
	}
	var bm boostMetrics
	for len(pairs) > 0 {
		of := bytes.Index(pairs, lgbOf)
		if of <= 0 {
			return ""
		}
		data, rest := pairs[:of], pairs[of+len(lgbOf):]
		c := bytes.Index(rest, []byte(": "))
		if c <= 0 {
			return ""
		}
		metric := rest[:c]
		v, l, ok := number(rest[c+2:])
		if !ok {
			return ""
		}
		rest = rest[c+2+l:]
		if std, ok := bytes.CutPrefix(rest, []byte(" + ")); ok {
			_, l, ok := number(std)
			if !ok {
				return ""
			}
			rest = std[l:]
		}
		if len(rest) > 0 && rest[0] != ' ' {
			return ""
		}
		bm.pair(rd, data, metric, v)
		r.named.add(v, '-', data, metric)
		pairs = trimLeftSpace(rest)
	}
	if !bm.ok {
		return ""
	}
	r.lgbRound = n
	rd.put(fEpoch, n)
	r.counterFraction(rd)
	return FormatLightGBM
}

// lossMetric reports whether a lower-case metric name of XGBoost's or LightGBM's is a loss (smaller is
// better): one with "loss", "error", "nloglik", "deviance" or "entropy" in it, or one of the regression
// metrics.
func lossMetric(m []byte) bool {
	switch string(m) {
	case "rmse", "rmsle", "mse", "mae", "mape", "mphe", "l1", "l2", "l2_root", "huber", "fair", "quantile", "poisson",
		"gamma", "tweedie", "kullback_leibler":
		return true
	}
	for _, w := range []string{"loss", "error", "nloglik", "deviance", "entropy"} {
		if bytes.Contains(m, []byte(w)) {
			return true
		}
	}
	return false
}

// accuracyMetric reports whether a lower-case metric name is an accuracy ("accuracy", "acc", or ending in
// "-accuracy" or "_accuracy"); an error rate is not.
func accuracyMetric(m []byte) bool {
	return string(m) == "accuracy" || string(m) == "acc" || bytes.HasSuffix(m, []byte("-accuracy")) ||
		bytes.HasSuffix(m, []byte("_accuracy"))
}

// catboost reads CatBoost's "0:\tlearn: 0.6803000\ttest: 0.6810000\tbest: 0.6810000 (0)\ttotal: 52.1ms\t
// remaining: 5.16s": the iteration (from 0), then "name: value" pairs (learn, test, test1...) up to
// "best:" or "total:", and "total:" must follow.
func (r *Recognizer) catboost(s []byte, rd *reading) string {
	s = trimSpace(s)
	n, l, ok := integer(s)
	if !ok || l+1 >= len(s) || s[l] != ':' || s[l+1] != ' ' || !bytes.Contains(s, catTotal) {
		return ""
	}
	rest := trimLeftSpace(s[l+1:])
	pairs := 0
	for len(rest) > 0 {
		k := 0
		for k < len(rest) && isAlnum(rest[k]) {
			k++
		}
		key := rest[:k]
		if k == 0 || k+1 >= len(rest) || rest[k] != ':' || rest[k+1] != ' ' {
			return ""
		}
		if string(key) == "best" || string(key) == "total" {
			break
		}
		val := trimLeftSpace(rest[k+2:])
		v, m, ok := number(val)
		if !ok || m < len(val) && val[m] != ' ' {
			return ""
		}
		if string(key) == "learn" {
			rd.put(fLoss, v)
		}
		r.named.add(v, 0, key)
		pairs++
		rest = trimLeftSpace(val[m:])
	}
	if pairs == 0 {
		return ""
	}
	rd.put(fEpoch, n+1)
	r.counterFraction(rd)
	return FormatCatBoost
}

// sklearn reads scikit-learn's verbose lines: MLPClassifier's and MLPRegressor's "Iteration 4, loss =
// 0.60151891" (the epochs done), SGDClassifier's "-- Epoch 3" and its "Norm: 6.59, NNZs: 8, Bias:
// -0.1, T: 1500, Avg. loss: 0.524579".
func (r *Recognizer) sklearn(s []byte, rd *reading) string {
	s = trimSpace(s)
	switch {
	case bytes.HasPrefix(s, mlpIteration):
		n, l, ok := integer(s[len(mlpIteration):])
		rest, found := bytes.CutPrefix(s[len(mlpIteration)+l:], mlpLoss)
		if !ok || !found {
			return ""
		}
		v, m, ok := number(rest)
		if !ok || m != len(rest) {
			return ""
		}
		rd.put(fEpoch, n)
		rd.put(fLoss, v)
	case bytes.HasPrefix(s, sgdEpoch):
		n, l, ok := integer(s[len(sgdEpoch):])
		if !ok || len(sgdEpoch)+l != len(s) {
			return ""
		}
		rd.put(fEpoch, n)
	case bytes.HasPrefix(s, sgdNormLine):
		i := bytes.Index(s, sgdAvgLoss)
		if i < 2 || string(s[i-2:i]) != ", " {
			return ""
		}
		rest := s[i+len(sgdAvgLoss):]
		v, m, ok := number(rest)
		if !ok || m != len(rest) {
			return ""
		}
		rd.put(fLoss, v)
	default:
		return ""
	}
	r.counterFraction(rd)
	return FormatSklearn
}
