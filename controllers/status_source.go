package controllers

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

// Where a rank's progress comes from: the program's own endpoint on METRICS_PORT when it serves
// training figures, else the supervisor's endpoint, which serves what it recognised in the output.

// readProgress reads the progress of the rank at ip from the program's endpoint, else the
// supervisor's. endpointOnly keeps to the program's endpoint, so a flaky read does not fall back to
// older figures.
func (r *StatusReconciler) readProgress(ctx context.Context, tj *mlv1.TrainingJob, ip string, endpointOnly bool) (sample derive.Sample,
	endpointErr, err error) {
	if ip == "" {
		return derive.Sample{}, nil, fmt.Errorf("no pod IP")
	}
	sample, err = r.readSample(ctx, ip, tj.MetricsPort())
	if err == nil && sample.Reports() || !builders.Supervised(tj) || endpointOnly {
		return sample, err, err
	}
	endpointErr = err
	out, serr := r.readSample(ctx, ip, builders.SupervisorPort)
	if serr != nil {
		if err != nil {
			return derive.Sample{}, endpointErr, fmt.Errorf("%w; the supervisor: %w", err, serr)
		}
		return sample, nil, nil
	}
	out.FromOutput = true
	return out, endpointErr, nil
}

// readSample reads one endpoint's /metrics.
func (r *StatusReconciler) readSample(ctx context.Context, ip string, port int32) (derive.Sample, error) {
	url := "http://" + net.JoinHostPort(ip, strconv.Itoa(int(port))) + "/metrics"
	s, err := r.readEndpoint(ctx, url)
	if err != nil {
		return derive.Sample{}, fmt.Errorf("GET %s: %w", url, err)
	}
	return s, nil
}

// lastOutput returns when rank 0 last printed, as its supervisor said at the last read; zero when
// unknown.
func lastOutput(s progressState) time.Time {
	if s.sample == nil || s.sample.OutputIdle == nil || *s.sample.OutputIdle < 0 {
		return time.Time{}
	}
	return s.at.Add(-time.Duration(*s.sample.OutputIdle * float64(time.Second)))
}

// noSourceNotice is how long a run goes with no progress source before an event says so; a program
// takes a while to import its framework and open its endpoint.
const noSourceNotice = time.Minute

// noSourceEvent records, once per attempt, that the attempt has had no progress source for
// noSourceNotice. The condition says so from the first read; the event is for kubectl describe and
// alerting.
func (r *StatusReconciler) noSourceEvent(tj *mlv1.TrainingJob, state *progressState, now time.Time) {
	c := meta.FindStatusCondition(tj.Status.Conditions, mlv1.ConditionProgressReported)
	if r.Recorder == nil || c == nil || c.Reason != derive.ReasonNoProgressSource || now.Sub(c.LastTransitionTime.Time) < noSourceNotice {
		return
	}
	noticed := false
	r.jobs.with(state, func(s *progressState) {
		noticed = s.noticed == tj.Status.Attempt+1
		s.noticed = tj.Status.Attempt + 1
	})
	if !noticed {
		r.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, derive.ReasonNoProgressSource, "ProgressUnknown", "%s", c.Message)
	}
}
