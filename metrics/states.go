package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

var totalDesc = prometheus.NewDesc("trainingjob_total", "TrainingJobs by namespace and state.", []string{LabelNamespace, "state"}, nil)

// The goodput series, from each job's status.goodput at every scrape (docs/goodput.md): what the status
// says, with the time since its accountedTime given to its category (derive.GoodputAt), for as long as the
// job exists.
var (
	goodputDesc = prometheus.NewDesc("trainingjob_goodput_seconds_total",
		"Productive training seconds of the job that no restart can take back any more "+
			"(status.goodput.productiveSeconds less the training since the newest checkpoint).", jobLabels, nil)
	badputDesc = prometheus.NewDesc("trainingjob_badput_seconds_total",
		"Seconds of the job's wall time that did not train the model, by category: "+
			"queued, scheduling, startup, restart, lost_work, hang, checkpoint.",
		append(append([]string{}, jobLabels...), "category"), nil)
	gpuSecondsDesc   = prometheus.NewDesc("trainingjob_gpu_seconds_total", "GPU-seconds held by the job's running workers.", jobLabels, nil)
	goodputRatioDesc = prometheus.NewDesc("trainingjob_goodput_ratio",
		"Productive time over all accounted time of the job, 0 to 1 (status.goodput.percent).", jobLabels, nil)
)

// stateCollector counts TrainingJobs by namespace and state from the manager's cache when Prometheus
// scrapes, so the counts are exact without bookkeeping on every transition.
type stateCollector struct {
	mu     sync.Mutex
	reader client.Reader
}

var states = &stateCollector{}

func init() { metrics.Registry.MustRegister(states) }

// SetStateReader sets where trainingjob_total counts jobs: the manager's cached client.
func SetStateReader(r client.Reader) {
	states.mu.Lock()
	defer states.mu.Unlock()
	states.reader = r
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{totalDesc, goodputDesc, badputDesc, gpuSecondsDesc, goodputRatioDesc} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	reader := c.reader
	c.mu.Unlock()
	if reader == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list := &mlv1.TrainingJobList{}
	if err := reader.List(ctx, list); err != nil {
		// The cache is not started or synced yet: export nothing rather than fail the whole scrape.
		return
	}
	for key, n := range CountByState(list.Items) {
		ch <- prometheus.MustNewConstMetric(totalDesc, prometheus.GaugeValue, float64(n), key[0], key[1])
	}
	now := time.Now()
	for i := range list.Items {
		collectGoodput(ch, &list.Items[i], now)
	}
}

// collectGoodput sends a job's goodput series as of now; none for a job the operator has not accounted.
func collectGoodput(ch chan<- prometheus.Metric, tj *mlv1.TrainingJob, now time.Time) {
	g := derive.GoodputAt(tj, now)
	if g == nil {
		return
	}
	ns, name := tj.Namespace, tj.Name
	ch <- prometheus.MustNewConstMetric(goodputDesc, prometheus.CounterValue, SecuredGoodput(g), ns, name)
	for category, v := range BadputByLabel(g.BadputSeconds) {
		ch <- prometheus.MustNewConstMetric(badputDesc, prometheus.CounterValue, v, ns, name, category)
	}
	ch <- prometheus.MustNewConstMetric(gpuSecondsDesc, prometheus.CounterValue, g.GPUSeconds, ns, name)
	// The ratio only when all the time is known: a run with no progress source is not low on goodput.
	if total := g.AccountedSeconds(); total > 0 && g.UnknownSeconds == 0 {
		ch <- prometheus.MustNewConstMetric(goodputRatioDesc, prometheus.GaugeValue, g.ProductiveSeconds/total, ns, name)
	}
}

// SecuredGoodput returns the value of trainingjob_goodput_seconds_total: productive seconds less those a restart would
// still turn into lost work, so that the counter never goes back.
func SecuredGoodput(g *mlv1.GoodputStatus) float64 {
	return max(0, g.ProductiveSeconds-g.SinceCheckpointSeconds)
}

// BadputByLabel returns each badput category's seconds by its label value.
func BadputByLabel(b mlv1.BadputSeconds) map[string]float64 {
	return map[string]float64{"queued": b.Queued, "scheduling": b.Scheduling, "startup": b.Startup, "restart": b.Restart,
		"lost_work": b.LostWork, "hang": b.Hang, "checkpoint": b.Checkpoint}
}

// CountByState counts jobs by [namespace, state]; every state appears for every namespace seen, so a
// state that empties reads 0 instead of vanishing.
func CountByState(jobs []mlv1.TrainingJob) map[[2]string]int {
	out := map[[2]string]int{}
	states := []mlv1.State{
		mlv1.StatePending, mlv1.StateInitializing, mlv1.StateRunning, mlv1.StateCompleted, mlv1.StateFailed, mlv1.StateSuspended,
	}
	for _, j := range jobs {
		for _, s := range states {
			k := [2]string{j.Namespace, string(s)}
			out[k] += 0
		}
		state := j.Status.State
		if state == "" {
			state = mlv1.StatePending
		}
		out[[2]string{j.Namespace, string(state)}]++
	}
	return out
}
