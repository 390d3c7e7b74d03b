package recognize

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	patterns "github.com/trainingjob-operator/trainingjob-operator/internal/pattern"
)

func f(v float64) *float64 { return &v }

// approx compares Progress's figures to a relative 1e-12: (2 + 0.45)/10 is 0.24500000000000002.
var approx = cmpopts.EquateApprox(1e-12, 0)

// splitLines splits output as the supervisor does: at "\n" and at "\r", each line cut to MaxLineBytes.
func splitLines(data []byte) [][]byte {
	var lines [][]byte
	start := 0
	for i := 0; i <= len(data); i++ {
		if i < len(data) && data[i] != '\n' && data[i] != '\r' {
			continue
		}
		line := data[start:i]
		if len(line) > MaxLineBytes {
			line = line[:MaxLineBytes]
		}
		lines = append(lines, line)
		start = i + 1
	}
	return lines
}

type lineCase struct {
	name    string
	pattern string
	lines   []string
	formats []string // what Line returns for each line ("" when not recognised)
	want    Progress
}

// run feeds the case's lines to a new Recognizer and compares the formats and the final Progress.
func (tc lineCase) run(t *testing.T) {
	t.Helper()
	r, err := New(tc.pattern)
	if err != nil {
		t.Fatalf("%s: New: %v", tc.name, err)
	}
	var formats []string
	for _, line := range tc.lines {
		format, ok := r.Line([]byte(line))
		if ok != (format != "") {
			t.Errorf("%s: Line(%q) = %q, %v", tc.name, line, format, ok)
		}
		formats = append(formats, format)
	}
	if diff := cmp.Diff(tc.formats, formats); diff != "" {
		t.Errorf("%s: formats (-want +got):\n%s", tc.name, diff)
	}
	if diff := cmp.Diff(tc.want, r.Progress(), approx); diff != "" {
		t.Errorf("%s: Progress (-want +got):\n%s", tc.name, diff)
	}
}

func TestTQDM(t *testing.T) {
	for _, tc := range []lineCase{
		{name: "description and postfix",
			lines:   []string{"Epoch 3:  45%|████▌     | 45/100 [00:10<00:12,  4.50it/s, loss=0.231, lr=0.001]"},
			formats: []string{"tqdm"}, want: Progress{Epoch: f(3), Step: f(45), TotalSteps: f(100), Loss: f(0.231),
				LearningRate: f(0.001), Throughput: f(4.5)}},
		{name: "no description", lines: []string{" 45%|████▌     | 45/100 [00:10<00:12,  4.50it/s]"}, formats: []string{"tqdm"},
			want: Progress{Step: f(45), TotalSteps: f(100), Fraction: f(0.45), Throughput: f(4.5)}},
		{name: "finished", lines: []string{"train: 100%|██████████| 938/938 [00:12<00:00, 75.21it/s, loss=0.0523]"},
			formats: []string{"tqdm"}, want: Progress{Step: f(938), TotalSteps: f(938), Fraction: f(1), Loss: f(0.0523), Throughput: f(75.21)}},
		{name: "ascii bar, epoch of epochs", lines: []string{"Epoch 2/10:  45%|####5     | 45/100 [00:10<00:12,  4.50it/s]"},
			formats: []string{"tqdm"}, want: Progress{Epoch: f(2), TotalEpochs: f(10), Step: f(45), TotalSteps: f(100),
				Fraction: f(0.145), Throughput: f(4.5)}},
		{name: "seconds per iteration", lines: []string{"  3%|▎         | 3/100 [00:03<01:59,  1.25s/it]"}, formats: []string{"tqdm"},
			want: Progress{Step: f(3), TotalSteps: f(100), Fraction: f(0.03), Throughput: f(0.8)}},
		{name: "unit_scale", lines: []string{"Epoch [3/10]:  45%|████▌     | 4.50k/10.0k [00:00<00:00, 12.3kit/s]"},
			formats: []string{"tqdm"}, want: Progress{Epoch: f(3), TotalEpochs: f(10), Step: f(4500), TotalSteps: f(10000),
				Fraction: f(0.245), Throughput: f(12300)}},
		{name: "first draw", lines: []string{"  0%|          | 0/100 [00:00<?, ?it/s]"}, formats: []string{"tqdm"},
			want: Progress{Step: f(0), TotalSteps: f(100), Fraction: f(0)}},
		{name: "total-less", lines: []string{"Epoch 2: 1234it [00:10, 123.40it/s, loss=0.5]"}, formats: []string{"tqdm"},
			want: Progress{Epoch: f(2), Step: f(1234), Loss: f(0.5), Throughput: f(123.4)}},
		{name: "escapes and torchrun prefix",
			lines:   []string{"[rank0]:\x1b[A\x1b[2K 45%|\x1b[32m████▌     \x1b[0m| 45/100 [00:10<00:12,  4.50it/s]"},
			formats: []string{"tqdm"}, want: Progress{Step: f(45), TotalSteps: f(100), Fraction: f(0.45), Throughput: f(4.5)}},
		{name: "custom unit",
			lines:   []string{"Epoch 1 of 4: 100%|██████████| 994/994 [03:44<00:00,  4.42batch/s, avg_loss=0.34, loss=0.06]"},
			formats: []string{"tqdm"}, want: Progress{Epoch: f(1), TotalEpochs: f(4), Step: f(994), TotalSteps: f(994), Fraction: f(0.25),
				Loss: f(0.06), Throughput: f(4.42), Metrics: []NamedMetric{{Name: "avg_loss", Value: 0.34}}}},
	} {
		tc.run(t)
	}
}

func TestHuggingFace(t *testing.T) {
	logLine := "{'loss': 0.6931, 'grad_norm': 1.2345, 'learning_rate': 4.9e-05, 'epoch': 0.05}"
	gradNorm := []NamedMetric{{Name: "grad_norm", Value: 1.2345}}
	for _, tc := range []lineCase{
		{name: "a nan loss", lines: []string{logLine, "{'loss': nan, 'grad_norm': 1.2345, 'learning_rate': 4.9e-05, 'epoch': 0.1}"},
			formats: []string{"huggingface", "huggingface"},
			want:    Progress{Epoch: f(0.1), LearningRate: f(4.9e-05), Metrics: gradNorm}},
		{name: "banner then log", lines: []string{"  Num Epochs = 3", "  Total optimization steps = 1,875", logLine},
			formats: []string{"huggingface", "huggingface", "huggingface"}, want: Progress{Epoch: f(0.05), TotalEpochs: f(3),
				TotalSteps: f(1875), Fraction: f(0.05 / 3), Loss: f(0.6931), LearningRate: f(4.9e-05), Metrics: gradNorm}},
		{name: "log without banner", lines: []string{logLine}, formats: []string{"huggingface"},
			want: Progress{Epoch: f(0.05), Loss: f(0.6931), LearningRate: f(4.9e-05), Metrics: gradNorm}},
		{name: "quoted values", lines: []string{"{'loss': '0.6931', 'learning_rate': '4.9e-05', 'epoch': '0.05'}"},
			formats: []string{"huggingface"}, want: Progress{Epoch: f(0.05), Loss: f(0.6931), LearningRate: f(4.9e-05)}},
		{name: "evaluation", lines: []string{logLine, "{'eval_loss': 0.41, 'eval_accuracy': 0.87, 'eval_runtime': 2.1, " +
			"'eval_samples_per_second': 476.2, 'epoch': 1.0}"}, formats: []string{"huggingface", "huggingface"},
			want: Progress{Epoch: f(1), Loss: f(0.6931), Accuracy: f(0.87), LearningRate: f(4.9e-05), Metrics: []NamedMetric{
				{Name: "eval_loss", Value: 0.41}, {Name: "eval_runtime", Value: 2.1}, {Name: "eval_samples_per_second", Value: 476.2},
				{Name: "grad_norm", Value: 1.2345}}}},
		{name: "final", lines: []string{"  Num Epochs = 3", "{'train_runtime': 12.3, 'train_samples_per_second': 40.2, " +
			"'train_steps_per_second': 5.0, 'train_loss': 0.5, 'epoch': 3.0}"}, formats: []string{"huggingface", "huggingface"},
			want: Progress{Epoch: f(3), TotalEpochs: f(3), Fraction: f(1), Loss: f(0.5), Throughput: f(40.2), Metrics: []NamedMetric{
				{Name: "train_runtime", Value: 12.3}, {Name: "train_steps_per_second", Value: 5}}}},
		{name: "evaluation bar ignored", lines: []string{"  Total optimization steps = 375",
			" 45%|████▌     | 169/375 [00:05<00:07, 30.49it/s]", " 50%|█████     | 16/32 [00:00<00:00, 45.20it/s]\x1b[A"},
			formats: []string{"huggingface", "tqdm", ""}, want: Progress{Step: f(169), TotalSteps: f(375), Fraction: f(169.0 / 375),
				Throughput: f(30.49)}},
		{name: "log keeps the step bar's fraction", lines: []string{" 45%|████▌     | 169/375 [00:05<00:07, 30.49it/s]",
			"{'loss': 0.4, 'learning_rate': 3e-05, 'epoch': 1.35}"}, formats: []string{"tqdm", "huggingface"},
			want: Progress{Epoch: f(1.35), Step: f(169), TotalSteps: f(375), Fraction: f(169.0 / 375), Loss: f(0.4),
				LearningRate: f(3e-05), Throughput: f(30.49)}},
	} {
		tc.run(t)
	}
}

func TestLightning(t *testing.T) {
	for _, tc := range []lineCase{
		{name: "tqdm bar", lines: []string{"Epoch 0:  45%|████▌     | 422/938 [00:05<00:06, 80.12it/s, v_num=0, train_loss=0.231]"},
			formats: []string{"lightning"}, want: Progress{Epoch: f(0), Step: f(422), TotalSteps: f(938), Loss: f(0.231), Throughput: f(80.12)}},
		{name: "tqdm bar, epochs known", lines: []string{"Epoch 0/9  ━━━━━━━━━━ 938/938 0:00:12 • 0:00:00 75.21it/s",
			"Epoch 1:  50%|█████     | 469/938 [00:05<00:06, 80.12it/s, v_num=3, train_loss_step=0.2, train_loss_epoch=0.3]"},
			formats: []string{"lightning", "lightning"}, want: Progress{Epoch: f(1), TotalEpochs: f(10), Step: f(469), TotalSteps: f(938),
				Fraction: f(0.15), Loss: f(0.2), Throughput: f(80.12), Metrics: []NamedMetric{{Name: "train_loss_epoch", Value: 0.3}}}},
		{name: "rich bar",
			lines: []string{"Epoch 3/9  ━━━━━━━━━━━━━━━━━━━━" +
				"━━━━━━━━━━━━━━━━━━━━ 938/938 0:00:12 • 0:00:00 75.21it/s v_num: 0 train_loss: 0.123"},
			formats: []string{"lightning"}, want: Progress{Epoch: f(3), TotalEpochs: f(10), Step: f(938), TotalSteps: f(938), Fraction: f(0.4),
				Loss: f(0.123), Throughput: f(75.21)}},
		{name: "rich bar mid-epoch",
			lines: []string{"Epoch 3/9  \x1b[38;2;98;6;224m━━━━━━━━━━╸\x1b[0m━━━━━━━━━ 469/938 " +
				"\x1b[2m0:00:06 • 0:00:06\x1b[0m 75.21it/s v_num: 0 train_loss: 0.123"},
			formats: []string{"lightning"}, want: Progress{Epoch: f(3), TotalEpochs: f(10), Step: f(469), TotalSteps: f(938), Fraction: f(0.35),
				Loss: f(0.123), Throughput: f(75.21)}},
		{name: "rich bar, no max_epochs, no length",
			lines:   []string{"Epoch 3/-2 ━━━━━━━━━━ 422/-- 0:00:05 • -:--:-- 80.12it/s"},
			formats: []string{"lightning"}, want: Progress{Epoch: f(3), Step: f(422), Throughput: f(80.12)}},
		{name: "validation bar ignored", lines: []string{"Validation DataLoader 0:  50%|█████     | 79/157 [00:00<00:00, 250.10it/s]",
			"Validation ━━━━━━━━━━ 79/157 0:00:00 • 0:00:01 250.10it/s"}, formats: []string{"", ""}},
	} {
		tc.run(t)
	}
}

func TestKeras(t *testing.T) {
	kerasVal := []NamedMetric{{Name: "val_accuracy", Value: 0.97}, {Name: "val_loss", Value: 0.1}}
	for _, tc := range []lineCase{
		{name: "epoch line", lines: []string{"Epoch 3/10"}, formats: []string{"keras"},
			want: Progress{Epoch: f(3), TotalEpochs: f(10), Fraction: f(0.2)}},
		{name: "keras 2 step",
			lines:   []string{"Epoch 3/10", "469/938 [==============>...............] - ETA: 5s - loss: 0.2973 - accuracy: 0.9140"},
			formats: []string{"keras", "keras"}, want: Progress{Epoch: f(3), TotalEpochs: f(10), Step: f(469), TotalSteps: f(938),
				Fraction: f(0.25), Loss: f(0.2973), Accuracy: f(0.914)}},
		{name: "keras 2 epoch end", lines: []string{"Epoch 3/10", "938/938 [==============================] - 3s 3ms/step - loss: 0.2973 - " +
			"accuracy: 0.9140 - val_loss: 0.1 - val_accuracy: 0.97"}, formats: []string{"keras", "keras"},
			want: Progress{Epoch: f(3), TotalEpochs: f(10), Step: f(938), TotalSteps: f(938), Fraction: f(0.3), Loss: f(0.2973),
				Accuracy: f(0.914), Throughput: f(1 / 0.003), Metrics: kerasVal}},
		{name: "keras 3, one epoch",
			lines:   []string{" 469/938 ━━━━━━━━━━━━━━━━━━━━ 3s 3ms/step - accuracy: 0.9140 - loss: 0.2973"},
			formats: []string{"keras"}, want: Progress{Step: f(469), TotalSteps: f(938), Fraction: f(0.5), Loss: f(0.2973),
				Accuracy: f(0.914), Throughput: f(1 / 0.003)}},
		{name: "verbose 2", lines: []string{"Epoch 1/2", "938/938 - 3s - 3ms/step - loss: 0.2973 - accuracy: 0.9140"},
			formats: []string{"keras", "keras"}, want: Progress{Epoch: f(1), TotalEpochs: f(2), Step: f(938), TotalSteps: f(938),
				Fraction: f(0.5), Loss: f(0.2973), Accuracy: f(0.914), Throughput: f(1 / 0.003)}},
		{name: "evaluate ignored", lines: []string{"Epoch 10/10", "938/938 [==============================] - 3s 3ms/step - loss: 0.2",
			"313/313 [==============================] - 1s 2ms/step - loss: 0.0850 - accuracy: 0.9750"},
			formats: []string{"keras", "keras", ""}, want: Progress{Epoch: f(10), TotalEpochs: f(10), Step: f(938), TotalSteps: f(938),
				Fraction: f(1), Loss: f(0.2), Throughput: f(1 / 0.003)}},
		{name: "unknown steps", lines: []string{"    469/Unknown 3s 6ms/step - loss: 0.2973"}, formats: []string{"keras"},
			want: Progress{Step: f(469), Loss: f(0.2973), Throughput: f(1 / 0.006)}},
	} {
		tc.run(t)
	}
}

func TestPlain(t *testing.T) {
	for _, tc := range []lineCase{
		{name: "epoch of epochs", lines: []string{"epoch 19/26 loss 0.0526"}, formats: []string{"plain"},
			want: Progress{Epoch: f(19), TotalEpochs: f(26), Fraction: f(19.0 / 26), Loss: f(0.0526)}},
		{name: "key=value", lines: []string{"epoch 3/10 loss=0.231 accuracy=0.9368 lr=0.001"}, formats: []string{"plain"},
			want: Progress{Epoch: f(3), TotalEpochs: f(10), Fraction: f(0.3), Loss: f(0.231), Accuracy: f(0.9368), LearningRate: f(0.001)}},
		{name: "pytorch tutorial", lines: []string{"Epoch [3/10], Step [100/600], Loss: 0.2345"}, formats: []string{"plain"},
			want: Progress{Epoch: f(3), TotalEpochs: f(10), Step: f(100), TotalSteps: f(600), Fraction: f(0.3), Loss: f(0.2345)}},
		{name: "percent kept as printed", lines: []string{"Epoch: 3/10 | Loss: 0.23 | Acc: 91.2%"}, formats: []string{"plain"},
			want: Progress{Epoch: f(3), TotalEpochs: f(10), Fraction: f(0.3), Loss: f(0.23), Accuracy: f(91.2)}},
		{name: "step line", lines: []string{"step 100/1000 loss 0.5 lr 1e-4"}, formats: []string{"plain"},
			want: Progress{Step: f(100), TotalSteps: f(1000), Fraction: f(0.1), Loss: f(0.5), LearningRate: f(1e-4)}},
		{name: "bracketed", lines: []string{"[epoch 3/10] train_loss=0.2"}, formats: []string{"plain"},
			want: Progress{Epoch: f(3), TotalEpochs: f(10), Fraction: f(0.3), Loss: f(0.2)}},
		{name: "of", lines: []string{"Epoch 3 of 10"}, formats: []string{"plain"},
			want: Progress{Epoch: f(3), TotalEpochs: f(10), Fraction: f(0.3)}},
		{name: "upper case, exponent", lines: []string{"EPOCH 3/10 LOSS 2.5E-05"}, formats: []string{"plain"},
			want: Progress{Epoch: f(3), TotalEpochs: f(10), Fraction: f(0.3), Loss: f(2.5e-05)}},
		{name: "no total", lines: []string{"epoch 3 loss 0.2"}, formats: []string{"plain"}, want: Progress{Epoch: f(3), Loss: f(0.2)}},
		{name: "earlier total", lines: []string{"epoch 3/10 loss 0.3", "epoch 4 loss 0.2"}, formats: []string{"plain", "plain"},
			want: Progress{Epoch: f(4), TotalEpochs: f(10), Fraction: f(0.4), Loss: f(0.2)}},
		{name: "validation metrics skipped", lines: []string{"Epoch 3/10 | Train Loss: 0.23 | Val Loss: 0.31 | val_acc: 0.9"},
			formats: []string{"plain"}, want: Progress{Epoch: f(3), TotalEpochs: f(10), Fraction: f(0.3), Loss: f(0.23)}},
		{name: "clamped", lines: []string{"epoch 12/10 loss 0.1"}, formats: []string{"plain"},
			want: Progress{Epoch: f(12), TotalEpochs: f(10), Fraction: f(1), Loss: f(0.1)}},
		// A diverged run's loss is no number: the last finite one is not the current epoch's.
		{name: "a nan loss forgets the last", lines: []string{"epoch 1/3 loss=0.1", "epoch 2/3 loss=nan"},
			formats: []string{"plain", "plain"}, want: Progress{Epoch: f(2), TotalEpochs: f(3), Fraction: f(2.0 / 3)}},
		{name: "inf, -inf, NaN in any case", lines: []string{"epoch 1/4 loss 0.1", "epoch 2/4 loss: -inf", "epoch 3/4 loss 0.2",
			"epoch 4/4 Loss: NaN"}, formats: []string{"plain", "plain", "plain", "plain"},
			want: Progress{Epoch: f(4), TotalEpochs: f(4), Fraction: f(1)}},
		{name: "a loss too large for a float is no finite one", lines: []string{"epoch 1/3 loss=0.1", "epoch 2/3 loss=1e999"},
			formats: []string{"plain", "plain"}, want: Progress{Epoch: f(2), TotalEpochs: f(3), Fraction: f(2.0 / 3)}},
		{name: "a finite loss after nan", lines: []string{"epoch 1/3 loss=nan", "epoch 2/3 loss=0.3"},
			formats: []string{"plain", "plain"}, want: Progress{Epoch: f(2), TotalEpochs: f(3), Fraction: f(2.0 / 3), Loss: f(0.3)}},
		{name: "a word that starts like nan is no loss", lines: []string{"epoch 1/3 loss=0.1", "epoch 2/3 loss nanoseconds"},
			formats: []string{"plain", "plain"}, want: Progress{Epoch: f(2), TotalEpochs: f(3), Fraction: f(2.0 / 3), Loss: f(0.1)}},
	} {
		tc.run(t)
	}
}

func TestPattern(t *testing.T) {
	const iter = `iter (?P<step>\d+)/(?P<steps>\d+) loss=(?P<loss>\S+)`
	for _, tc := range []lineCase{
		{name: "match", pattern: iter, lines: []string{"iter 50/200 loss=0.25"}, formats: []string{"pattern"},
			want: Progress{Step: f(50), TotalSteps: f(200), Fraction: f(0.25), Loss: f(0.25)}},
		{name: "invalid number ignored", pattern: iter, lines: []string{"iter 50/200 loss=nan"}, formats: []string{"pattern"},
			want: Progress{Step: f(50), TotalSteps: f(200), Fraction: f(0.25)}},
		{name: "before the built-in formats", pattern: `(?i)epoch (?P<epoch>\d+)`, lines: []string{"epoch 3/10 loss 0.2"},
			formats: []string{"pattern"}, want: Progress{Epoch: f(3)}},
		{name: "built-in formats after", pattern: iter, lines: []string{"epoch 3/10 loss 0.2"}, formats: []string{"plain"},
			want: Progress{Epoch: f(3), TotalEpochs: f(10), Fraction: f(0.3), Loss: f(0.2)}},
		{name: "percent, suffix, throughput", pattern: `acc (?P<accuracy>\S+) speed (?P<throughput>\S+) img/s`,
			lines: []string{"acc 91.2% speed 1.5k img/s"}, formats: []string{"pattern"}, want: Progress{Accuracy: f(91.2), Throughput: f(1500)}},
		{name: "escapes dropped first", pattern: `^loss (?P<loss>\S+)$`, lines: []string{"[default0]:\x1b[1mloss 0.5\x1b[0m"},
			formats: []string{"pattern"}, want: Progress{Loss: f(0.5)}},
		{name: "built-in formats after, tabs as printed", pattern: iter, lines: []string{"3:\tlearn: 0.5\ttotal: 1s\tremaining: 2s"},
			formats: []string{"catboost"}, want: Progress{Epoch: f(4), Loss: f(0.5), Metrics: []NamedMetric{{Name: "learn", Value: 0.5}}}},
	} {
		tc.run(t)
	}
}

func TestBoosting(t *testing.T) {
	xgbRound := "[12]\ttrain-logloss:0.25514\ttrain-error:0.10750\teval-logloss:0.25627\teval-error:0.15500"
	for _, tc := range []lineCase{
		{name: "xgboost: rounds from 0, the first dataset's first loss", lines: []string{xgbRound}, formats: []string{"xgboost"},
			want: Progress{Epoch: f(13), Loss: f(0.25514), Metrics: []NamedMetric{{Name: "eval-error", Value: 0.155},
				{Name: "eval-logloss", Value: 0.25627}, {Name: "train-error", Value: 0.1075}, {Name: "train-logloss", Value: 0.25514}}}},
		{name: "xgboost: a first metric that is no loss",
			lines:   []string{"[0]\tvalidation_0-auc:0.91\tvalidation_0-rmse:0.4\tvalidation_1-rmse:0.5"},
			formats: []string{"xgboost"}, want: Progress{Epoch: f(1), Loss: f(0.4), Metrics: []NamedMetric{{Name: "validation_0-auc", Value: 0.91},
				{Name: "validation_0-rmse", Value: 0.4}, {Name: "validation_1-rmse", Value: 0.5}}}},
		{name: "xgboost: an accuracy, not an error rate", lines: []string{"[3]\ttrain-interval-regression-accuracy:0.8\ttrain-merror:0.2"},
			formats: []string{"xgboost"}, want: Progress{Epoch: f(4), Loss: f(0.2), Accuracy: f(0.8), Metrics: []NamedMetric{
				{Name: "train-interval-regression-accuracy", Value: 0.8}, {Name: "train-merror", Value: 0.2}}}},
		{name: "xgboost: cv's standard deviation", lines: []string{"[4]\ttrain-logloss:0.34209+0.00731\ttest-logloss:0.43894±0.00233"},
			formats: []string{"xgboost"}, want: Progress{Epoch: f(5), Loss: f(0.34209), Metrics: []NamedMetric{
				{Name: "test-logloss", Value: 0.43894},
				{Name: "train-logloss", Value: 0.34209}}}},
		{name: "xgboost: an earlier total gives the fraction", lines: []string{"epoch 0/40 loss 0.7", "[19]\ttrain-rmse:0.3"},
			formats: []string{"plain", "xgboost"}, want: Progress{Epoch: f(20), TotalEpochs: f(40), Fraction: f(0.5), Loss: f(0.3),
				Metrics: []NamedMetric{{Name: "train-rmse", Value: 0.3}}}},
		{name: "xgboost under torchrun, spaces for tabs", lines: []string{"[default0]:[7] train-mae:1.5 eval-mae:1.7"},
			formats: []string{"xgboost"},
			want:    Progress{Epoch: f(8), Loss: f(1.5), Metrics: []NamedMetric{{Name: "eval-mae", Value: 1.7}, {Name: "train-mae", Value: 1.5}}}},
		{name: "lightgbm: rounds from 1, <dataset>-<metric>", lines: []string{"[10]\tvalid_0's binary_logloss: 0.213\tvalid_0's auc: 0.95"},
			formats: []string{"lightgbm"}, want: Progress{Epoch: f(10), Loss: f(0.213), Metrics: []NamedMetric{{Name: "valid_0-auc", Value: 0.95},
				{Name: "valid_0-binary_logloss", Value: 0.213}}}},
		{name: "lightgbm: the training set first", lines: []string{"[10]\ttraining's l2: 0.5\tvalid_1's l2: 0.6"}, formats: []string{"lightgbm"},
			want: Progress{Epoch: f(10), Loss: f(0.5), Metrics: []NamedMetric{{Name: "training-l2", Value: 0.5}, {Name: "valid_1-l2", Value: 0.6}}}},
		{name: "lightgbm: cv's aggregate", lines: []string{"[3]\tcv_agg's valid l2: 0.52 + 0.03"}, formats: []string{"lightgbm"},
			want: Progress{Epoch: f(3), Loss: f(0.52), Metrics: []NamedMetric{{Name: "cv_agg-valid_l2", Value: 0.52}}}},
		{name: "lightgbm: the best iteration after early stopping is ignored, a new training is not",
			lines:   []string{"[35]\tvalid_0's l1: 0.3", "Early stopping, best iteration is:", "[30]\tvalid_0's l1: 0.2", "[1]\tvalid_0's l1: 0.9"},
			formats: []string{"lightgbm", "", "", "lightgbm"}, want: Progress{Epoch: f(1), Loss: f(0.9),
				Metrics: []NamedMetric{{Name: "valid_0-l1", Value: 0.9}}}},
		{name: "catboost: iterations from 0, learn is the loss",
			lines:   []string{"0:\tlearn: 0.6803000\ttest: 0.6810000\tbest: 0.6810000 (0)\ttotal: 52.1ms\tremaining: 5.16s"},
			formats: []string{"catboost"}, want: Progress{Epoch: f(1), Loss: f(0.6803), Metrics: []NamedMetric{{Name: "learn", Value: 0.6803},
				{Name: "test", Value: 0.681}}}},
		{name: "catboost: no eval set, a second one",
			lines: []string{"999:\tlearn: 0.0306\ttotal: 2.3s\tremaining: 0us",
				"5:\tlearn: 0.5\ttest: 0.6\ttest1: 0.7\tbest: 0.6 (5)\ttotal: 1m 2s\tremaining: 1h 3m"},
			formats: []string{"catboost", "catboost"}, want: Progress{Epoch: f(6), Loss: f(0.5), Metrics: []NamedMetric{{Name: "learn", Value: 0.5},
				{Name: "test", Value: 0.6}, {Name: "test1", Value: 0.7}}}},
	} {
		tc.run(t)
	}
}

func TestSklearn(t *testing.T) {
	for _, tc := range []lineCase{
		{name: "MLP", lines: []string{"Iteration 4, loss = 0.60151891"}, formats: []string{"sklearn"},
			want: Progress{Epoch: f(4), Loss: f(0.60151891)}},
		{name: "SGD", lines: []string{"-- Epoch 3", "Norm: 87.82, NNZs: 8, Bias: 1.415956, T: 1500, Avg. loss: 0.524579",
			"Total training time: 0.00 seconds."}, formats: []string{"sklearn", "sklearn", ""}, want: Progress{Epoch: f(3), Loss: f(0.524579)}},
		{name: "MLP after an earlier total", lines: []string{"Epoch 3 of 10", "Iteration 5, loss = 0.5"}, formats: []string{"plain", "sklearn"},
			want: Progress{Epoch: f(5), TotalEpochs: f(10), Fraction: f(0.5), Loss: f(0.5)}},
	} {
		tc.run(t)
	}
}

func TestJSON(t *testing.T) {
	for _, tc := range []lineCase{
		{name: "NaN and -Infinity losses forget the last", lines: []string{`{"epoch": 1, "loss": 0.5}`, `{"epoch": 2, "loss": NaN}`,
			`{"epoch": 3, "loss": 0.4}`, `{"epoch": 4, "loss": -Infinity, "acc": 0.1}`}, formats: []string{"json", "json", "json", "json"},
			want: Progress{Epoch: f(4), Accuracy: f(0.1)}},
		{name: "1e999 forgets the loss and a named metric", lines: []string{`{"epoch": 1, "loss": 0.5, "val_auc": 0.9}`,
			`{"epoch": 2, "loss": 1e999, "val_auc": -1e999}`}, formats: []string{"json", "json"}, want: Progress{Epoch: f(2)}},
		{name: "counters and loss", lines: []string{`{"epoch": 1, "step": 100, "loss": 0.5}`}, formats: []string{"json"},
			want: Progress{Epoch: f(1), Step: f(100), Loss: f(0.5)}},
		{name: "a JSON logger's line", lines: []string{`{"level":"info","msg":"epoch done","epoch":3,"loss":0.2,"val_acc":0.81}`},
			formats: []string{"json"}, want: Progress{Epoch: f(3), Loss: f(0.2), Metrics: []NamedMetric{{Name: "val_acc", Value: 0.81}}}},
		{name: "totals, learning rate, accuracy, throughput",
			lines:   []string{`{"epoch": 2, "num_epochs": 8, "learning_rate": 1e-4, "train_accuracy": 0.9, "samples_per_second": 512.5}`},
			formats: []string{"json"}, want: Progress{Epoch: f(2), TotalEpochs: f(8), Fraction: f(0.25), Accuracy: f(0.9), LearningRate: f(1e-4),
				Throughput: f(512.5)}},
		{name: "steps without epochs", lines: []string{`{"global_step": 250, "max_steps": 1000, "loss": 0.4}`}, formats: []string{"json"},
			want: Progress{Step: f(250), TotalSteps: f(1000), Fraction: f(0.25), Loss: f(0.4)}},
		{name: "an evaluation line keeps the step fraction",
			lines:   []string{`{"epoch": 1, "step": 50, "total_steps": 500, "loss": 0.7}`, `{"epoch": 1, "val_loss": 0.8}`},
			formats: []string{"json", "json"}, want: Progress{Epoch: f(1), Step: f(50), TotalSteps: f(500), Fraction: f(0.1), Loss: f(0.7),
				Metrics: []NamedMetric{{Name: "val_loss", Value: 0.8}}}},
		{name: "strings, booleans, nulls, nested values, NaN and logger numbers skipped",
			lines: []string{`{"ts": 1700000000.5, "level": 30, "msg": "loss: \"0.9\" {x}", "ok": true, "none": null, ` +
				`"cfg": {"loss": 9, "a": [1, {"b": "]"}]}, "loss": 0.3, "eval_loss": NaN, "big": -Infinity, "n": -2.5e-3}`},
			formats: []string{"json"}, want: Progress{Loss: f(0.3), Metrics: []NamedMetric{{Name: "n", Value: -0.0025}}}},
		{name: "Hugging Face's keys in JSON", lines: []string{`{"loss": 0.6931, "grad_norm": 1.2345, "learning_rate": 4.9e-05, "epoch": 0.05}`},
			formats: []string{"json"}, want: Progress{Epoch: f(0.05), Loss: f(0.6931), LearningRate: f(4.9e-05),
				Metrics: []NamedMetric{{Name: "grad_norm", Value: 1.2345}}}},
		{name: "not counted: no counter, no loss; not one object",
			lines: []string{`{"level": "info", "port": 8080, "num_epochs": 5}`, `{"epoch": 1, "loss": 0.5} trailing`, `{"epoch": 1, "loss": 0.5`,
				`{"epoch": 1 "loss": 0.5}`, `{"epoch": "3", "loss": "0.5"}`, `{"ep\u006fch": 1, "lr": 0.1}`},
			formats: []string{"", "", "", "", "", ""}},
	} {
		tc.run(t)
	}
}

// TestNamedMetrics: the first MaxNamedMetrics valid names are held, later new ones ignored; a name over
// MaxMetricNameBytes is ignored, not cut; values are the latest finite ones.
func TestNamedMetrics(t *testing.T) {
	var many []string
	var want []NamedMetric
	for i := range 40 {
		many = append(many, fmt.Sprintf("[%d]\tset%02d-rmse:%d", i, 39-i, i))
		if i < MaxNamedMetrics {
			want = append(want, NamedMetric{Name: fmt.Sprintf("set%02d-rmse", 39-i), Value: float64(i)})
		}
	}
	slices.Reverse(want)
	long := strings.Repeat("x", MaxMetricNameBytes-len("-rmse"))
	for _, tc := range []lineCase{
		// A diverged metric is no figure: its last finite value is not the current epoch's.
		{name: "a JSON NaN forgets a held name", lines: []string{`{"epoch": 1, "loss": 0.5, "val_auc": 0.9, "top1": 0.4}`,
			`{"epoch": 2, "loss": 0.4, "val_auc": NaN, "new": Infinity}`}, formats: []string{"json", "json"},
			want: Progress{Epoch: f(2), Loss: f(0.4), Metrics: []NamedMetric{{Name: "top1", Value: 0.4}}}},
		{name: "a Keras val_loss: nan forgets it", lines: []string{
			"938/938 [==============================] - 3s 3ms/step - loss: 0.2973 - accuracy: 0.9140 - val_loss: 0.31 - val_f1: 0.8",
			"938/938 [==============================] - 3s 3ms/step - loss: 0.2 - accuracy: 0.95 - val_loss: nan - val_f1: 0.85"},
			formats: []string{"keras", "keras"}, want: Progress{Step: f(938), TotalSteps: f(938), Fraction: f(1), Loss: f(0.2),
				Accuracy: f(0.95), Throughput: f(1 / 0.003), Metrics: []NamedMetric{{Name: "val_f1", Value: 0.85}}}},
		{name: "a Hugging Face eval_loss nan forgets it", lines: []string{"{'eval_loss': 0.5, 'epoch': 1.0}",
			"{'eval_loss': nan, 'epoch': 2.0}"}, formats: []string{"huggingface", "huggingface"},
			want: Progress{Epoch: f(2)}},
		{name: "the first 16 names", lines: many, formats: slices.Repeat([]string{"xgboost"}, 40), want: Progress{Epoch: f(40), Loss: f(39),
			Metrics: want}},
		{name: "a held name takes new values", lines: []string{"[0]\ttrain-rmse:0.5", "[1]\ttrain-rmse:0.4\ttrain-rmse:0.3"},
			formats: []string{"xgboost", "xgboost"},
			want:    Progress{Epoch: f(2), Loss: f(0.4), Metrics: []NamedMetric{{Name: "train-rmse", Value: 0.3}}}},
		{name: "64 bytes held, 65 ignored", lines: []string{"[0]\t" + long + "-rmse:1\tx" + long + "-rmse:2"}, formats: []string{"xgboost"},
			want: Progress{Epoch: f(1), Loss: f(1), Metrics: []NamedMetric{{Name: long + "-rmse", Value: 1}}}},
		{name: "invalid names and values ignored",
			lines:   []string{`{"loss": 1, "a\"b": 2, "bad` + "\xff" + `": 3, "tab\tkey": 4, "big": 1e999, "ok": 5}`},
			formats: []string{"json"}, want: Progress{Loss: f(1), Metrics: []NamedMetric{{Name: "ok", Value: 5}}}},
		{name: "a line not recognised keeps none", lines: []string{`{"level": "info", "port": 8080}`}, formats: []string{""}},
		{name: "tqdm postfix and Keras's other pairs",
			lines: []string{"Epoch 1: 100%|██████████| 10/10 [00:01<00:00,  9.90it/s, " +
				"loss=0.5, v_num=0, val_loss=0.6, top5=91.2%, note=x1]",
				"10/10 [==============================] - 1s 3ms/step - loss: 0.4 - val_loss: 0.55 - val_auc: 0.9"},
			formats: []string{"lightning", "keras"}, want: Progress{Epoch: f(1), Step: f(10), TotalSteps: f(10), Fraction: f(1), Loss: f(0.4),
				Throughput: f(1 / 0.003),
				Metrics:    []NamedMetric{{Name: "top5", Value: 91.2}, {Name: "val_auc", Value: 0.9}, {Name: "val_loss", Value: 0.55}}}},
	} {
		tc.run(t)
	}
}

// TestNamedMetricsAllocs: a line whose names are all held allocates nothing, whatever the format.
func TestNamedMetricsAllocs(t *testing.T) {
	for _, line := range []string{
		"[12]\ttrain-logloss:0.25514\ttrain-error:0.10750\teval-logloss:0.25627\teval-error:0.15500",
		"[10]\tvalid_0's binary_logloss: 0.213\tvalid_0's auc: 0.95",
		"0:\tlearn: 0.6803000\ttest: 0.6810000\tbest: 0.6810000 (0)\ttotal: 52.1ms\tremaining: 5.16s",
		`{"level":"info","msg":"epoch done","epoch":3,"step":300,"loss":0.2,"val_acc":0.81}`,
		"{'loss': 0.6931, 'grad_norm': 1.2345, 'learning_rate': 4.9e-05, 'epoch': 0.05}",
		"Epoch 3:  45%|████▌     | 45/100 [00:10<00:12,  4.50it/s, loss=0.231, avg_loss=0.3]",
	} {
		r, _ := New("")
		if _, ok := r.Line([]byte(line)); !ok {
			t.Fatalf("Line(%q) not recognised", line)
		}
		b := []byte(line)
		if n := testing.AllocsPerRun(100, func() { r.Line(b) }); n != 0 {
			t.Errorf("Line(%q): %v allocations a line, want 0", line, n)
		}
		if len(r.Progress().Metrics) == 0 {
			t.Errorf("Line(%q): no named metric", line)
		}
	}
}

func TestFractionKind(t *testing.T) {
	for _, tc := range []lineCase{
		{name: "epoch bar without total keeps an epoch fraction", lines: []string{"epoch 3/10 loss 0.2",
			"Epoch 4:  45%|████▌     | 45/100 [00:10<00:12,  4.50it/s]"}, formats: []string{"plain", "tqdm"},
			want: Progress{Epoch: f(4), TotalEpochs: f(10), Step: f(45), TotalSteps: f(100), Fraction: f(0.3), Loss: f(0.2), Throughput: f(4.5)}},
		{name: "epoch counter drops a step fraction", lines: []string{"step 500/1000 loss 0.5", "Epoch 2: 1234it [00:10, 123.40it/s]"},
			formats: []string{"plain", "tqdm"}, want: Progress{Epoch: f(2), Step: f(1234), TotalSteps: f(1000), Loss: f(0.5), Throughput: f(123.4)}},
		{name: "other formats erase nothing", lines: []string{"{'loss': 0.4, 'learning_rate': 3e-05, 'epoch': 1.35}",
			" 45%|████▌     | 169/375 [00:05<00:07, 30.49it/s]"}, formats: []string{"huggingface", "tqdm"},
			want: Progress{Epoch: f(1.35), Step: f(169), TotalSteps: f(375), Fraction: f(169.0 / 375), Loss: f(0.4),
				LearningRate: f(3e-05), Throughput: f(30.49)}},
	} {
		tc.run(t)
	}
}

func TestNotProgress(t *testing.T) {
	r, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"", "INFO: loading checkpoint epoch_3.pt", "Downloading: 45%", "2026-11-27 10:00:01 step", "Traceback (most recent call last):",
		`  File "/app/train.py", line 42, in train_epoch`, "    for epoch in range(num_epochs):", "num_epochs: 10", "max_steps=1000",
		"Resuming training from checkpoint with epoch 3 and global step 1200", "loss: 0.5",
		"Downloading data: 100%|██████████| 9.91M/9.91M [00:01<00:00, 5.27MB/s]",
		"Map: 100%|██████████| 60000/60000 [00:02<00:00, 25000.00 examples/s]",
		"model.safetensors: 100%|██████████| 440M/440M [00:05<00:00, 80.1MB/s]",
		"Sanity Checking DataLoader 0: 100%|██████████| 2/2 [00:00<00:00, 80.12it/s]",
		"Sanity Checking: |          | 0/? [00:00<?, ?it/s]",
		"Loading checkpoint shards: 100%|██████████| 2/2 [00:03<00:00,  1.52s/it]",
		"{'lr': 0.001, 'batch_size': 32, 'epochs': 10}",
		"Epoch 3: val_loss improved from 0.30000 to 0.20000, saving model to best.keras", "  | Name  | Type       | Params | Mode",
		"Epoch 0, global step 938: 'val_loss' reached 0.10100 (best 0.10100), saving model to '/ckpt/epoch=0-step=938.ckpt'",
		"step 1e999/10 loss nan", "epoch 3.5/10", "\x00\xff\xfe epoch \x1b[", "Timestep 5/10",
		"Running tokenizer on dataset: 100%|██████████| 10000/10000 [00:03<00:00, 3000.00 examples/s]",
		"Grouping texts in chunks of 1024: 100%|██████████| 10000/10000 [00:02<00:00, 4000.00 examples/s]",
		"[10:23:45] WARNING: ../src/learner.cc:767: Parameters: { \"silent\" } are not used.", "[LightGBM] [Info] Total Bins 1275",
		"[3] train-logloss", "[3]\tfoo bar", "[3]\ttrain:0.5", "[3]\ttrain-rmse:0.5x", "[3]\tvalid's l2 0.5",
		"Early stopping, best iteration is:",
		"bestTest = 0.3360379", "Shrink model to first 71 iterations.", "0: learn: 0.5", "12: total: 3s", "line 42: test failed",
		"Iteration 4, loss = nan", "Iteration 4 done", "-- Epoch 3 of the run", "Norm: 1.0", `{"level":"info","msg":"listening","port":8080}`,
		`{"epoch": 1, "loss": 0.5`, `{"cfg": {"epoch": 1, "loss": 0.5}}`,
	} {
		if format, ok := r.Line([]byte(line)); ok {
			t.Errorf("Line(%q) = %q, want none", line, format)
		}
	}
	if diff := cmp.Diff(Progress{}, r.Progress()); diff != "" {
		t.Errorf("Progress (-want +got):\n%s", diff)
	}
}

// TestEvaluationLineKeepsNoMetrics: a line that starts with an evaluation word gives its counter but not
// its loss or accuracy, which are not the training's (the success policy compares them with its targets).
func TestEvaluationLineKeepsNoMetrics(t *testing.T) {
	r, _ := New("")
	r.Line([]byte("Validation - epoch 1/10 - loss: 0.04 - acc: 99.1"))
	if p := r.Progress(); p.Loss != nil || p.Accuracy != nil {
		t.Errorf("loss %v, accuracy %v from a validation line", p.Loss, p.Accuracy)
	}
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name, pattern, wantErr string
	}{
		{name: "none", pattern: ""},
		{name: "named groups", pattern: `loss=(?P<loss>\S+)`},
		{name: "does not compile", pattern: `loss=(?P<loss>\S+`, wantErr: "is not an RE2 regular expression"},
		{name: "too large a program", pattern: `(?P<loss>\S+)(?:` + strings.Repeat("x", 1000) + `){100}`, wantErr: "more than 1000 instructions"},
		{name: "no field name", pattern: `loss=(\S+) (?P<other>\d+)`, wantErr: "no named group"},
		{name: "too long", pattern: `(?P<loss>\S+)` + strings.Repeat("x", patterns.MaxBytes), wantErr: "over the limit of 4096"},
	} {
		_, err := New(tc.pattern)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if tc.wantErr == "" && err != nil || !strings.Contains(got, tc.wantErr) {
			t.Errorf("%s: New(%.40q) error = %v, want one containing %q", tc.name, tc.pattern, err, tc.wantErr)
		}
	}
}

// TestFieldNames: New takes a pattern of each of FieldNames' groups alone, its error for a pattern with
// none lists them all in order, and FieldNames returns a copy.
func TestFieldNames(t *testing.T) {
	names := FieldNames()
	for _, n := range names {
		if _, err := New(`(?P<` + n + `>\d+)`); err != nil {
			t.Errorf("New with the group %s: %v", n, err)
		}
	}
	_, err := New(`(?P<other>\d+)`)
	list := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	if err == nil || !strings.Contains(err.Error(), list) {
		t.Errorf("New's error %v does not list %s", err, list)
	}
	names[0] = "changed"
	if FieldNames()[0] == "changed" {
		t.Error("FieldNames returns the table itself")
	}
}

// TestDocExamples: every example line in the package documentation's code blocks is recognised.
func TestDocExamples(t *testing.T) {
	src, err := os.ReadFile("recognize.go")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(src), "\n") {
		example, ok := strings.CutPrefix(line, "//\t")
		if !ok {
			continue
		}
		n++
		r, _ := New("")
		if format, ok := r.Line([]byte(example)); !ok {
			t.Errorf("Line(%q) = %q, %v; the documentation says it is progress", example, format, ok)
		}
	}
	if n < 20 {
		t.Errorf("found %d example lines in the package documentation, want at least 20", n)
	}
}

func TestFixtures(t *testing.T) {
	kerasVal := []NamedMetric{{Name: "val_accuracy", Value: 0.97}, {Name: "val_loss", Value: 0.1}}
	for _, tc := range []struct {
		file    string
		formats map[string]int // lines recognised, by format
		want    Progress
		// timed: the file was captured from the library itself, its rates are the moment's: not compared.
		timed bool
	}{
		{file: "tqdm_debian.txt", formats: map[string]int{"tqdm": 126}, want: Progress{Epoch: f(3), TotalEpochs: f(3), Step: f(20),
			TotalSteps: f(20), Fraction: f(1), Loss: f(0.0127), LearningRate: f(0.001)}, timed: true},
		{file: "tqdm.txt", formats: map[string]int{"tqdm": 15}, want: Progress{Epoch: f(3), TotalEpochs: f(3), Step: f(100),
			TotalSteps: f(100), Fraction: f(1), Loss: f(0.0523), LearningRate: f(0.001), Throughput: f(4.5)}},
		{file: "huggingface.txt", formats: map[string]int{"huggingface": 8, "tqdm": 23}, want: Progress{Epoch: f(3), TotalEpochs: f(3),
			Step: f(375), TotalSteps: f(375), Fraction: f(1), Loss: f(0.5), Accuracy: f(0.87), LearningRate: f(1.3333333333333334e-06),
			Throughput: f(30.49), Metrics: []NamedMetric{{Name: "eval_loss", Value: 0.33}, {Name: "eval_runtime", Value: 2.1},
				{Name: "eval_samples_per_second", Value: 476.2}, {Name: "eval_steps_per_second", Value: 15.2},
				{Name: "grad_norm", Value: 0.5012}, {Name: "train_runtime", Value: 12.3}, {Name: "train_steps_per_second", Value: 5}}}},
		{file: "lightning_tqdm.txt", formats: map[string]int{"lightning": 7, "tqdm": 1}, want: Progress{Epoch: f(1), Step: f(938),
			TotalSteps: f(938), Loss: f(0.123), Throughput: f(75.21), Metrics: []NamedMetric{{Name: "val_loss", Value: 0.101}}}},
		{file: "lightning_rich.txt", formats: map[string]int{"lightning": 30}, want: Progress{Epoch: f(9), TotalEpochs: f(10),
			Step: f(938), TotalSteps: f(938), Fraction: f(1), Loss: f(0.05), Throughput: f(75.21)}},
		{file: "keras2.txt", formats: map[string]int{"keras": 12}, want: Progress{Epoch: f(3), TotalEpochs: f(3), Step: f(938),
			TotalSteps: f(938), Fraction: f(1), Loss: f(0.1573), Accuracy: f(0.93), Throughput: f(1 / 0.003), Metrics: kerasVal}},
		{file: "keras3.txt", formats: map[string]int{"keras": 12}, want: Progress{Epoch: f(3), TotalEpochs: f(3), Step: f(938),
			TotalSteps: f(938), Fraction: f(1), Loss: f(0.1573), Accuracy: f(0.93), Throughput: f(1 / 0.003), Metrics: kerasVal}},
		{file: "plain.txt", formats: map[string]int{"plain": 35}, want: Progress{Epoch: f(5), TotalEpochs: f(5), Step: f(600),
			TotalSteps: f(600), Fraction: f(1), Loss: f(0.04), Accuracy: f(96)}},
		{file: "xgboost.txt", formats: map[string]int{"xgboost": 40}, want: Progress{Epoch: f(40), Loss: f(0.26567),
			Metrics: []NamedMetric{{Name: "eval-error", Value: 0.155}, {Name: "eval-logloss", Value: 0.36336}, {Name: "train-error", Value: 0.1075},
				{Name: "train-logloss", Value: 0.26567}}}},
		{file: "xgboost_cv.txt", formats: map[string]int{"xgboost": 5}, want: Progress{Epoch: f(5), Loss: f(0.34209),
			Metrics: []NamedMetric{{Name: "test-logloss", Value: 0.43894}, {Name: "train-logloss", Value: 0.34209}}}},
		{file: "lightgbm.txt", formats: map[string]int{"lightgbm": 35}, want: Progress{Epoch: f(35), Loss: f(0.148716),
			Metrics: []NamedMetric{{Name: "training-auc", Value: 0.99}, {Name: "training-binary_logloss", Value: 0.148716},
				{Name: "valid_1-auc", Value: 0.91}, {Name: "valid_1-binary_logloss", Value: 0.337338}}}},
		{file: "catboost.txt", formats: map[string]int{"catboost": 11}, want: Progress{Epoch: f(100), Loss: f(0.1572308),
			Metrics: []NamedMetric{{Name: "learn", Value: 0.1572308}, {Name: "test", Value: 0.3531174}}}},
		{file: "sklearn_mlp.txt", formats: map[string]int{"sklearn": 30}, want: Progress{Epoch: f(30), Loss: f(0.58518285)}},
		{file: "sklearn_sgd.txt", formats: map[string]int{"sklearn": 10}, want: Progress{Epoch: f(5), Loss: f(0.351285)}},
		{file: "json.txt", formats: map[string]int{"json": 16}, want: Progress{Epoch: f(5), Step: f(500), TotalSteps: f(500), Fraction: f(1),
			Loss: f(0.1239), LearningRate: f(0.001), Metrics: []NamedMetric{{Name: "best_val_loss", Value: 0.2511}, {Name: "grad_norm", Value: 0.3},
				{Name: "val_acc", Value: 0.9}, {Name: "val_loss", Value: 0.2511}}}},
	} {
		formats, got := feedFile(t, filepath.Join("testdata", tc.file))
		if tc.timed {
			got.Throughput = nil
		}
		if diff := cmp.Diff(tc.formats, formats); diff != "" {
			t.Errorf("%s: formats (-want +got):\n%s", tc.file, diff)
		}
		if diff := cmp.Diff(tc.want, got, approx); diff != "" {
			t.Errorf("%s: Progress (-want +got):\n%s", tc.file, diff)
		}
	}
}

// feedFile feeds a recorded output through a new Recognizer, line by line as the supervisor splits it,
// and returns how many lines it recognised by format, and the final Progress.
func feedFile(t *testing.T, path string) (map[string]int, Progress) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	formats := map[string]int{}
	for _, line := range splitLines(data) {
		if format, ok := r.Line(line); ok {
			formats[format]++
		}
	}
	return formats, r.Progress()
}
