package controllers

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/internal/text"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// logLinesPerRank is how many of each rank's last log lines a hang's message carries.
const logLinesPerRank = 2

// watchHang sets a job's Stalled condition and hang gauges from its status and the slowest epoch
// seen. It reports whether the run turned hung now, and then appends each rank's last log lines to
// the message.
func (r *StatusReconciler) watchHang(ctx context.Context, tj *mlv1.TrainingJob, now time.Time) bool {
	var h derive.Hang
	if tj.MonitoringEnabled() {
		s, _ := r.jobs.peek(tj)
		h = derive.DetectHang(tj, tj.Status, r.slowestEpoch(tj), lastOutput(s), now)
	}
	setHangGauges(tj, h)
	details := ""
	// Read once, when the run turns hung.
	if derive.TurnsHung(tj.Status, h) {
		details = r.stallDetails(ctx, tj, now)
	}
	return derive.ApplyHang(&tj.Status, h, details, metav1.NewTime(now))
}

// setHangGauges sets the hang series of a running monitored job, and drops them for any other job.
func setHangGauges(tj *mlv1.TrainingJob, h derive.Hang) {
	l := []string{tj.Namespace, tj.Name}
	if tj.Status.State != mlv1.StateRunning || !tj.MonitoringEnabled() {
		metrics.SinceProgress.DeleteLabelValues(l...)
		metrics.HangTimeout.DeleteLabelValues(l...)
		return
	}
	metrics.SinceProgress.WithLabelValues(l...).Set(h.Since.Seconds())
	metrics.HangTimeout.WithLabelValues(l...).Set(h.Timeout.Seconds())
}

// stallDetails names the ranks that hold the run back, reading every rank's progress once, and adds
// each rank's last log lines.
func (r *StatusReconciler) stallDetails(ctx context.Context, tj *mlv1.TrainingJob, now time.Time) string {
	pods := &corev1.PodList{}
	labels := client.MatchingLabels{names.NameLabel: tj.Name, names.AttemptLabel: strconv.Itoa(int(tj.Status.Attempt))}
	if err := r.List(ctx, pods, client.InNamespace(tj.Namespace), labels); err != nil {
		return ""
	}
	var running []corev1.Pod
	for _, p := range derive.ByRank(pods.Items) {
		if p.Status.Phase == corev1.PodRunning {
			running = append(running, *p)
		}
	}
	var parts []string
	for _, part := range []string{derive.Stragglers(r.ranksProgress(ctx, tj, running)), r.lastLogLines(ctx, running, now)} {
		if part != "" {
			parts = append(parts, part)
		}
	}
	return strings.Join(parts, "; ")
}

// slowestEpoch returns the slowest epoch this process has seen the job's current attempt take.
func (r *StatusReconciler) slowestEpoch(tj *mlv1.TrainingJob) time.Duration {
	s, _ := r.jobs.peek(tj)
	if s.pace.attempt != tj.Status.Attempt {
		return 0
	}
	return s.pace.slowest
}

// epochPace follows the epochs rank 0 reports: when the current one was first seen, and the
// slowest.
type epochPace struct {
	attempt int32
	epoch   float64
	at      time.Time
	slowest time.Duration
}

// observe records a sample's epoch read at at. An attempt's first epoch counts from when all its
// workers ran (running), so a slow first epoch sets the pace as soon as it ends.
func (p *epochPace) observe(attempt int32, s derive.Sample, at, running time.Time) {
	if s.Epoch == nil {
		return
	}
	if p.attempt != attempt || p.at.IsZero() {
		*p = epochPace{attempt: attempt, epoch: *s.Epoch, at: at}
		if *s.Epoch >= 1 && !running.IsZero() && running.Before(at) {
			p.slowest = at.Sub(running)
		}
		return
	}
	if *s.Epoch != p.epoch {
		p.slowest = max(p.slowest, at.Sub(p.at))
		p.epoch, p.at = *s.Epoch, at
	}
}

// lastLogLines describes each rank's last log lines and how long ago it printed, for a hang's
// message. A rank silent as long as the run is usually the culprit.
func (r *StatusReconciler) lastLogLines(ctx context.Context, pods []corev1.Pod, now time.Time) string {
	if r.Logs == nil {
		return ""
	}
	var parts []string
	for i := range pods {
		p := &pods[i]
		out, err := r.Logs.TailLog(ctx, p.Namespace, p.Name, names.ContainerName, logLinesPerRank)
		if err != nil {
			parts = append(parts, fmt.Sprintf("rank %s: log not read (%v)", p.Labels[names.RankLabel], err))
			continue
		}
		parts = append(parts, "rank "+p.Labels[names.RankLabel]+describeLog(out, now))
	}
	return strings.Join(parts, "; ")
}

// maxLogLine bounds each log line a hang's message quotes (240 bytes and the mark of the cut).
const maxLogLine = 243

// describeLog turns timestamped log lines into " printed nothing for 10m3s, last: LINE | LINE". It
// omits the age when the lines carry no time.
func describeLog(out string, now time.Time) string {
	var lines []string
	var last time.Time
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if ts, rest, ok := strings.Cut(line, " "); ok {
			if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
				last, line = t, rest
			}
		}
		lines = append(lines, text.Clip(line, maxLogLine))
	}
	switch {
	case len(lines) == 0:
		return " printed nothing"
	case last.IsZero():
		return ", last: " + strings.Join(lines, " | ")
	}
	return fmt.Sprintf(" printed nothing for %s, last: %s", now.Sub(last).Round(time.Second), strings.Join(lines, " | "))
}
