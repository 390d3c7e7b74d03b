package derive

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestParseSampleBounded: what a hostile rank 0 serves cannot make a parse hold more than its bounds.
func TestParseSampleBounded(t *testing.T) {
	var many strings.Builder
	for i := range 100 {
		fmt.Fprintf(&many, "training_%03d_%s %d\n", 99-i, strings.Repeat("x", 200), i)
	}
	cases := []struct {
		name string
		text string
		want Sample
	}{
		{
			name: "custom names: the first 32 in sorted order, cut to 64 bytes",
			text: many.String(),
			want: Sample{Custom: func() map[string]float64 {
				m := map[string]float64{}
				for i := range 32 {
					m[fmt.Sprintf("training_%03d_%s", i, strings.Repeat("x", 200))[:MaxCustomNameBytes]] = float64(99 - i)
				}
				return m
			}()},
		},
		{
			name: "a long line is skipped, the next read",
			text: "training_epoch 1\ntraining_x{a=\"" + strings.Repeat("y", 2*MaxSampleLineBytes) + "\"} 1\ntraining_epoch 3\n",
			want: Sample{Epoch: ptr.To(2.0), Custom: map[string]float64{}},
		},
		{
			name: "reading stops after MaxSampleSeries series",
			text: strings.Repeat("go_goroutines 1\n", MaxSampleSeries) + "training_epoch 7\n",
			want: Sample{Custom: map[string]float64{}},
		},
		{
			name: "UTF-8 names, escapes, timestamps, the supervisor's format",
			text: "{\"training.tokens\"} 5\ntrainingjob_output_format{format=\"tq\\\"dm\"} 1 1700000000\n" +
				"training_loss{a=\"}\",b=\"\\\\\"} 0.5\n",
			want: Sample{Loss: ptr.To(0.5), Format: `tq"dm`, Custom: map[string]float64{"training.tokens": 5}},
		},
		{
			name: "NaN and Inf are dropped; a name with only those is none",
			text: "training_epoch NaN\ntraining_epoch 4\ntraining_perplexity +Inf\n",
			want: Sample{Epoch: ptr.To(4.0), Custom: map[string]float64{}},
		},
		{
			name: "summaries skipped",
			text: "# TYPE rpc summary\nrpc{quantile=\"0.5\"} 1\nrpc_sum 3\nrpc_count 2\n",
			want: Sample{Custom: map[string]float64{}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSample(strings.NewReader(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseSampleMemory: four hostile answers of 4 MiB parsed at once ("a 1" lines, and long distinct
// training_ names) raise the heap by a few MiB, not by the answers' series (the Prometheus parser kept every
// family: 216 MiB for one such answer, 877 MiB for four at once).
func TestParseSampleMemory(t *testing.T) {
	const size = 4 << 20
	answers := []string{strings.Repeat("a 1\n", size/4)}
	var b bytes.Buffer
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "training_%d_%s %d\n", i, strings.Repeat("n", 100), i)
	}
	answers = append(answers, b.String(), answers[0], b.String())
	defer debug.SetGCPercent(debug.SetGCPercent(10)) // the heap in use is then about what is live
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	peak := uint64(0)
	var wg sync.WaitGroup
	for _, a := range answers {
		wg.Go(func() {
			if _, err := ParseSample(strings.NewReader(a)); err != nil {
				t.Error(err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		default:
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			runtime.Gosched()
		}
	}
	runtime.ReadMemStats(&after)
	grew := int64(peak) - int64(before.HeapInuse)
	t.Logf("four hostile answers of %d MiB parsed at once: heap in use peaked %d KiB above the start; %d MiB allocated in all",
		size>>20, grew>>10, (after.TotalAlloc-before.TotalAlloc)>>20)
	if grew > 8<<20 {
		t.Errorf("the heap grew %d MiB parsing four hostile answers, want under 8", grew>>20)
	}
}

// TestStatusSizeBounded: whatever rank 0 serves, the metrics it puts in the status stay small: 32 custom
// series with 100 KiB names made a 1.25 MiB status before, rewritten on every changed scrape.
func TestStatusSizeBounded(t *testing.T) {
	var b strings.Builder
	for i := range 40 {
		fmt.Fprintf(&b, "training_%02d_%s %d.123456789e300\n", i, strings.Repeat("n", 32<<10), i)
	}
	b.WriteString("training_accuracy 1e300\ntraining_loss -1.7976931348623157e308\ntraining_epoch 1e300\ntraining_epochs_total 1e300\n")
	s, err := ParseSample(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	st := &mlv1.TrainingJobStatus{}
	tj := tjtest.NewTJ("ml", "big").Obj()
	ApplySample(st, tj, s, RateWindow{}, metav1.Now())
	data, err := json.Marshal(st.Metrics)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 4<<10 {
		t.Errorf("status.metrics is %d bytes, want at most 4 KiB", len(data))
	}
	for k, v := range st.Metrics.Custom {
		if len(k) > MaxCustomNameBytes || len(v) > 32 {
			t.Errorf("custom %q = %q: over the CRD's bounds (64, 32)", k, v)
		}
	}
	if d := st.Metrics.Display; d == nil || len(d.Loss) > 32 || len(d.Accuracy) > 32 {
		t.Errorf("display %+v: over the CRD's 32 characters", d)
	}
	if len(st.Progress) > 8 || len(st.ETA) > 32 {
		t.Errorf("progress %q, eta %q: over the CRD's bounds", st.Progress, st.ETA)
	}
}

// TestHostileFigures: finite figures whose sum or ratio is not finite, names cut inside a character, and an
// ETA past any duration stay out of the status (before: +Inf in metrics.loss made the status unwritable
// and the job's hang verdict was never written; a name cut mid-character changed at every scrape as the API
// server stored it, a job that never stalled).
func TestHostileFigures(t *testing.T) {
	s, err := ParseSample(strings.NewReader("training_loss{gpu=\"0\"} 1.7e308\ntraining_loss{gpu=\"1\"} 1.7e308\n" +
		"training_epoch{a=\"0\"} 1.7e308\ntraining_epoch{a=\"1\"} 1.7e308\ntraining_epochs_total 1e300\n" +
		"{\"training_" + strings.Repeat("é", 40) + "\"} 1\n{\"training_bad\xff\"} 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Loss != nil || s.Epoch != nil {
		t.Errorf("loss %v, epoch %v: a mean that overflowed is reported", s.Loss, s.Epoch)
	}
	for k := range s.Custom {
		if !utf8.ValidString(k) || len(k) > MaxCustomNameBytes {
			t.Errorf("custom name %q: not valid UTF-8 or over %d bytes", k, MaxCustomNameBytes)
		}
	}
	if len(s.Custom) != 1 {
		t.Errorf("custom %v, want the one valid name", s.Custom)
	}
	inf := math.Inf(1)
	if f, ok := (Sample{Epoch: &inf, TotalEpochs: &inf}).Fraction(0); !ok || f != 0 {
		t.Errorf("Inf over Inf epochs: fraction %v (%t), want 0", f, ok)
	}
	w := RateWindow{At: time.Unix(0, 0), Fraction: 0}
	if e := eta(w, 1e-300, time.Unix(3600, 0)); len(e) > 32 || strings.HasPrefix(e, "-") {
		t.Errorf("eta %q: negative or over the CRD's 32 characters", e)
	}
}
