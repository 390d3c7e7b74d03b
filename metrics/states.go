package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

var totalDesc = prometheus.NewDesc("trainingjob_total", "TrainingJobs by namespace and state.", []string{LabelNamespace, "state"}, nil)

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

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- totalDesc }

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
}

// CountByState counts jobs by [namespace, state]; every state appears for every namespace seen, so a
// state that empties reads 0 instead of vanishing.
func CountByState(jobs []mlv1.TrainingJob) map[[2]string]int {
	out := map[[2]string]int{}
	states := []mlv1.State{mlv1.StatePending, mlv1.StateInitializing, mlv1.StateRunning, mlv1.StateCompleted, mlv1.StateFailed, mlv1.StateSuspended}
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
