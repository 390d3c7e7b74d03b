package derive

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestParseSupervisorSample: the supervisor's series map to the sample; its own (trainingjob_) are no
// custom metrics.
func TestParseSupervisorSample(t *testing.T) {
	body := `# TYPE training_epoch gauge
training_epoch 19
# TYPE training_epochs_total gauge
training_epochs_total 26
# TYPE training_progress_ratio gauge
training_progress_ratio 0.7307692307692307
# TYPE training_loss gauge
training_loss 0.0526
# TYPE trainingjob_output_bytes_total counter
trainingjob_output_bytes_total 4096
# TYPE trainingjob_output_idle_seconds gauge
trainingjob_output_idle_seconds 12.5
# TYPE trainingjob_output_format gauge
trainingjob_output_format{format="plain"} 1
`
	s, err := ParseSample(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	f, _ := s.Fraction(0)
	got := []any{*s.Epoch, *s.TotalEpochs, *s.Ratio, *s.Loss, *s.OutputIdle, s.Format, len(s.Custom), f, s.Reports()}
	want := []any{19.0, 26.0, 0.7307692307692307, 0.0526, 12.5, "plain", 0, 0.7307692307692307, true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	app, err := ParseSample(strings.NewReader("app_build_info 1\ngo_goroutines 7\n"))
	if err != nil || app.Reports() {
		t.Errorf("an application's own gauges are taken for training figures: %+v, %v", app, err)
	}
	own, err := ParseSample(strings.NewReader("training_perplexity 12.5\n"))
	if err != nil || !own.Reports() {
		t.Errorf("a training_* series of the program's own is not a training figure: %+v, %v", own, err)
	}
	idle, err := ParseSample(strings.NewReader("trainingjob_output_idle_seconds 3\ntrainingjob_output_lines_total 7\n"))
	if err != nil || idle.Reports() {
		t.Errorf("a supervisor that recognised nothing reports progress: %+v, %v", idle, err)
	}
}

// TestProgressSource: ProgressReported says where progress comes from, or why it is unknown and what to do.
func TestProgressSource(t *testing.T) {
	refused := errors.New("GET http://10.0.0.5:8080/metrics: connection refused")
	cases := []struct {
		name    string
		tj      *mlv1.TrainingJob
		apply   func(st *mlv1.TrainingJobStatus, tj *mlv1.TrainingJob)
		reason  string
		message string
		unknown bool
	}{
		{
			name: "the endpoint",
			tj:   tjtest.NewTJ("ml", "a").Obj(),
			apply: func(st *mlv1.TrainingJobStatus, tj *mlv1.TrainingJob) {
				ApplySample(st, tj, Sample{Epoch: ptr.To(1.0)}, RateWindow{}, t0)
			},
			reason:  ReasonScraped,
			message: "rank 0 reports progress",
		},
		{
			name: "the output",
			tj:   tjtest.NewTJ("ml", "a").Obj(),
			apply: func(st *mlv1.TrainingJobStatus, tj *mlv1.TrainingJob) {
				ApplySample(st, tj, Sample{Epoch: ptr.To(1.0), FromOutput: true, Format: "tqdm"}, RateWindow{}, t0)
			},
			reason:  ReasonFromOutput,
			message: "rank 0 serves no progress endpoint; its output shows progress (tqdm)",
		},
		{
			name: "nothing recognised",
			tj:   tjtest.NewTJ("ml", "a").Obj(),
			apply: func(st *mlv1.TrainingJobStatus, tj *mlv1.TrainingJob) {
				ApplyNoSource(st, tj, refused, t0)
			},
			reason:  ReasonNoProgressSource,
			unknown: true,
			message: "progress is unknown: rank 0 serves no training figures on its progress endpoint " +
				"(port 8080: GET http://10.0.0.5:8080/metrics: " +
				"connection refused) and has printed no line the supervisor recognises (tqdm bars, \"epoch N/M\" or \"step N/M\" lines, Hugging Face " +
				"Trainer, Lightning or Keras logs). Print such lines, set monitoring.progressPattern, or serve training_epoch on METRICS_PORT. " +
				"Until then the hang checks act only when failurePolicy sets their timeouts",
		},
		{
			name:    "no command: the image's entrypoint, not supervised",
			tj:      tjtest.NewTJ("ml", "a").Image("me/t:1").NoCommand().Obj(),
			apply:   func(st *mlv1.TrainingJobStatus, tj *mlv1.TrainingJob) { ApplyNoSource(st, tj, nil, t0) },
			reason:  ReasonNoProgressSource,
			unknown: true,
			message: "progress is unknown: rank 0 serves no training figures on its progress endpoint (port 8080); its output is not read: " +
				"spec.command is empty, so the image's entrypoint runs as it is, without the supervisor that reads progress from the output " +
				"(set command to the program to run). Print such lines, set monitoring.progressPattern, or serve training_epoch on METRICS_PORT. " +
				"Until then the hang checks act only when failurePolicy sets their timeouts",
		},
		{
			name: "a failed read after progress is stale, not unknown",
			tj:   tjtest.NewTJ("ml", "a").Obj(),
			apply: func(st *mlv1.TrainingJobStatus, tj *mlv1.TrainingJob) {
				st.LastProgressTime = &metav1.Time{Time: t0.Time}
				ApplyScrapeError(st, refused, t0)
			},
			reason:  ReasonScrapeFailed,
			message: "progress is stale (last reported at 2026-01-01T00:00:00Z): GET http://10.0.0.5:8080/metrics: connection refused",
		},
		{
			name: "a failed read that never reported is unknown",
			tj:   tjtest.NewTJ("ml", "a").Obj(),
			apply: func(st *mlv1.TrainingJobStatus, tj *mlv1.TrainingJob) {
				ApplyScrapeError(st, refused, t0)
			},
			reason:  ReasonScrapeFailed,
			unknown: true,
			message: "progress is stale (never reported): GET http://10.0.0.5:8080/metrics: connection refused",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := &mlv1.TrainingJobStatus{}
			tc.apply(st, tc.tj)
			c := st.Conditions[0]
			got := []any{c.Reason, c.Message, ProgressUnknown(st)}
			if diff := cmp.Diff([]any{tc.reason, tc.message, tc.unknown}, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
