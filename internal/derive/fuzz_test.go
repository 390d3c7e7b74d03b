package derive

import (
	"strings"
	"testing"
)

// FuzzParseSample: whatever rank 0 serves, parsing never panics, progress stays within 0-100% and at
// most MaxCustomMetrics custom values reach the status.
func FuzzParseSample(f *testing.F) {
	for _, s := range []string{
		"# TYPE training_epoch gauge\ntraining_epoch 3\ntraining_epochs_total 10\ntraining_loss 0.25\n",
		"training_epoch NaN\ntraining_epochs_total 0\n",
		"training_step 1e308\ntraining_steps_total -1\n",
		"DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 50\nDCGM_FI_DEV_GPU_UTIL{gpu=\"1\"} +Inf\n",
		"# HELP x\n# TYPE x histogram\nx_bucket{le=\"1\"} 1\n",
		"\xff\xfe", "",
	} {
		f.Add(s, int32(10))
	}
	f.Fuzz(func(t *testing.T, body string, epochs int32) {
		s, err := ParseSample(strings.NewReader(body))
		if err != nil {
			return
		}
		if fr, ok := s.Fraction(epochs); ok && (fr < 0 || fr > 1 || fr != fr) {
			t.Fatalf("fraction %v from %q", fr, body)
		}
		if c := customStrings(s.Custom); len(c) > MaxCustomMetrics {
			t.Fatalf("%d custom metrics", len(c))
		}
	})
}
