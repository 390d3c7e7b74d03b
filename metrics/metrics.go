// Package metrics holds the operator's Prometheus series. They are package-level vectors registered once
// into controller-runtime's registry (served on the manager's metrics endpoint). Per-TrainingJob series
// carry the labels namespace and training_job and are deleted with the job (DeleteJob).
package metrics

import (
	"regexp"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Label names.
const (
	LabelNamespace   = "namespace"
	LabelTrainingJob = "training_job"
)

var jobLabels = []string{LabelNamespace, LabelTrainingJob}

func jobGauge(name, help string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, jobLabels)
}

// Per-job gauges set from rank 0's figures and the hang watch, for monitored jobs (the status's own
// figures are read at scrape time: states.go).
var (
	ProgressPercent = jobGauge("trainingjob_progress_percent", "Training progress of the job in percent (epochs or steps done over planned).")
	CurrentEpoch    = jobGauge("trainingjob_current_epoch", "Epoch rank 0 last reported.")
	Loss            = jobGauge("trainingjob_loss", "Training loss rank 0 last reported.")
	Accuracy        = jobGauge("trainingjob_accuracy", "Accuracy (0 to 1) rank 0 last reported.")
	GPUUtilization  = jobGauge("trainingjob_gpu_utilization_percent",
		"GPU utilisation rank 0 (or its DCGM exporter) last reported, in percent.")
	SinceProgress = jobGauge("trainingjob_seconds_since_progress",
		"Seconds since rank 0 last advanced (a new epoch or step), or since every worker of the attempt started running "+
			"when it has not advanced in this attempt; 0 while the job does not run.")
	HangTimeout = jobGauge("trainingjob_hang_timeout_seconds",
		"The timeout trainingjob_seconds_since_progress is held to now: failurePolicy.startupTimeoutSeconds before rank 0 advances, "+
			"the stall timeout after; 0 when no check applies.")
	perJob = []*prometheus.GaugeVec{ProgressPercent, CurrentEpoch, Loss, Accuracy, GPUUtilization, SinceProgress, HangTimeout}
)

// Checkpoint series, per job, from rank 0's checkpoint agent.
var (
	CheckpointSize     = jobGauge("trainingjob_checkpoint_size_bytes", "Bytes of the job's complete checkpoints kept in storage.")
	CheckpointsCreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainingjob_checkpoint_created_total", Help: "New complete checkpoints the job's agent saw.",
	}, jobLabels)
	CheckpointsDeleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainingjob_checkpoint_deleted_total", Help: "Checkpoints rotation deleted.",
	}, jobLabels)
)

// Counters and the reconcile histogram.
var (
	Created = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainingjob_created_total", Help: "TrainingJobs the operator accepted.",
	}, []string{LabelNamespace})
	Completed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainingjob_completed_total", Help: "TrainingJobs that finished, by result: Succeeded, TargetReached, EarlyStopped or Failed.",
	}, []string{"result"})
	Failed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainingjob_failed_total", Help: "TrainingJobs that failed, by reason (BackoffLimitExceeded, DeadlineExceeded, ...).",
	}, []string{"reason"})
	Reconciliations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainingjob_reconciliation_total",
		Help: "Reconciles of TrainingJobs by controller (trainingjob, trainingjob-status) and result: success, requeue or error.",
	}, []string{"controller", "result"})
	ReconcileDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "trainingjob_reconciliation_duration_seconds", Help: "Time one reconcile of a TrainingJob took, by controller.",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
	}, []string{"controller"})
	ReconcileErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainingjob_reconciliation_errors_total",
		Help: "Failed reconciles by controller and error type: conflict, not_found, invalid, forbidden, timeout, scrape or other.",
	}, []string{"controller", "error_type"})
)

// The status-write budget (--status-write-qps) the controllers share.
var (
	StatusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainingjob_status_writes_total",
		Help: "Status writes by controller, class (urgent: a transition, made at once; routine: figures and details, " +
			"in turn within --status-write-qps) and result (written, or deferred to the job's turn).",
	}, []string{"controller", "class", "result"})
	StatusWritesWaiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "trainingjob_status_writes_waiting", Help: "Routine status writes waiting for the turn they reserved in --status-write-qps.",
	})
)

func init() {
	for _, g := range perJob {
		metrics.Registry.MustRegister(g)
	}
	metrics.Registry.MustRegister(Created, Completed, Failed, Reconciliations, ReconcileDuration, ReconcileErrors,
		CheckpointSize, CheckpointsCreated, CheckpointsDeleted, StatusWrites, StatusWritesWaiting)
}

// DeleteProgress removes the series of rank 0's figures and of the hang watch of a TrainingJob that
// finished: its final figures stay in its status.
func DeleteProgress(namespace, name string) {
	l := prometheus.Labels{LabelNamespace: namespace, LabelTrainingJob: name}
	for _, g := range perJob {
		g.Delete(l)
	}
}

// DeleteJob removes every per-job series of a TrainingJob.
func DeleteJob(namespace, name string) {
	l := prometheus.Labels{LabelNamespace: namespace, LabelTrainingJob: name}
	for _, g := range perJob {
		g.Delete(l)
	}
	CheckpointSize.Delete(l)
	CheckpointsCreated.Delete(l)
	CheckpointsDeleted.Delete(l)
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// Names returns the names of every series the operator exports; a histogram's are its _bucket, _sum and
// _count series. Dashboards and alert rules may refer to these (tests check they do not refer to others).
func Names() []string {
	collectors := []prometheus.Collector{Created, Completed, Failed, Reconciliations, ReconcileErrors, states,
		CheckpointSize, CheckpointsCreated, CheckpointsDeleted, StatusWrites, StatusWritesWaiting}
	for _, g := range perJob {
		collectors = append(collectors, g)
	}
	var names []string
	for _, c := range collectors {
		ch := make(chan *prometheus.Desc, 16)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			names = append(names, fqName.FindStringSubmatch(d.String())[1])
		}
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		names = append(names, "trainingjob_reconciliation_duration_seconds"+suffix)
	}
	sort.Strings(names)
	return names
}
