// Package recognize finds a training run's progress in the lines its program prints: tqdm bars, Hugging
// Face Trainer's log dictionaries, PyTorch Lightning's and Keras's epoch and step lines, XGBoost's,
// LightGBM's and CatBoost's evaluation logs, scikit-learn's verbose lines, JSON log lines, plain "epoch
// N/M" and "step N/M" lines with loss, accuracy and learning rate, and a job's own pattern; and the
// figures those lines print under their own names (named metrics, below).
//
// The supervisor feeds every line of the program's stdout and stderr to [Recognizer.Line], split at "\n"
// and at "\r" (tqdm, Keras and rich redraw their bars with "\r"), each at most [MaxLineBytes] long.
// Before a line is read, ANSI escape sequences ("\x1b[A", "\x1b[2K", colours), other control bytes
// (Keras's backspaces) and torchrun's prefixes ("[default0]:", "[rank0]:") are dropped. Lines that are
// none of the formats below are ignored cheaply: a line must first contain the bytes its format needs.
//
// # Formats
//
// Line returns the name of the format it recognised.
//
// "pattern": the job's own RE2 pattern, tried first on every line. Its named groups epoch, epochs, step,
// steps, loss, accuracy, lr and throughput set those fields; a group that is not a number, or did not
// take part in the match, is ignored; a trailing "%", "1,234" and k/M/G suffixes are allowed. A match
// that sets no field falls through to the built-in formats. Fraction as for "plain".
//
// "tqdm": tqdm's default bar, "{desc}: {percentage}%|{bar}| {n}/{total} [{elapsed}<{remaining},
// {rate}{postfix}]", with or without a description, with any bar characters, and its total-less form:
//
//	Epoch 3:  45%|████▌     | 45/100 [00:10<00:12,  4.50it/s, loss=0.231, lr=0.001]
//	 45%|████▌     | 45/100 [00:10<00:12,  4.50it/s]
//	Epoch [3/10]:  45%|####5     | 4.50k/10.0k [00:00<00:00, 12.3kit/s]
//	  3%|▎         | 3/100 [00:03<01:59,  1.23s/it]
//	Epoch 2: 1234it [00:10, 123.40it/s, loss=0.5]
//
// Step = n, TotalSteps = total, Throughput = the rate in iterations (or the bar's unit) a second:
// "1.23s/it" is 1/1.23, "12.3kit/s" 12300 (k, M, G... suffixes), "?it/s" none. A description naming an
// epoch ("Epoch 3", "epoch 3/10", "Epoch 3 of 10", or bracketed as in the third example) gives Epoch, and
// TotalEpochs with its total. The postfix gives the metrics (below). A bar that is not the training loop is ignored: one
// whose description starts with an evaluation or data-preparation word (Validation, Validating, Eval,
// Evaluating, Test, Testing, Sanity, Predicting, Downloading, Map, Filter, Generating, Loading, Fetching,
// Extracting, Tokenizing, Saving...), one counting bytes ("4.56MB/s"), and, once Hugging Face's banner
// has given the run's "Total optimization steps", a bar without an epoch whose total differs from it
// (the Trainer's evaluation bar).
//
// "huggingface": Hugging Face Trainer's log dictionaries (values may be quoted) and its banner:
//
//	  Num Epochs = 3
//	  Total optimization steps = 1,875
//	{'loss': 0.6931, 'grad_norm': 1.2345, 'learning_rate': 4.9e-05, 'epoch': 0.05}
//	{'eval_loss': 0.41, 'eval_accuracy': 0.87, 'eval_runtime': 2.1, 'eval_samples_per_second': 476.2, 'epoch': 1.0}
//	{'train_runtime': 12.3, 'train_samples_per_second': 40.2, 'train_steps_per_second': 5.0, 'train_loss': 0.5, 'epoch': 3.0}
//
// A dictionary counts when it has 'epoch' and a 'loss', 'learning_rate', 'eval_...' or 'train_...' key,
// or 'train_runtime'. Epoch = 'epoch' (fractional epochs done); Loss = 'loss' or 'train_loss' (not
// 'eval_loss'); Accuracy = 'eval_accuracy' (the Trainer logs no training accuracy); LearningRate =
// 'learning_rate'; Throughput = 'train_samples_per_second'. The banner gives TotalEpochs and TotalSteps.
// The Trainer's step bar is a plain tqdm bar ("tqdm").
//
// "lightning": PyTorch Lightning's tqdm bar, told from a generic one by its "v_num=" postfix, and its
// RichProgressBar line:
//
//	Epoch 0:  45%|████▌     | 422/938 [00:05<00:06, 80.12it/s, v_num=0, train_loss=0.231]
//	Epoch 3/9  ━━━━━━━━━━━━━━━━━━━━ 938/938 0:00:12 • 0:00:00 75.21it/s v_num: 0 train_loss: 0.123
//
// Epoch is Lightning's 0-based epoch as printed; the rich bar's "3/9" is the current and the last index,
// so TotalEpochs = 10. A Lightning tqdm bar without a logger (no v_num) is "tqdm".
//
// "keras": Keras's epoch line (exactly "Epoch N/M", nothing else on the line: the start of epoch N of
// M) and its step lines, from Keras 2, Keras 3 and verbose=2:
//
//	Epoch 3/10
//	469/938 [==============>...............] - ETA: 5s - loss: 0.2973 - accuracy: 0.9140
//	938/938 [==============================] - 3s 3ms/step - loss: 0.2973 - accuracy: 0.9140 - val_loss: 0.1 - val_accuracy: 0.97
//	 938/938 ━━━━━━━━━━━━━━━━━━━━ 3s 3ms/step - accuracy: 0.9140 - loss: 0.2973
//	938/938 - 3s - 3ms/step - loss: 0.2973 - accuracy: 0.9140
//
// Step/TotalSteps are the batches of the epoch; Throughput = steps a second, from "3ms/step". After an
// "Epoch N/M" line, a step line whose total differs from the epoch's first one is model.evaluate's or
// predict's and is ignored.
//
// "plain": hand-written lines, in any case:
//
//	epoch 19/26 loss 0.0526
//	epoch 3/10 loss=0.231 accuracy=0.9368 lr=0.001
//	Epoch [3/10], Step [100/600], Loss: 0.2345
//	Epoch: 3/10 | Loss: 0.23 | Acc: 91.2%
//	step 100/1000 loss 0.5 lr 1e-4
//	[epoch 3/10] train_loss=0.2
//	Epoch 3 of 10
//
// The word "epoch" or "step" (not "epochs", "epoch_3", "timestep") must be followed by an integer (after
// spaces, ":", "=", "[", "(" or "#"), and the line must also carry a total ("/M" or "of M") or a metric,
// so that "INFO: loading checkpoint epoch_3.pt" and "Resuming from epoch 3" are not taken for progress.
//
// Metrics, in postfixes and "key: value", "key=value" or "key value" pairs: loss, train_loss → Loss; acc,
// accuracy, train_acc, train_accuracy, categorical_accuracy, ... → Accuracy; lr, learning_rate, lr-Adam
// → LearningRate; a "train_"/"train/"/"training_" prefix and a "_step" suffix are allowed. Keys after
// "val", "valid", "validation", "test", "eval" or "dev" ("Val Loss: 0.3") and "val_..." keys are not the
// training metrics and are skipped. Values are kept as printed: "Acc: 91.2%" is Accuracy 91.2.
//
// "xgboost": XGBoost's evaluation log (xgb.train's and the scikit-learn API's verbose_eval, xgb.cv's with
// its standard deviation after "+" or "±"), "[round]" and tab-separated "<dataset>-<metric>:<value>"
// pairs, every one named:
//
//	[12]	train-logloss:0.25514	eval-logloss:0.25627
//	[0]	validation_0-rmse:0.41234	validation_1-rmse:0.45678
//	[4]	train-logloss:0.34209+0.00731	test-logloss:0.43894+0.00233
//
// XGBoost's rounds count from 0: Epoch = round+1, the rounds done. Loss is the first loss metric of the
// line's first dataset (the first eval set, usually the training set): a metric with "loss", "error",
// "nloglik", "deviance" or "entropy" in its name, or rmse, rmsle, mse, mae, mape, mphe, l1, l2, l2_root,
// huber, fair, quantile, poisson, gamma, tweedie, kullback_leibler. Accuracy is that dataset's metric
// named "accuracy", "acc" or "...-accuracy", never derived from an error rate. The line has no total:
// Fraction as for "plain" (none unless an earlier line gave TotalEpochs; the operator then uses
// spec.hyperparameters.epochs).
//
// "lightgbm": LightGBM's log_evaluation lines, "[round]" and tab-separated "<dataset>'s <metric>: <value>"
// pairs (lgb.cv's "cv_agg's valid l2: 0.52 + 0.03"):
//
//	[10]	valid_0's binary_logloss: 0.213	valid_0's auc: 0.95
//	[10]	training's l2: 0.5	valid_1's l2: 0.6
//
// Rounds count from 1: Epoch = round. Each pair is named "<dataset>-<metric>" as XGBoost names it
// ("valid_0-binary_logloss", spaces made "_": "cv_agg-valid_l2"); Loss and Accuracy as for "xgboost". The
// line after "Early stopping, best iteration is:" repeats an earlier round: a round below the last one
// read, other than 1 (a new training), is ignored.
//
// "catboost": CatBoost's verbose lines, the iteration, "learn:", "test:" (and "test1:"... for more eval
// sets), then "best:", "total:" and "remaining:", which are not read:
//
//	0:	learn: 0.6803000	test: 0.6810000	best: 0.6810000 (0)	total: 52.1ms	remaining: 5.16s
//	999:	learn: 0.0306000	total: 2.3s	remaining: 0us
//
// Iterations count from 0: Epoch = iteration+1. Loss = learn (CatBoost prints its eval metric, the loss
// function unless eval_metric says otherwise); learn and test are also named "learn" and "test".
//
// "sklearn": scikit-learn's verbose output: MLPClassifier's and MLPRegressor's iterations (epochs done),
// SGDClassifier's and SGDRegressor's epoch and average loss:
//
//	Iteration 4, loss = 0.60151891
//	-- Epoch 3
//	Norm: 87.82, NNZs: 8, Bias: 1.415956, T: 1500, Avg. loss: 0.524579
//
// Epoch = N, Loss as printed; max_iter is not printed: Fraction as for "plain".
//
// "json": a line that is one JSON object (a JSON logger's, or json.dumps's), its top-level numbers read
// (strings, booleans, null, NaN, nested objects and arrays skipped; a key with an escape is not read):
//
//	{"epoch": 1, "step": 100, "loss": 0.5}
//	{"level":"info","msg":"epoch done","epoch":3,"loss":0.2,"val_acc":0.81}
//	{"global_step": 250, "max_steps": 1000, "loss": 0.4, "learning_rate": 1e-4}
//
// Keys, in any case: epoch → Epoch; epochs, num_epochs, total_epochs, max_epochs, n_epochs → TotalEpochs;
// step, global_step → Step; steps, total_steps, max_steps, num_steps → TotalSteps; throughput,
// samples_per_second, train_samples_per_second, samples_per_sec, examples_per_second → Throughput; and the
// plain format's loss, accuracy and learning rate keys. A logging library's own numbers (level, time, ts,
// timestamp, pid, tid, thread, process, line, lineno, msecs, created, relativeCreated, v) are skipped; the
// other numbers are named metrics under their keys. The line counts only when it has an epoch or step key
// or a loss key ("loss", or a key ending in "_loss", "-loss", "/loss" or ".loss": val_loss counts).
// Fraction: epoch/epochs when the epochs are known (from the line or an earlier one), else step/steps
// likewise; a line with neither leaves Fraction alone. Hugging Face's Python dictionaries (single quotes)
// are "huggingface"; its keys in JSON ({"loss": 0.69, "learning_rate": 4.9e-05, "epoch": 0.05}) are read
// here.
//
// # Named metrics
//
// Besides the fields, a recognised line's figures under their own names are kept and returned in
// Progress.Metrics, sorted by name: every pair of "xgboost" ("train-logloss", "eval-logloss"), "lightgbm"
// ("valid_0-binary_logloss") and "catboost" ("learn", "test"); the numbers of "json" and of Hugging
// Face's dictionaries ('grad_norm', 'eval_loss', 'eval_runtime'...) that no field takes; and the other
// "key=value" pairs of a tqdm or Lightning bar's postfix ("avg_loss=0.34"; not Lightning's "v_num") and
// "key: value" pairs of Keras's step lines and the rich bar ("val_loss: 0.1"). "plain" lines give none:
// their words and numbers are free text. The Recognizer holds at most [MaxNamedMetrics] names, the first
// ones seen; later new names are ignored, so a program printing a million names holds 16. A name must be
// 1 to [MaxMetricNameBytes] bytes of valid UTF-8 of printable characters (unicode.IsPrint) other than
// '"' and '\'; a longer one is ignored, not cut, so that two names never become one. Values are the
// latest finite ones. A line whose names are all held allocates nothing.
//
// # Fraction
//
// Fraction is how much of the run is done, 0 to 1, clamped, by each library's own convention:
//
//   - tqdm: n/total; with an epoch "E/M" in the description, (E-1 + n/total)/M (epochs count from 1);
//     with an epoch but no "/M", none (the script may count from 0 or 1).
//   - huggingface: epoch/TotalEpochs, once TotalEpochs is known (from the banner's "Num Epochs").
//   - lightning: (epoch + n/total)/TotalEpochs (epochs count from 0), TotalEpochs from the rich bar's
//     "/9" or from any earlier line; none while TotalEpochs is unknown.
//   - keras: "Epoch 3/10" is (3-1)/10 = 0.2; a step line is (epoch-1 + step/steps)/epochs; without an
//     "Epoch" line (fit with one epoch) step/steps.
//   - plain and pattern: an epoch line is printed when the epoch ends: epoch/epochs, with the line's total
//     or TotalEpochs from an earlier line; a step on a line with an epoch is within the epoch and adds
//     nothing. A step line without an epoch: step/steps when the line has a total.
//   - xgboost, lightgbm, catboost and sklearn: as plain, rounds, iterations and epochs done over an
//     earlier line's TotalEpochs; none of them prints its total.
//   - json: epoch/epochs, else step/steps, with the line's total or an earlier one.
//
// A line that carries an epoch or step counter but gives no basis for Fraction keeps the previous
// Fraction only when that came from the same kind of counter (epochs, or steps; Hugging Face's fractional
// epoch is its global step over the steps per epoch, so it counts as steps): a bar "Epoch 4:  45%|..."
// (an epoch without a total) after "epoch 3/10 loss 0.2" keeps 0.3, still true, while "Epoch 1: 1234it
// [...]" after a step bar's 0.5 drops it, since the program is now counting something else. Lines
// without a counter (Hugging Face's banner, a dictionary without 'epoch') leave Fraction alone.
//
// Every other field is the latest value printed: a line replaces only the fields it carries, and a line
// of another format does not erase them. A recognised line that prints its loss as nan or inf (any case,
// a sign, JSON's NaN and Infinity: a diverged run) forgets the held Loss: the last finite one is not the
// current epoch's. Step and TotalSteps are as printed: the run's steps for a bar
// over the whole run (Hugging Face), the epoch's batches for a bar per epoch (Keras, Lightning).
package recognize

import (
	"fmt"
	"math"
	"regexp"

	patterns "github.com/trainingjob-operator/trainingjob-operator/internal/pattern"
)

// The format names Line returns.
const (
	FormatPattern     = "pattern"
	FormatTQDM        = "tqdm"
	FormatHuggingFace = "huggingface"
	FormatLightning   = "lightning"
	FormatKeras       = "keras"
	FormatPlain       = "plain"
	FormatXGBoost     = "xgboost"
	FormatLightGBM    = "lightgbm"
	FormatCatBoost    = "catboost"
	FormatSklearn     = "sklearn"
	FormatJSON        = "json"
)

const (
	// MaxLineBytes is the longest line Line reads; the rest of a longer one is ignored.
	MaxLineBytes = 4096
)

// Progress is what the lines recognised so far say; nil fields were never seen.
type Progress struct {
	// Epoch is the epoch number as the program printed it; TotalEpochs the planned epochs.
	Epoch, TotalEpochs *float64
	// Step and TotalSteps are the step (or batch) and the planned steps, as printed.
	Step, TotalSteps *float64
	// Fraction is how much of the run is done, 0 to 1, by the printing library's own convention (a
	// Keras "Epoch 3/10" starts the third epoch: 0.2 done). See the package documentation.
	Fraction *float64
	// Loss, Accuracy, LearningRate and Throughput (samples or iterations per second) are the latest.
	Loss, Accuracy, LearningRate, Throughput *float64
	// Metrics are the latest values of the named metrics (see the package documentation), sorted by name;
	// nil when none was seen.
	Metrics []NamedMetric
}

// Recognizer reads lines one at a time and keeps the latest progress they carry. It is not safe for
// concurrent use.
type Recognizer struct {
	pattern *regexp.Regexp
	// groups is the submatch number of each field's named group, 0 when the pattern has none.
	groups [numFields]int
	// state holds the latest fields; its counter is the kind of counter its Fraction came from.
	state reading
	// runSteps is Hugging Face's "Total optimization steps", 0 until seen.
	runSteps float64
	keras    kerasEpoch
	// lgbRound is the last LightGBM round read, 0 before any.
	lgbRound float64
	named    namedSet
	// buf holds the cleaned line (escape sequences and control bytes dropped); line what it says.
	buf  []byte
	line reading
}

// kerasEpoch is the epoch the last Keras "Epoch N/M" line started, and the steps of its first step line.
type kerasEpoch struct {
	epoch, epochs, steps float64
	ok                   bool
}

// New returns a Recognizer; pattern, when not empty, is an RE2 expression with named groups (epoch,
// epochs, step, steps, loss, accuracy, lr, throughput) tried on every line before the built-in formats.
// New fails when package pattern does not compile the pattern (too long, too large, not RE2), or it has none of those
// group names.
func New(pattern string) (*Recognizer, error) {
	r := &Recognizer{}
	if pattern == "" {
		return r, nil
	}
	re, err := patterns.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("progress pattern %w", err)
	}
	named := false
	for i, name := range re.SubexpNames() {
		for f, fn := range fieldNames {
			if name == fn {
				r.groups[f], named = i, true
			}
		}
	}
	if !named {
		return nil, fmt.Errorf("progress pattern %q has no named group epoch, epochs, step, steps, loss, accuracy, lr or "+
			"throughput, as in (?P<loss>[0-9.]+)", pattern)
	}
	r.pattern = re
	return r, nil
}

// Line reads one line (without its "\n" or "\r") and says which format it recognised ("" and false when
// none): tqdm, huggingface, lightning, keras, xgboost, lightgbm, catboost, sklearn, json, plain or
// pattern.
func (r *Recognizer) Line(line []byte) (format string, ok bool) {
	if len(line) > MaxLineBytes {
		line = line[:MaxLineBytes]
	}
	rd := &r.line // kept in the Recognizer: a local one would escape through the parsers' function values
	*rd = reading{}
	r.named.reset()
	if format = r.recognize(line, rd); format == "" {
		return "", false
	}
	r.apply(rd)
	r.named.apply()
	return format, true
}

// recognize tries the job's pattern, then the built-in formats whose bytes the line contains.
func (r *Recognizer) recognize(raw []byte, rd *reading) string {
	if r.pattern != nil {
		c := sniff(raw)
		s := r.clean(raw)
		if r.matchPattern(s, rd) {
			return FormatPattern
		}
		return r.builtin(s, c, rd)
	}
	c := sniff(raw)
	if c == 0 {
		return ""
	}
	return r.builtin(r.clean(raw), c, rd)
}

// apply records a recognised line: its fields replace the old ones, and its Fraction, when it gives
// one; a counter without a Fraction drops a Fraction from another kind of counter.
func (r *Recognizer) apply(rd *reading) {
	for f := range numFields {
		if v, ok := rd.get(f); ok {
			r.state.put(f, v)
		}
	}
	if _, ok := rd.get(fLoss); rd.diverged && !ok {
		r.state.set &^= 1 << fLoss // a loss that is no number is no loss: not the last finite one
	}
	switch {
	case rd.hasFrac:
		r.state.frac, r.state.hasFrac, r.state.counter = rd.frac, true, rd.counter
	case rd.counter != noCounter && rd.counter != r.state.counter:
		r.state.frac, r.state.hasFrac, r.state.counter = 0, false, noCounter
	}
}

// Progress returns the latest progress recognised.
func (r *Recognizer) Progress() Progress {
	var p Progress
	dst := [numFields]**float64{&p.Epoch, &p.TotalEpochs, &p.Step, &p.TotalSteps, &p.Loss, &p.Accuracy,
		&p.LearningRate, &p.Throughput}
	for f := range numFields {
		if v, ok := r.state.get(f); ok {
			*dst[f] = &v
		}
	}
	if r.state.hasFrac {
		f := r.state.frac
		p.Fraction = &f
	}
	p.Metrics = r.named.metrics()
	return p
}

// field is one of Progress's fields other than Fraction.
type field uint8

const (
	fEpoch field = iota
	fEpochs
	fStep
	fSteps
	fLoss
	fAccuracy
	fLR
	fThroughput
	numFields
)

// fieldNames are the pattern's group names, by field.
var fieldNames = [numFields]string{"epoch", "epochs", "step", "steps", "loss", "accuracy", "lr", "throughput"}

// FieldNames returns the named groups of a job's pattern that set a field, in field order.
func FieldNames() []string { return append([]string(nil), fieldNames[:]...) }

// counter is the kind of counter a line carries, and a Fraction came from.
type counter uint8

const (
	noCounter counter = iota
	epochCounter
	stepCounter
)

// reading is what one line says (or, as Recognizer.state, all lines so far).
type reading struct {
	val     [numFields]float64
	set     uint16
	frac    float64
	hasFrac bool
	counter counter
	// diverged: the line printed its loss as nan or inf (a run that diverged), which forgets the held loss.
	diverged bool
}

// put sets a field to a finite value; it ignores NaN and infinities.
func (rd *reading) put(f field, v float64) bool {
	if !finite(v) {
		return false
	}
	rd.val[f] = v
	rd.set |= 1 << f
	return true
}

// finite reports whether v is neither NaN nor an infinity.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func (rd *reading) get(f field) (float64, bool) { return rd.val[f], rd.set&(1<<f) != 0 }

// fraction records that the line carries counter c and, when total is positive, that done/total of the
// run is done (clamped to [0, 1]).
func (rd *reading) fraction(done, total float64, c counter) {
	rd.counter = c
	f := done / total
	if !(total > 0) || math.IsNaN(f) {
		return
	}
	rd.frac, rd.hasFrac = math.Max(0, math.Min(1, f)), true
}

// known returns the line's value of f, else the latest one seen.
func (r *Recognizer) known(rd *reading, f field) (float64, bool) {
	if v, ok := rd.get(f); ok {
		return v, true
	}
	return r.state.get(f)
}

// counterFraction applies the plain convention: an epoch line is epoch/epochs (the line's total or an earlier
// one), a step line without an epoch step/steps with the line's own total.
func (r *Recognizer) counterFraction(rd *reading) {
	if e, ok := rd.get(fEpoch); ok {
		total, _ := r.known(rd, fEpochs)
		rd.fraction(e, total, epochCounter)
		return
	}
	if s, ok := rd.get(fStep); ok {
		total, _ := rd.get(fSteps)
		rd.fraction(s, total, stepCounter)
	}
}
