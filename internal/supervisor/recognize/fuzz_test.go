package recognize

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzPattern exercises the pattern path: every group, k/M suffixes and "%".
const fuzzPattern = `(?i)it(?:er)? (?P<step>\S+)/(?P<steps>\S+)(?: ep (?P<epoch>\S+)/(?P<epochs>\S+))?` +
	`(?: loss (?P<loss>\S+))?(?: acc (?P<accuracy>\S+))?(?: lr (?P<lr>\S+))?(?: (?P<throughput>\S+) it/s)?`

func FuzzLine(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		for _, line := range splitLines(data) {
			f.Add(line)
		}
	}
	for _, s := range []string{"epoch 1e999/1e-999 loss inf acc NaN lr -0", "iter 5/0 ep 3/0 loss 1e308 acc 91% lr 1e-320 1e308M it/s",
		" 45%|█| 1e308/1e-308 [00:10<00:12, 1e-320s/it, loss=nan]", "Epoch 3/0", "0/0 [=] - 0s/step", "Epoch 1/9 ━ 5/0 0:00 1e309it/s",
		"{'epoch': 1e308, 'loss': 'inf'}", "  Num Epochs = 9" + strings.Repeat("9", 400), "\x1b]0;title\x07\x1b[", "[rank0]:[a1]:[b2]:[c3]:",
		"[999999999]\ttrain-rmse:1e308±1e309\teval-rmse:-0", "[0]\t-:1\ta-:2\t-b:3", "[5]\ta's : 1 + \tb's c: 1e999",
		"0:\tlearn: 1e308\ttest: nan\tbest: 0 (0)\ttotal: 1s", "Iteration 1e3, loss = 1e400", "-- Epoch 999999999999999",
		"Norm: , Avg. loss: -1e-320", `{"epoch": 1e308, "epochs": 1e-308, "step": -0, "steps": 0, "loss": 1e999, "a": {"b": [1, "}]"]}}`,
		`{"\"": 1, "epoch": 1, "` + strings.Repeat("k", 100) + `": 2}`, `{"epoch": 1, "x": [[[[[[[[`, "{'loss': 0.5, 'epoch': 1, 'x': '\\'}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, pattern := range []string{"", fuzzPattern} {
			r, err := New(pattern)
			if err != nil {
				t.Fatal(err)
			}
			r.Line(data)
			checkProgress(t, r.Progress())
			for _, line := range splitLines(data) {
				r.Line(line)
				checkProgress(t, r.Progress())
			}
		}
	})
}

// checkProgress: every figure is finite and Fraction is within [0, 1].
func checkProgress(t *testing.T, p Progress) {
	t.Helper()
	for name, v := range map[string]*float64{"Epoch": p.Epoch, "TotalEpochs": p.TotalEpochs, "Step": p.Step,
		"TotalSteps": p.TotalSteps, "Fraction": p.Fraction, "Loss": p.Loss, "Accuracy": p.Accuracy,
		"LearningRate": p.LearningRate, "Throughput": p.Throughput} {
		if v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0)) {
			t.Fatalf("%s = %v", name, *v)
		}
	}
	if p.Fraction != nil && (*p.Fraction < 0 || *p.Fraction > 1) {
		t.Fatalf("Fraction = %v, outside [0, 1]", *p.Fraction)
	}
	if len(p.Metrics) > MaxNamedMetrics {
		t.Fatalf("%d named metrics, want at most %d", len(p.Metrics), MaxNamedMetrics)
	}
	for i, m := range p.Metrics {
		if !validName([]byte(m.Name)) || math.IsNaN(m.Value) || math.IsInf(m.Value, 0) || i > 0 && p.Metrics[i-1].Name >= m.Name {
			t.Fatalf("named metric %d of %v: invalid, not finite, or out of order", i, p.Metrics)
		}
	}
}

func BenchmarkLine(b *testing.B) {
	for _, bc := range []struct {
		name, pattern, line string
	}{
		{name: "tqdm", line: "Epoch 3:  45%|████▌     | 45/100 [00:10<00:12,  4.50it/s, loss=0.231, lr=0.001]"},
		{name: "not-progress", line: "2026-11-27 10:00:01,123 INFO trainer.py:42] Loading model weights from /ckpt/model.safetensors"},
		{name: "lightning", line: "Epoch 0:  45%|████▌     | 422/938 [00:05<00:06, 80.12it/s, v_num=0, train_loss=0.231]"},
		{name: "keras3",
			line: "\x1b[1m469/938\x1b[0m \x1b[32m━━━━━━━━━━\x1b[0m\x1b[37m━━━━━━━━━━\x1b[0m " +
				"\x1b[1m5s\x1b[0m 3ms/step - accuracy: 0.9140 - loss: 0.2973"},
		{name: "huggingface", line: "{'loss': 0.6931, 'grad_norm': 1.2345, 'learning_rate': 4.9e-05, 'epoch': 0.05}"},
		{name: "plain", line: "Epoch [3/10], Step [100/600], Loss: 0.2345"},
		{name: "not-progress-4KiB", line: strings.Repeat("lorem ipsum dolor sit amet, consectetur adipiscing ", 90)[:MaxLineBytes]},
		{name: "pattern-miss", pattern: `loss=(?P<loss>\S+)`, line: "2026-11-27 10:00:01,123 INFO trainer.py:42] Loading model weights"},
		{name: "xgboost", line: "[12]\ttrain-logloss:0.25514\ttrain-error:0.10750\teval-logloss:0.25627\teval-error:0.15500"},
		{name: "lightgbm", line: "[10]\tvalid_0's binary_logloss: 0.213\tvalid_0's auc: 0.95"},
		{name: "sklearn", line: "Iteration 4, loss = 0.60151891"},
		{name: "catboost", line: "0:\tlearn: 0.6803000\ttest: 0.6810000\tbest: 0.6810000 (0)\ttotal: 52.1ms\tremaining: 5.16s"},
		{name: "json", line: `{"level":"info","msg":"epoch done","epoch":3,"step":300,"loss":0.2,"val_acc":0.81}`},
		{name: "not-progress-json", line: `{"level":"info","ts":1700000000.5,"caller":"server.go:42","msg":"listening","port":8080}`},
		{name: "not-progress-colons", line: "12:00:01 worker 3: connected to 10.0.0.7:29500 [attempt 1] ok"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r, err := New(bc.pattern)
			if err != nil {
				b.Fatal(err)
			}
			line := []byte(bc.line)
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			for b.Loop() {
				r.Line(line)
			}
		})
	}
}
