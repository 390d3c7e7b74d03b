package derive

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/text"
)

// Series rank 0 exposes (the example trainer and examples/python/trainingjob_progress.py do).
// docs/monitoring.md's "Progress from rank 0" section documents them.
const (
	SeriesEpoch        = "training_epoch"
	SeriesEpochsTotal  = "training_epochs_total"
	SeriesStep         = "training_step"
	SeriesStepsTotal   = "training_steps_total"
	SeriesLoss         = "training_loss"
	SeriesAccuracy     = "training_accuracy"
	SeriesLearningRate = "training_learning_rate"
	SeriesThroughput   = "training_samples_per_second"
	SeriesGPUUtil      = "training_gpu_utilization_percent"
	// SeriesCheckpointSeconds is the seconds the trainer spent saving checkpoints in this attempt (a
	// counter): goodput's Checkpoint category.
	SeriesCheckpointSeconds = "training_checkpoint_seconds_total"
	// SeriesProgressRatio is how much of the run is done, 0 to 1, when rank 0 knows better than epoch over
	// epochs (the supervisor serves it from a library's own convention, such as Keras's "Epoch 3/10").
	SeriesProgressRatio = "training_progress_ratio"
	// SeriesOutputIdle is the supervisor's seconds since rank 0 last printed anything.
	SeriesOutputIdle = "trainingjob_output_idle_seconds"
	// SeriesOutputFormat is the supervisor's format of the last line it recognised (label format).
	SeriesOutputFormat = "trainingjob_output_format"
	// SeriesOutputMetric is the supervisor's family of the figures rank 0 printed under their own names
	// (label name, such as XGBoost's "eval-logloss"): each goes to status.metrics.custom under its name.
	SeriesOutputMetric = "trainingjob_output_metric"
	// SeriesDCGMGPUUtil is the NVIDIA DCGM exporter's GPU utilisation (percent, one series per GPU).
	SeriesDCGMGPUUtil = "DCGM_FI_DEV_GPU_UTIL"
	// MaxCustomMetrics bounds status.metrics.custom (the CRD allows 32 entries).
	MaxCustomMetrics = 32
)

// Sample is what one scrape of rank 0 reported. Nil fields were not reported.
type Sample struct {
	Epoch, TotalEpochs, Step, TotalSteps     *float64
	Loss, Accuracy, LearningRate, Throughput *float64
	GPUUtilization                           *float64
	CheckpointSeconds                        *float64
	// Ratio is rank 0's own fraction done (training_progress_ratio), 0 to 1.
	Ratio *float64
	// Custom are other single-valued gauges and counters, by name.
	Custom map[string]float64
	// FromOutput: the sample is the supervisor's, read from rank 0's output; Format is the format of the
	// line it recognised last ("" when none), OutputIdle the seconds since rank 0 last printed.
	FromOutput bool
	Format     string
	OutputIdle *float64
}

// Reports reports whether the sample carries a training figure (rank 0 is a progress source): a known
// series, or one of its own named training_* (an application's other gauges, such as app_build_info, are
// none).
func (s Sample) Reports() bool {
	for _, v := range []*float64{s.Epoch, s.TotalEpochs, s.Step, s.TotalSteps, s.Loss, s.Accuracy, s.LearningRate, s.Throughput, s.Ratio} {
		if v != nil {
			return true
		}
	}
	for name := range s.Custom {
		if strings.HasPrefix(name, "training_") {
			return true
		}
	}
	return false
}

// runtimeSeries reports whether name is one of the series client libraries add on their own (Go and
// Python runtime, process, promhttp, other DCGM fields) or the supervisor's own (trainingjob_); they are
// not training metrics.
func runtimeSeries(name string) bool {
	for _, p := range []string{"go_", "process_", "python_", "promhttp_", "DCGM_", "trainingjob_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Fraction returns how much of the run is done, 0 to 1: rank 0's own ratio, else epochs over planned
// epochs (from rank 0, else from spec.hyperparameters.epochs), else steps over planned steps. ok is false
// when it cannot be known.
func (s Sample) Fraction(specEpochs int32) (float64, bool) {
	if s.Ratio != nil {
		return clamp01(*s.Ratio), true
	}
	total := float64(specEpochs)
	if s.TotalEpochs != nil && *s.TotalEpochs > 0 {
		total = *s.TotalEpochs
	}
	if s.Epoch != nil && total > 0 {
		return clamp01(*s.Epoch / total), true
	}
	if s.Step != nil && s.TotalSteps != nil && *s.TotalSteps > 0 {
		return clamp01(*s.Step / *s.TotalSteps), true
	}
	return 0, false
}

// clamp01 returns f within 0 and 1; 0 for NaN (Inf over Inf epochs).
func clamp01(f float64) float64 {
	if math.IsNaN(f) {
		return 0
	}
	return math.Max(0, math.Min(1, f))
}

// RateWindow is where progress was first seen in this operator process, for the ETA: the rate is
// measured from there, so a run resumed from a checkpoint at 50% does not look twice as fast.
type RateWindow struct {
	At       time.Time
	Fraction float64
}

// maxETA bounds the ETA shown: a decade.
const maxETA = 10 * 365 * 24 * time.Hour

// eta returns the time left at the rate observed since w, or "" when the rate is not known yet.
func eta(w RateWindow, fraction float64, now time.Time) string {
	done, elapsed := fraction-w.Fraction, now.Sub(w.At)
	if fraction >= 1 {
		return "0s"
	}
	if done <= 0 || elapsed <= 0 {
		return ""
	}
	left := float64(elapsed) * (1 - fraction) / done
	if left > float64(maxETA) || math.IsNaN(left) {
		left = float64(maxETA) // a run of 1e300 planned epochs
	}
	return time.Duration(left).Round(time.Second).String()
}

// ApplySample puts a sample into the status: progress, epoch, step, metrics, ETA, lastProgressTime and the
// ProgressReported condition. Nothing but the condition changes when rank 0 reports the same figures
// again, so an idle scrape does not write the status. lastProgressTime (and the ETA) move only when the
// run advanced (Advanced). It is pure; now is the time of the sample.
func ApplySample(st *mlv1.TrainingJobStatus, tj *mlv1.TrainingJob, s Sample, w RateWindow, now metav1.Time) {
	next := st.DeepCopy()
	f, known := s.Fraction(SpecEpochs(tj))
	if known {
		next.Progress = fmt.Sprintf("%d%%", int(math.Floor(f*100)))
	}
	if s.Epoch != nil {
		next.CurrentEpoch = int32(math.Min(math.Max(*s.Epoch, 0), math.MaxInt32))
	}
	if s.Step != nil {
		next.CurrentStep = int64(math.Min(math.Max(*s.Step, 0), math.MaxInt64/2))
	}
	if s.TotalEpochs != nil && *s.TotalEpochs > 0 {
		next.TotalEpochs = int32(math.Min(*s.TotalEpochs, math.MaxInt32))
	}
	next.Metrics = &mlv1.TrainingMetrics{Loss: s.Loss, Accuracy: s.Accuracy, LearningRate: s.LearningRate,
		Throughput: s.Throughput, GPUUtilization: s.GPUUtilization, Custom: customStrings(s.Custom), Epoch: next.CurrentEpoch,
		Display: display(s.Loss, s.Accuracy)}
	restarted := st.Attempt > 0 && !ProgressedInAttempt(st) && (s.Epoch != nil || s.Step != nil) && sampledInAttempt(st, now.Time)
	if restarted || !apiequality.Semantic.DeepEqual(progressOf(st), progressOf(next)) {
		moved := Advanced(st, next, s)
		if restarted {
			moved = resumedTraining(s)
		}
		*st = *next
		if moved {
			st.LastProgressTime = &now
			if known {
				st.ETA = eta(w, f, now.Time)
			}
		}
	}
	setReported(st, s, now)
}

// setReported sets ProgressReported to say where the run's progress comes from: rank 0's endpoint, or its
// output.
func setReported(st *mlv1.TrainingJobStatus, s Sample, now metav1.Time) {
	if !s.FromOutput {
		set(st, mlv1.ConditionProgressReported, true, ReasonScraped, "rank 0 reports progress", now)
		return
	}
	msg := "rank 0 serves no progress endpoint; its output shows progress"
	if s.Format != "" {
		msg += " (" + s.Format + ")"
	}
	set(st, mlv1.ConditionProgressReported, true, ReasonFromOutput, msg, now)
}

// resumedTraining reports whether s, the first figures an attempt after a restart served that has not
// advanced yet, is training: its rank 0 is a new process (the attempt's workers all run since after the last
// attempt's last progress), so any step or epoch it serves is its own work, the very figures the last
// attempt stopped at included (one-second epochs redone from a checkpoint reach them between two reads:
// compared with the status, the restart looked an epoch longer), and only a step and epoch of 0 (served
// before its rendezvous) are not.
func resumedTraining(s Sample) bool {
	return s.Epoch != nil && *s.Epoch > 0 || s.Step != nil && *s.Step > 0
}

// sampledInAttempt reports whether a sample taken at at is the current attempt's: taken once its workers all
// ran (a sample remembered from before the restart is applied again until the next read).
func sampledInAttempt(st *mlv1.TrainingJobStatus, at time.Time) bool {
	running := meta.FindStatusCondition(st.Conditions, mlv1.ConditionRunning)
	return running != nil && running.Status == metav1.ConditionTrue && !at.Before(running.LastTransitionTime.Time)
}

// Advanced reports whether the run moved from old to next (a sample s applied): a new epoch, step or
// percentage; when rank 0 reports neither epoch nor step, any new figure. A rank 0 that serves the same
// figures (a hung collective keeps its gauges; a trainer that serves epoch 0 before its rendezvous) has not
// advanced, nor has one whose GPU utilisation alone changes.
func Advanced(old, next *mlv1.TrainingJobStatus, s Sample) bool {
	if s.Epoch != nil || s.Step != nil {
		return old.CurrentEpoch != next.CurrentEpoch || old.CurrentStep != next.CurrentStep || old.Progress != "" && old.Progress != next.Progress
	}
	a, b := metricsOf(old), metricsOf(next)
	a.GPUUtilization, b.GPUUtilization = nil, nil
	a.Display, b.Display = nil, nil // loss and accuracy, rounded
	return !apiequality.Semantic.DeepEqual(a, b) && !apiequality.Semantic.DeepEqual(b, mlv1.TrainingMetrics{})
}

func metricsOf(st *mlv1.TrainingJobStatus) mlv1.TrainingMetrics {
	if st.Metrics == nil {
		return mlv1.TrainingMetrics{}
	}
	return *st.Metrics.DeepCopy()
}

// progressOf returns the part of the status rank 0's figures decide.
func progressOf(st *mlv1.TrainingJobStatus) []any {
	return []any{st.Progress, st.CurrentEpoch, st.CurrentStep, st.TotalEpochs, st.Metrics}
}

// ApplyScrapeError sets ProgressReported to say since when progress is stale and why; the last values stay.
func ApplyScrapeError(st *mlv1.TrainingJobStatus, err error, now metav1.Time) {
	since := "never reported"
	if st.LastProgressTime != nil {
		since = "last reported at " + st.LastProgressTime.UTC().Format(time.RFC3339)
	}
	msg := text.Cut(fmt.Sprintf("progress is stale (%s): %v", since, err), 4096)
	set(st, mlv1.ConditionProgressReported, false, ReasonScrapeFailed, msg, now)
}

// ReasonRunEnded is ProgressReported's reason once the run has ended: nothing is read any more, and the
// last figures stay (a scrape between rank 0's exit and the end said ScrapeFailed, which was no fault).
const ReasonRunEnded = "RunEnded"

// SettleProgress settles a finished run's progress, the StatusController's part of it: no ETA, the epoch
// and percentage made to agree with how the run ended, and ProgressReported (where progress was ever read
// or tried) says the run ended. The last
// scrape may have been before the last epoch ended, so the figures read last are not the end: a checkpoint
// of epoch N means N epochs were done, and a run whose workers all succeeded did all it planned (100%,
// epoch totalEpochs). The metrics stay those read last (metrics.epoch says of which epoch).
func SettleProgress(st *mlv1.TrainingJobStatus, now metav1.Time) {
	if st.State != mlv1.StateCompleted && st.State != mlv1.StateFailed {
		return
	}
	st.ETA = ""
	settleEpoch(st)
	if c := meta.FindStatusCondition(st.Conditions, mlv1.ConditionProgressReported); c != nil && c.Reason != ReasonRunEnded {
		last := "none was read"
		if st.LastProgressTime != nil {
			last = "the last, read at " + st.LastProgressTime.UTC().Format(time.RFC3339) + ", is kept"
		}
		set(st, mlv1.ConditionProgressReported, false, ReasonRunEnded, "the run ended: progress is no longer read; "+last, now)
	}
}

// settleEpoch brings a finished run's currentEpoch up to its newest checkpoint's epoch and, when every
// worker succeeded, to totalEpochs at 100%; the percentage follows a raised epoch.
func settleEpoch(st *mlv1.TrainingJobStatus) {
	succeeded := st.State == mlv1.StateCompleted && ConditionReason(*st, mlv1.ConditionCompleted) == "Succeeded"
	epoch := st.CurrentEpoch
	if st.Checkpoint != nil {
		epoch = max(epoch, st.Checkpoint.LatestEpoch)
	}
	if succeeded {
		epoch = max(epoch, st.TotalEpochs)
		st.Progress = "100%"
	}
	if epoch <= st.CurrentEpoch {
		return
	}
	st.CurrentEpoch = epoch
	if !succeeded && st.TotalEpochs > 0 {
		st.Progress = fmt.Sprintf("%d%%", int(math.Floor(clamp01(float64(epoch)/float64(st.TotalEpochs))*100)))
	}
}

// PlannedEpochs sets totalEpochs from spec.hyperparameters.epochs until rank 0 reports its own.
func PlannedEpochs(st *mlv1.TrainingJobStatus, tj *mlv1.TrainingJob) {
	if st.TotalEpochs == 0 {
		st.TotalEpochs = SpecEpochs(tj)
	}
}

// customStrings returns at most MaxCustomMetrics custom values formatted, the first names in sorted order;
// nil for none.
func customStrings(c map[string]float64) map[string]string {
	if len(c) == 0 {
		return nil
	}
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	sort.Strings(names)
	out := map[string]string{}
	for _, n := range names[:min(len(names), MaxCustomMetrics)] {
		out[n] = strconv.FormatFloat(c[n], 'g', 6, 64)
	}
	return out
}

// SpecEpochs returns spec.hyperparameters.epochs, 0 when unset.
func SpecEpochs(tj *mlv1.TrainingJob) int32 {
	if hp := tj.Spec.Hyperparameters; hp != nil && hp.Epochs != nil {
		return *hp.Epochs
	}
	return 0
}

// display returns loss (4 significant digits) and accuracy (a percentage to 0.1; a figure over 1 is taken
// as a percentage already) rounded for kubectl get's columns; nil when rank 0 reports neither.
func display(loss, accuracy *float64) *mlv1.MetricsDisplay {
	if loss == nil && accuracy == nil {
		return nil
	}
	d := &mlv1.MetricsDisplay{}
	if loss != nil && !math.IsNaN(*loss) && !math.IsInf(*loss, 0) {
		d.Loss = strconv.FormatFloat(*loss, 'g', 4, 64)
	}
	if a := accuracy; a != nil && !math.IsNaN(*a) && !math.IsInf(*a, 0) {
		pct := *a
		if pct <= 1 {
			pct *= 100
		}
		if math.Abs(pct) < 1e9 {
			d.Accuracy = strconv.FormatFloat(pct, 'f', 1, 64) + "%"
		} else {
			d.Accuracy = strconv.FormatFloat(pct, 'g', 4, 64) + "%" // within the CRD's 32 characters
		}
	}
	return d
}
