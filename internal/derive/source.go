package derive

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/text"
)

// Where a run's progress comes from: the reasons of the ProgressReported condition.
const (
	// ReasonScraped: rank 0's own progress endpoint (METRICS_PORT) answers with its figures.
	ReasonScraped = "Scraped"
	// ReasonFromOutput: the supervisor recognises progress in rank 0's output (tqdm bars, epoch lines,
	// monitoring.progressPattern) and the program serves no endpoint of its own.
	ReasonFromOutput = "FromOutput"
	// ReasonNoProgressSource: rank 0 serves no progress endpoint and prints nothing the supervisor
	// recognises (or runs without the supervisor): progress is unknown, and the hang checks act only
	// when the job sets their timeouts.
	ReasonNoProgressSource = "NoProgressSource"
	// ReasonScrapeFailed: neither rank 0's endpoint nor its supervisor could be read.
	ReasonScrapeFailed = "ScrapeFailed"
)

// ProgressUnknown reports whether the run has no progress source: the last read found neither an endpoint
// nor a recognised line, or nothing could ever be read. A run that reported before and cannot be read now
// (ScrapeFailed after progress) is not unknown: its source is there, stale.
func ProgressUnknown(st *mlv1.TrainingJobStatus) bool {
	switch ConditionReason(*st, mlv1.ConditionProgressReported) {
	case ReasonNoProgressSource:
		return true
	case ReasonScrapeFailed:
		return st.LastProgressTime == nil
	}
	return false
}

// ApplyNoSource sets ProgressReported to say that the run's progress is unknown, why, and how to give it;
// the last figures stay.
// endpointErr is why rank 0's own endpoint gave nothing (nil: it answered without a training figure).
func ApplyNoSource(st *mlv1.TrainingJobStatus, tj *mlv1.TrainingJob, endpointErr error, now metav1.Time) {
	set(st, mlv1.ConditionProgressReported, false, ReasonNoProgressSource, text.Cut(NoSourceMessage(tj, endpointErr), 4096), now)
}

// NoSourceMessage returns the explanation of a run without a progress source: what was found, and what to
// do.
func NoSourceMessage(tj *mlv1.TrainingJob, endpointErr error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "progress is unknown: rank 0 serves no training figures on its progress endpoint (port %d", tj.MetricsPort())
	if endpointErr != nil {
		fmt.Fprintf(&b, ": %s", text.Cut(endpointErr.Error(), 1024))
	}
	b.WriteString(")")
	switch {
	case builders.Supervised(tj):
		b.WriteString(" and has printed no line the supervisor recognises (tqdm bars, \"epoch N/M\" or \"step N/M\" lines, " +
			"Hugging Face Trainer, Lightning or Keras logs)")
	case len(tj.Spec.Command) == 0 && !builders.UsesRunner(tj):
		b.WriteString("; its output is not read: spec.command is empty, so the image's entrypoint runs as it is, without the " +
			"supervisor that reads progress from the output (set command to the program to run)")
	default:
		b.WriteString("; its output is not read (monitoring.progressFromOutput is false)")
	}
	b.WriteString(". Print such lines, set monitoring.progressPattern, or serve training_epoch on METRICS_PORT. " +
		"Until then the hang checks act only when failurePolicy sets their timeouts")
	return b.String()
}
