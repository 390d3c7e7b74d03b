// Package tracking derives, as pure functions of a TrainingJob, what the operator writes to the job's
// MLflow run (package mlflow is the client): the run's tags and params, the metrics of an epoch, the
// newest checkpoint, the run's final status and its link. The TrackingController makes the calls.
package tracking

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/text"
	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking/mlflow"
)

// Tags of the run the operator keeps. UIDTag finds the run of a job again (an operator stopped between
// creating the run and recording it in the status never creates a second one); LoggedEpochTag is logged
// in the same batch as an epoch's metrics, so the last epoch logged is known from the run itself.
const (
	UIDTag              = "trainingjob.uid"
	LoggedEpochTag      = "trainingjob.logged_epoch"
	CheckpointTag       = "trainingjob.checkpoint.latest"
	CheckpointEpochTag  = "trainingjob.checkpoint.latest_epoch"
	maxParamValueLength = 6000 // MLflow 2.x's limit
)

// RunTags returns the tags the run is created with: the job's identity, what it trains and on what, and the
// kubectl command that shows it.
func RunTags(tj *mlv1.TrainingJob, opts builders.Options) []mlflow.Tag {
	tags := []mlflow.Tag{
		{Key: UIDTag, Value: string(tj.UID)},
		{Key: "trainingjob.namespace", Value: tj.Namespace},
		{Key: "trainingjob.name", Value: tj.Name},
		{Key: "trainingjob.framework", Value: string(tj.Spec.Framework)},
		{Key: "trainingjob.model", Value: tj.Spec.Model},
		{Key: "trainingjob.dataset", Value: tj.Spec.Dataset},
		{Key: "trainingjob.image", Value: builders.Image(tj, opts)},
		{Key: "trainingjob.num_workers", Value: strconv.Itoa(int(tj.Spec.NumWorkers))},
		{Key: "trainingjob.gpus_per_worker", Value: strconv.Itoa(int(tj.GPUsPerWorker()))},
		{Key: "trainingjob.kubectl", Value: fmt.Sprintf("kubectl get trainingjob %s -n %s", tj.Name, tj.Namespace)},
		{Key: "mlflow.source.type", Value: "JOB"},
		{Key: "mlflow.source.name", Value: "trainingjob/" + tj.Namespace + "/" + tj.Name},
	}
	out := tags[:0]
	for _, t := range tags {
		if t.Value != "" {
			out = append(out, t)
		}
	}
	return out
}

// Params returns the hyperparameters under their spec names (learningRate, batchSize, ...), then
// additionalParams as written, sorted by name.
func Params(tj *mlv1.TrainingJob) []mlflow.Tag {
	h := tj.Spec.Hyperparameters
	if h == nil {
		return nil
	}
	p := map[string]string{}
	setF := func(k string, v *float64) {
		if v != nil {
			p[k] = strconv.FormatFloat(*v, 'g', -1, 64)
		}
	}
	setI := func(k string, v *int32) {
		if v != nil {
			p[k] = strconv.Itoa(int(*v))
		}
	}
	setF("learningRate", h.LearningRate)
	setI("batchSize", h.BatchSize)
	setI("epochs", h.Epochs)
	setI("warmupSteps", h.WarmupSteps)
	setI("gradientAccumulationSteps", h.GradientAccumulationSteps)
	if h.Optimizer != "" {
		p["optimizer"] = string(h.Optimizer)
	}
	if h.MixedPrecision != nil {
		p["mixedPrecision"] = strconv.FormatBool(*h.MixedPrecision)
	}
	for k, v := range h.AdditionalParams {
		if _, named := p[k]; !named {
			p[k] = v
		}
	}
	return sorted(p)
}

func sorted(m map[string]string) []mlflow.Tag {
	out := make([]mlflow.Tag, 0, len(m))
	for k, v := range m {
		out = append(out, mlflow.Tag{Key: k, Value: text.Cut(v, maxParamValueLength)}) // valid UTF-8, or MLflow refuses it
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// EpochMetrics returns rank 0's metrics in the status as MLflow metrics at step = the epoch they were read at,
// stamped with the time they were read, sorted by key: loss, accuracy, learning_rate,
// samples_per_second, gpu_utilization and the custom values that are numbers. Nil when rank 0 reported
// no metric.
func EpochMetrics(st *mlv1.TrainingJobStatus, now time.Time) []mlflow.Metric {
	m := st.Metrics
	if m == nil {
		return nil
	}
	at := now
	if st.LastProgressTime != nil {
		at = st.LastProgressTime.Time
	}
	values := map[string]*float64{"loss": m.Loss, "accuracy": m.Accuracy, "learning_rate": m.LearningRate,
		"samples_per_second": m.Throughput, "gpu_utilization": m.GPUUtilization}
	for k, v := range m.Custom {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			if _, known := values[k]; !known {
				values[k] = &f
			}
		}
	}
	var out []mlflow.Metric
	for k, v := range values {
		if v != nil {
			out = append(out, mlflow.Metric{Key: k, Value: *v, Timestamp: at.UnixMilli(), Step: int64(m.Epoch)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// CheckpointTags name the newest checkpoint (its URI or path: checkpoints are never copied to MLflow);
// nil when there is none.
func CheckpointTags(st *mlv1.TrainingJobStatus) []mlflow.Tag {
	c := st.Checkpoint
	if c == nil || c.Latest == "" {
		return nil
	}
	return []mlflow.Tag{{Key: CheckpointTag, Value: c.Latest}, {Key: CheckpointEpochTag, Value: strconv.Itoa(int(c.LatestEpoch))}}
}

// FinalStatus returns the status a run ends with: FINISHED for a Completed job, FAILED for a Failed one;
// "" while the job has not ended.
func FinalStatus(state mlv1.State) string {
	switch state {
	case mlv1.StateCompleted:
		return mlflow.RunFinished
	case mlv1.StateFailed:
		return mlflow.RunFailed
	}
	return ""
}

// RunURL returns the run's page in the MLflow UI served at the tracking URI.
func RunURL(trackingURI, experimentID, runID string) string {
	return strings.TrimRight(trackingURI, "/") + "/#/experiments/" + url.PathEscape(experimentID) + "/runs/" + url.PathEscape(runID)
}

// LoggedEpoch returns the value of LoggedEpochTag among a run's tags; 0 when absent.
func LoggedEpoch(tags []mlflow.Tag) int32 {
	for _, t := range tags {
		if t.Key == LoggedEpochTag {
			n, _ := strconv.Atoi(t.Value)
			return int32(n)
		}
	}
	return 0
}
