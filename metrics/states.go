package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
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
	goodputDesc      = prometheus.NewDesc("trainingjob_goodput_seconds_total", goodputHelp, jobLabels, nil)
	reclassifiedDesc = prometheus.NewDesc("trainingjob_goodput_reclassified_seconds_total", reclassifiedHelp, jobLabels, nil)
	badputDesc       = prometheus.NewDesc("trainingjob_badput_seconds_total",
		"Seconds of the job's wall time that did not train the model, by category: "+
			"queued, scheduling, startup, restart, lost_work (once known), hang, checkpoint.",
		append(append([]string{}, jobLabels...), "category"), nil)
	gpuSecondsDesc   = prometheus.NewDesc("trainingjob_gpu_seconds_total", "GPU-seconds held by the job's running workers.", jobLabels, nil)
	goodputRatioDesc = prometheus.NewDesc("trainingjob_goodput_ratio",
		"Productive time over all accounted time of the job, 0 to 1 (status.goodput.percent).", jobLabels, nil)
)

const (
	goodputHelp = "Seconds of the job counted productive as they passed (status.goodput.productiveSeconds plus reclassifiedSeconds); " +
		"less trainingjob_goodput_reclassified_seconds_total, the productive time."
	reclassifiedHelp = "Seconds of trainingjob_goodput_seconds_total later found not productive and counted in a badput category too " +
		"(a restart's lost work and its time since the failure, a hang, checkpoint saves), once known."
)

// The series of a job's status, read at every scrape for every job (nothing is kept per job between
// scrapes).
var (
	allocatedGPUsDesc    = prometheus.NewDesc("trainingjob_allocated_gpus", "GPUs held by the job's running workers.", jobLabels, nil)
	allocatedWorkersDesc = prometheus.NewDesc("trainingjob_allocated_workers", "Worker pods of the job that are running.", jobLabels, nil)
	durationDesc         = prometheus.NewDesc("trainingjob_duration_seconds",
		"Seconds since the job's workers started (until it finished).", jobLabels, nil)
	restartsDesc = prometheus.NewDesc("trainingjob_restarts",
		"Restarts counted against the job's failurePolicy.backoffLimit (status.restartCount).", jobLabels, nil)
	waitingSinceDesc = prometheus.NewDesc("trainingjob_waiting_since_timestamp_seconds",
		"When the job's workers started waiting (Pending or Initializing: not scheduled, pulling images, restarting), "+
			"as a Unix time; 0 while they run or the job is over.", jobLabels, nil)
)

// stateCollector counts TrainingJobs by namespace and state from the manager's cache when Prometheus
// scrapes, so the counts are exact without bookkeeping on every transition.
type stateCollector struct {
	mu     sync.Mutex
	reader client.Reader
	// exported are the goodput counters each job (by UID) was last exported with: a counter is never
	// exported below it (floor).
	exported map[types.UID]derive.GoodputCounters
	// scrape serialises Collect's goodput, which reads and replaces exported.
	scrape sync.Mutex
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
	for _, d := range []*prometheus.Desc{totalDesc, goodputDesc, reclassifiedDesc,
		badputDesc, gpuSecondsDesc, goodputRatioDesc, allocatedGPUsDesc,
		allocatedWorkersDesc, durationDesc, restartsDesc, waitingSinceDesc} {
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
	// The cache's own objects, not copies (a scrape would copy every job): the collector only reads them.
	if err := reader.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		// The cache is not started or synced yet: export nothing rather than fail the whole scrape.
		return
	}
	for key, n := range CountByState(list.Items) {
		ch <- prometheus.MustNewConstMetric(totalDesc, prometheus.GaugeValue, float64(n), key[0], key[1])
	}
	c.scrape.Lock()
	defer c.scrape.Unlock()
	now := time.Now()
	exported := make(map[types.UID]derive.GoodputCounters, len(list.Items)) // the jobs gone are forgotten
	for i := range list.Items {
		tj := &list.Items[i]
		collectStatus(ch, tj, now)
		if g := derive.GoodputAt(tj, now); g != nil {
			last, ok := c.exported[tj.UID]
			exported[tj.UID] = collectGoodput(ch, tj, g, last, ok)
		}
	}
	c.exported = exported
}

// collectStatus sends the series of a job's status as of now: workers and GPUs held, the run's duration,
// its restarts, and since when its workers wait.
func collectStatus(ch chan<- prometheus.Metric, tj *mlv1.TrainingJob, now time.Time) {
	ns, name, st := tj.Namespace, tj.Name, &tj.Status
	active := st.Workers.Active
	if st.State == mlv1.StateCompleted || st.State == mlv1.StateFailed || st.State == mlv1.StateSuspended {
		active = 0
	}
	ch <- prometheus.MustNewConstMetric(allocatedWorkersDesc, prometheus.GaugeValue, float64(active), ns, name)
	gpus := ptr.Deref(tj.Spec.GPUsPerWorker, mlv1.DefaultGPUsPerWorker) // defaulted in the cache; a scrape never panics
	ch <- prometheus.MustNewConstMetric(allocatedGPUsDesc, prometheus.GaugeValue, float64(active*gpus), ns, name)
	ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.GaugeValue, float64(st.RestartCount), ns, name)
	ch <- prometheus.MustNewConstMetric(waitingSinceDesc, prometheus.GaugeValue, waitingSince(tj), ns, name)
	if start := st.StartTime; start != nil {
		end := now
		if c := st.CompletionTime; c != nil {
			end = c.Time
		}
		ch <- prometheus.MustNewConstMetric(durationDesc, prometheus.GaugeValue, end.Sub(start.Time).Seconds(), ns, name)
	}
}

// waitingSince returns when a Pending or Initializing job's workers started waiting, as a Unix time: its
// creation while Pending, the Running condition's last change while Initializing; 0 otherwise.
func waitingSince(tj *mlv1.TrainingJob) float64 {
	switch tj.Status.State {
	case mlv1.StatePending, "": // not written yet: Pending, as trainingjob_total counts it
		return float64(tj.CreationTimestamp.Unix())
	case mlv1.StateInitializing:
		for _, c := range tj.Status.Conditions {
			if c.Type == mlv1.ConditionRunning {
				return float64(c.LastTransitionTime.Unix())
			}
		}
		return float64(tj.CreationTimestamp.Unix())
	}
	return 0
}

// collectGoodput sends a job's goodput series from g, its goodput as of now, and returns the counters it
// sent: no less than last, what they were at the last scrape (when had). The status's figures never
// decrease (derive.Counters), but a reader extrapolates the status's category past its accountedTime, and
// the JobController's accounting is taken as its reconcile starts: a scrape during that reconcile counted
// the old category a few milliseconds past the accounting, as one before a completion counted its
// training past the end, kept to the second. The floor keeps those milliseconds.
func collectGoodput(ch chan<- prometheus.Metric, tj *mlv1.TrainingJob, g *mlv1.GoodputStatus, last derive.GoodputCounters,
	had bool) derive.GoodputCounters {
	ns, name := tj.Namespace, tj.Name
	c := derive.Counters(g)
	if had {
		c = floor(c, last)
	}
	ch <- prometheus.MustNewConstMetric(goodputDesc, prometheus.CounterValue, c.Goodput, ns, name)
	ch <- prometheus.MustNewConstMetric(reclassifiedDesc, prometheus.CounterValue, c.Reclassified, ns, name)
	for category, v := range BadputByLabel(c.Badput) {
		ch <- prometheus.MustNewConstMetric(badputDesc, prometheus.CounterValue, v, ns, name, category)
	}
	ch <- prometheus.MustNewConstMetric(gpuSecondsDesc, prometheus.CounterValue, c.GPUSeconds, ns, name)
	// The ratio only when all the time is known: a run with no progress source is not low on goodput.
	if total := g.AccountedSeconds(); total > 0 && g.UnknownSeconds == 0 {
		ch <- prometheus.MustNewConstMetric(goodputRatioDesc, prometheus.GaugeValue, g.ProductiveSeconds/total, ns, name)
	}
	return c
}

// floor returns c with each counter at least last's.
func floor(c, last derive.GoodputCounters) derive.GoodputCounters {
	b, l := &c.Badput, last.Badput
	for _, v := range []struct {
		v *float64
		l float64
	}{{&c.Goodput, last.Goodput}, {&c.Reclassified, last.Reclassified},
		{&c.GPUSeconds, last.GPUSeconds}, {&b.Queued, l.Queued}, {&b.Scheduling, l.Scheduling}, {&b.Startup, l.Startup},
		{&b.Restart, l.Restart}, {&b.LostWork, l.LostWork}, {&b.Hang, l.Hang}, {&b.Checkpoint, l.Checkpoint}} {
		*v.v = max(*v.v, v.l)
	}
	return c
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
