package e2e

import (
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/node"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// TestGoodputUnderFaults: the example trainer (two ranks, a checkpoint every epoch) while the test kills
// rank 1 at regular intervals and, once, stops it (SIGSTOP: a hang the operator acts on). The test
// keeps its own timeline with its own clock: when it struck, when the job's state changed, and, read
// from rank 0's endpoint every 100 ms, when rank 0 stepped and checkpointed. From it, the truth of each
// goodput category; the status must agree with it within the tolerance, in points of the run's wall
// time, beyond how late the test itself saw each boundary (a busy machine delays its looks), and the
// operator's series with the status.
//
// make test runs it for GOODPUT_SECONDS=45 with one kill and the hang, held to 5 points (its 1-second
// boundaries weigh more in a short run); make test-goodput runs the 3 minutes: a kill every 30 s,
// one of them a hang, held to 2 points.
func TestGoodputUnderFaults(t *testing.T) {
	t.Parallel() // its own namespace: runs beside the other long tests once the rest are done
	run := 45 * time.Second
	if v, err := strconv.Atoi(os.Getenv("GOODPUT_SECONDS")); err == nil && v > 0 {
		run = time.Duration(v) * time.Second
	}
	faults, every, tolerance := 2, run/3, 5.0
	if run >= 3*time.Minute {
		faults, every, tolerance = int(run/(30*time.Second)), 30*time.Second, 2.0
	}
	ns, name := newNamespace(t), "goodput"
	epochs := int32(run/time.Second) + 10 // an epoch takes a little over its 1 s delay
	job := trainerJob(ns, name, 2, epochs, "--epoch-delay=1s").BackoffLimit(int32(faults)+2, mlv1.RestartGang)
	tj := job.With(withPVCCheckpoints(3)).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.FailurePolicy.StallTimeoutSeconds = ptr.To[int32](3)
		tj.Spec.FailurePolicy.MaxAvoidedNodes = ptr.To[int32](0) // the kills are the test's, not the nodes'; the stack has two
		tj.Spec.Monitoring = &mlv1.MonitoringSpec{ScrapeIntervalSeconds: ptr.To[int32](1)}
	}).Obj()
	create(t, claim(ns), tj)
	o := &observer{t: t, ns: ns, name: name}
	o.follow(func(since time.Duration) { // strike every `every` from rank 0's first step, once the last strike's restart ran
		if len(o.faults) < faults && o.att == int32(len(o.faults)) && since >= every*time.Duration(len(o.faults)+1) {
			o.strike(len(o.faults) == faults/2) // the hang once, in the middle
		}
	})
	got := getTJ(t, ns, name)
	if got.Status.State != mlv1.StateCompleted || got.Status.Goodput == nil {
		t.Fatalf("state %s (%s), goodput %+v", got.Status.State, got.Status.FailureReason, got.Status.Goodput)
	}
	truth, slack := o.truth(got)
	status := statusShares(got.Status.Goodput)
	wall := got.Status.CompletionTime.Sub(got.CreationTimestamp.Time).Seconds()
	t.Logf("%d faults (%d kills, 1 hang) over %.1f s of wall time; %s goodput; category: truth (+- the test's own lag in seeing "+
		"its boundaries) / status, in seconds and %% of wall time", faults, faults-1, wall, got.Status.Goodput.Percent)
	for _, c := range categories {
		diff := math.Max(0, math.Abs(truth[c]-status[c])-slack[c]) / wall * 100
		t.Logf("  %-10s %7.1f s +-%.1f %5.1f%%   %7.1f s %5.1f%%   (%.1f points apart beyond the lag)",
			c, truth[c], slack[c], truth[c]/wall*100, status[c], status[c]/wall*100, diff)
		if diff > tolerance {
			t.Errorf("%s: truth %.1f s (+-%.1f s), status %.1f s: %.1f points of wall time apart beyond the test's lag, more than %.0f",
				c, truth[c], slack[c], status[c], diff, tolerance)
		}
	}
	assertGoodputSeries(t, got)
	plugins := buildPlugin(t)
	for _, args := range [][]string{{"get", "tj", name, "-n", ns, "-o", "wide"}, {"trainingjob", "status", name, "-n", ns}} {
		out, err := kubectlCmd(t, plugins, args...)
		if err != nil || !strings.Contains(strings.ToLower(out), got.Status.Goodput.Percent+" goodput") && args[0] == "trainingjob" {
			t.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
	}
}

// TestGoodputLostWorkFromTheCheckpointResumedFrom: the test kills rank 1 two seconds after rank 0 wrote a
// checkpoint (a checkpoint every 10 epochs), while the operator reads rank 0's checkpoint agent only
// every 30 s (monitoring.scrapeIntervalSeconds): at the failure it mostly knows an older checkpoint, the
// next attempt resumes from the new one (the stopped agent's final report). The lost work must be the
// test's own: the time from the checkpoint to the kill, within a second per kill.
func TestGoodputLostWorkFromTheCheckpointResumedFrom(t *testing.T) {
	t.Parallel() // its own namespace: runs beside the other long tests once the rest are done
	const kills = 2
	ns, name := newNamespace(t), "goodput-resumed"
	tj := trainerJob(ns, name, 2, 40, "--epoch-delay=1s").BackoffLimit(kills+2, mlv1.RestartGang).With(withPVCCheckpoints(3))
	tj = tj.With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint.Frequency = ptr.To[int32](10)
		tj.Spec.FailurePolicy.MaxAvoidedNodes = ptr.To[int32](0)
		tj.Spec.Monitoring = &mlv1.MonitoringSpec{ScrapeIntervalSeconds: ptr.To[int32](30)}
	})
	create(t, claim(ns), tj.Obj())
	o := &observer{t: t, ns: ns, name: name}
	o.follow(func(time.Duration) { // kill 2 s after a checkpoint of the current attempt, once the last kill's restart ran
		c := lastBefore(o.checkpoints, time.Now())
		if len(o.faults) < kills && o.att == int32(len(o.faults)) && c.After(o.first[o.att]) && time.Since(c) >= 2*time.Second {
			o.strike(false)
		}
	})
	got := getTJ(t, ns, name)
	g, c := got.Status.Goodput, got.Status.Checkpoint
	if got.Status.State != mlv1.StateCompleted || g == nil || c == nil || len(o.faults) != kills {
		t.Fatalf("state %s (%s), %d kills, goodput %+v, checkpoint %+v", got.Status.State, got.Status.FailureReason, len(o.faults), g, c)
	}
	truths, slack := o.truth(got)
	truth := truths[mlv1.BadputLostWork]
	t.Logf("lost work: the test's clock %.2f s (+-%.2f s, its lag in seeing them), the status %.2f s (%s goodput); the last attempt "+
		"resumed from %s (written %v)", truth, slack[mlv1.BadputLostWork], g.BadputSeconds.LostWork, g.Percent, c.ResumedFrom, c.ResumedFromTime)
	if g.UnknownSeconds != 0 { // the trainer serves progress from its first step: each attempt's start is seen within 500 ms
		t.Errorf("unknown time %.2f s (%s goodput), want none: the trainer reports progress", g.UnknownSeconds, g.Percent)
	}
	off := math.Abs(g.BadputSeconds.LostWork-truth) - slack[mlv1.BadputLostWork]
	if off > kills || g.LostWorkEstimate != nil || c.ResumedAttempt != got.Status.Attempt || c.ResumedFromTime == nil {
		t.Errorf("lost work %.2f s, the test's clock says %.2f s (1 s per kill allowed); estimate left %+v; "+
			"resumed attempt %d of %d, from %q written %v", g.BadputSeconds.LostWork, truth, g.LostWorkEstimate, c.ResumedAttempt,
			got.Status.Attempt, c.ResumedFrom, c.ResumedFromTime)
	}
}

var categories = []string{mlv1.GoodputProductive, mlv1.BadputScheduling, mlv1.BadputStartup, mlv1.BadputRestart, mlv1.BadputLostWork,
	mlv1.BadputHang, mlv1.BadputCheckpoint, mlv1.BadputQueued}

func statusShares(g *mlv1.GoodputStatus) map[string]float64 {
	b := g.BadputSeconds
	return map[string]float64{mlv1.GoodputProductive: g.ProductiveSeconds, mlv1.BadputScheduling: b.Scheduling, mlv1.BadputStartup: b.Startup,
		mlv1.BadputRestart: b.Restart, mlv1.BadputLostWork: b.LostWork, mlv1.BadputHang: b.Hang, mlv1.BadputCheckpoint: b.Checkpoint,
		mlv1.BadputQueued: b.Queued}
}

// observer keeps the test's own timeline of a job.
type observer struct {
	t        *testing.T
	ns, name string
	// running is when each attempt was first seen Running; first when its rank 0 first stepped.
	running, first map[int32]time.Time
	// steps are the times rank 0's step changed, checkpoints when its checkpoint epoch did.
	steps, checkpoints []time.Time
	faults             []strike
	// lag is, for each time the test looked, how far from it what it saw may be: it happened after the look
	// before began and before this look ended (a busy machine stretches the 100 ms polls).
	lag   map[time.Time]time.Duration
	pid   int // rank 1's trainer in the current attempt
	state mlv1.State
	att   int32
}

// poll is how often the observer looks.
const poll = 100 * time.Millisecond

// strike is a fault: when, whether a hang, and when the operator started the next attempt.
type strike struct {
	at, next time.Time
	hang     bool
}

// follow polls every 100 ms until the job is over: its state and attempt, rank 0's endpoint; strike is
// asked each time how long after rank 0's first step it is.
func (o *observer) follow(strike func(since time.Duration)) {
	o.running, o.first, o.lag = map[int32]time.Time{}, map[int32]time.Time{}, map[time.Time]time.Duration{}
	var step, ckpt string
	deadline := time.Now().Add(15 * time.Minute)
	var before, last time.Time // the two looks before this one
	for time.Now().Before(deadline) {
		now := time.Now()
		if !before.IsZero() { // what the last look saw happened after the one before it, and before it ended
			o.lag[last] = max(last.Sub(before), now.Sub(last)-poll)
		}
		before, last = last, now
		tj := getTJ(o.t, o.ns, o.name)
		if tj.Status.Attempt != o.att && len(o.faults) > 0 && o.faults[len(o.faults)-1].next.IsZero() {
			o.faults[len(o.faults)-1].next = now
		}
		o.att, o.state = tj.Status.Attempt, tj.Status.State
		if o.state == mlv1.StateCompleted || o.state == mlv1.StateFailed {
			return
		}
		if _, seen := o.running[o.att]; !seen && o.state == mlv1.StateRunning {
			o.running[o.att], step, ckpt = now, "", ""
			o.pid = runningPIDs(o.t, o.ns, o.name, 2)[1]
		}
		if _, running := o.running[o.att]; running {
			s, c := o.rank0()
			if s != step && s != "" {
				if _, ok := o.first[o.att]; !ok {
					o.first[o.att] = now
				}
				o.steps, step = append(o.steps, now), s
			}
			if c != ckpt && c != "" {
				o.checkpoints, ckpt = append(o.checkpoints, now), c
			}
		}
		if _, stepped := o.first[o.att]; stepped {
			strike(now.Sub(o.first[0]))
		}
		time.Sleep(poll)
	}
	o.t.Fatalf("the job did not end in 15 minutes")
}

// strike kills rank 1 (SIGKILL) or stops it (SIGSTOP: alive, silent, its peer blocked).
func (o *observer) strike(hang bool) {
	sig := syscall.SIGKILL
	if hang {
		sig = syscall.SIGSTOP
	}
	o.faults = append(o.faults, strike{at: time.Now(), hang: hang})
	pid := o.pid
	if hang {
		pid = supervised(o.t, pid) // stop the trainer itself: its supervisor, stopped, would not stop it
	}
	if err := syscall.Kill(pid, sig); err != nil {
		o.t.Fatalf("signalling rank 1 (pid %d): %v", o.pid, err)
	}
}

// supervised returns the program a container's supervisor (its first process, pid) runs.
func supervised(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	f := strings.Fields(string(data))
	if err != nil || len(f) == 0 {
		t.Fatalf("the program under the supervisor (pid %d): %v %q", pid, err, data)
	}
	child, err := strconv.Atoi(f[0])
	if err != nil {
		t.Fatal(err)
	}
	return child
}

// rank0 reads rank 0's training_step and training_checkpoint_epoch, "" when not served.
func (o *observer) rank0() (step, ckpt string) {
	pods := workerPods(o.t, o.ns, o.name)
	p := pods[0]
	if p == nil || p.Status.PodIP == "" {
		return "", ""
	}
	c := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := c.Get("http://" + net.JoinHostPort(p.Status.PodIP, "8080") + "/metrics")
	if err != nil {
		return "", ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	s, err := derive.ParseSample(strings.NewReader(string(body)))
	if err != nil || s.Step == nil {
		return "", ""
	}
	return strconv.FormatFloat(*s.Step, 'f', -1, 64), strconv.FormatFloat(s.Custom["training_checkpoint_epoch"], 'f', -1, 64)
}

// truth returns each category's seconds by the test's timeline: scheduling until attempt 0 runs, startup until
// its rank 0 steps; for each fault, the work since the newer of the attempt's first step and its last
// checkpoint is lost; a kill's restart lasts until the next attempt's first step; a hang lasts from rank
// 0's last step to the operator's new attempt, then its restart until the first step. The rest of the
// wall time (creation to completion, as the status records them) trained. slack is how far each may be off:
// the lag of the looks that saw its boundaries.
func (o *observer) truth(tj *mlv1.TrainingJob) (truth, slack map[string]float64) {
	truth, slack = map[string]float64{}, map[string]float64{}
	t0, end := tj.CreationTimestamp.Time, tj.Status.CompletionTime.Time
	// span adds to a category the time from one boundary to the next, and each boundary's lag to its slack.
	span := func(category string, from, to time.Time) {
		truth[category] += to.Sub(from).Seconds()
		slack[category] += (o.lag[from] + o.lag[to]).Seconds()
	}
	// Productive is the rest: uncertain by the lag of each boundary between it and another category.
	edges := map[time.Time]bool{o.first[0]: true}
	span(mlv1.BadputScheduling, t0, o.running[0])
	span(mlv1.BadputStartup, o.running[0], o.first[0])
	for i, f := range o.faults {
		attempt := int32(i)
		stop := f.at
		if f.hang {
			stop = lastBefore(o.steps, f.at)
			edges[stop] = true
			span(mlv1.BadputHang, stop, f.next)
			span(mlv1.BadputRestart, f.next, o.first[attempt+1])
		} else {
			span(mlv1.BadputRestart, f.at, o.first[attempt+1])
		}
		kept := o.first[attempt]
		if c := lastBefore(o.checkpoints, stop); c.After(kept) {
			kept = c
		}
		span(mlv1.BadputLostWork, kept, stop)
		edges[kept], edges[o.first[attempt+1]] = true, true
	}
	for edge := range edges {
		slack[mlv1.GoodputProductive] += o.lag[edge].Seconds()
	}
	bad := 0.0
	for _, v := range truth {
		bad += v
	}
	truth[mlv1.GoodputProductive] = end.Sub(t0).Seconds() - bad
	return truth, slack
}

func lastBefore(ts []time.Time, t time.Time) time.Time {
	i := sort.Search(len(ts), func(i int) bool { return !ts[i].Before(t) })
	if i == 0 {
		return time.Time{}
	}
	return ts[i-1]
}

// assertGoodputSeries: the operator's series (its registry, served on /metrics) are the status's figures.
func assertGoodputSeries(t *testing.T, tj *mlv1.TrainingJob) {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	g := tj.Status.Goodput
	c := derive.Counters(g)
	want := map[string]float64{"trainingjob_goodput_seconds_total": c.Goodput, "trainingjob_gpu_seconds_total": g.GPUSeconds,
		"trainingjob_goodput_reclassified_seconds_total": c.Reclassified}
	for category, v := range metrics.BadputByLabel(c.Badput) {
		want["trainingjob_badput_seconds_total/"+category] = v
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.Metric {
			if label(m, metrics.LabelNamespace) != tj.Namespace || label(m, metrics.LabelTrainingJob) != tj.Name || m.Counter == nil {
				continue
			}
			key := f.GetName()
			if c := label(m, "category"); c != "" {
				key += "/" + c
			}
			got[key] = m.Counter.GetValue()
		}
	}
	for k, v := range want {
		// A counter is never exported below an earlier scrape's, which may have counted the job's last
		// category a few milliseconds past the accounting the JobController wrote next.
		if got[k] < v-1e-6 || got[k] > v+0.5 {
			t.Errorf("%s = %v, the status says %v", k, got[k], v)
		}
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestGoodputOnTheRunsClock: the run, measured on its own clock. The example trainer (two ranks,
// one-second epochs, a checkpoint every 6) while the test SIGKILLs rank 1's trainer twice, just after rank 0
// prints epochs at 36% and 74% of the run (25 and 52 of 70): the first restart is in place (the pods are
// kept), the second recreates the gang (the test sets failurePolicy.restartStrategy Recreate between them).
// The test reads rank 0's log every 100 ms (the process node writes it as the trainer prints) and keeps,
// on its own clock, when each attempt printed its first epoch and each checkpoint, and when the workers'
// pods first all ran. From that timeline: scheduling until the pods run, startup until the first epoch,
// restart from each kill to the next attempt's first epoch, lost work from the checkpoint resumed from to
// the kill, productive the rest. The status must hold the goodput to 2 points of that and each category
// to 1 s (beyond the test's own lag in seeing its boundaries), the operator's goodput counters must never
// decrease, and its series must read what the status says.
//
// make test runs 30 epochs (kills after epochs 11 and 22); make test-goodput runs the 70
// (GOODPUT_EPOCHS).
func TestGoodputOnTheRunsClock(t *testing.T) {
	// Not parallel: it holds the status to 1 s of its own clock, which the other long tests' load (6 at once on 2
	// cores) pushed 3 s apart in one CI run; alone, 0.2 s.
	epochs := 30
	if v, err := strconv.Atoi(os.Getenv("GOODPUT_EPOCHS")); err == nil && v >= 20 {
		epochs = v
	}
	kills := []int{int(math.Round(float64(epochs) * 25 / 70)), int(math.Round(float64(epochs) * 52 / 70))}
	ns, name := newNamespace(t), "goodput-clock"
	tj := trainerJob(ns, name, 2, int32(epochs), "--epoch-delay=1s").BackoffLimit(4, mlv1.RestartGang).With(withPVCCheckpoints(3))
	tj = tj.With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint.Frequency = ptr.To[int32](6)
		tj.Spec.FailurePolicy.MaxAvoidedNodes = ptr.To[int32](0) // the kills are the test's, not the nodes'
	})
	create(t, claim(ns), tj.Obj())
	c := &runClock{t: t, ns: ns, name: name, first: map[int]time.Time{}, lag: map[time.Time]time.Duration{}}
	counters := &counterWatch{t: t, ns: ns, name: name}
	c.follow(func(attempt, epoch int) {
		counters.look()
		switch {
		case len(c.kills) == 0 && attempt == 0 && epoch >= kills[0]:
			c.kill()
		case len(c.kills) == 1 && attempt == 1 && !c.recreate:
			patchRestartStrategy(t, ns, name, mlv1.RestartRecreate) // the next restart recreates the gang
			c.recreate = true
		case len(c.kills) == 1 && attempt == 1 && epoch >= kills[1]:
			c.kill()
		}
	})
	got := getTJ(t, ns, name)
	g := got.Status.Goodput
	if got.Status.State != mlv1.StateCompleted || g == nil || len(c.kills) != 2 {
		t.Fatalf("state %s (%s), %d kills, goodput %+v", got.Status.State, got.Status.FailureReason, len(c.kills), g)
	}
	counters.look()
	if c.uids[1][0] != c.uids[0][0] || c.uids[1][1] != c.uids[0][1] || c.uids[2][0] == c.uids[1][0] {
		t.Errorf("the first restart is to keep the pods and the second to recreate them; the pods' UIDs by attempt: %v", c.uids)
	}
	truth, slack := c.truth(got)
	status := statusShares(g)
	total := g.AccountedSeconds()
	truthPercent := truth[mlv1.GoodputProductive] / total * 100
	statusPercent := g.ProductiveSeconds / total * 100
	t.Logf("%d epochs, kills after epochs %v (a restart in place, then a recreate), %.1f s accounted; goodput: the run's clock %.1f%%, "+
		"the status %.1f%% (%s)", epochs, kills, total, truthPercent, statusPercent, g.Percent)
	t.Logf("  %-10s %14s %9s %9s", "category", "truth (+-lag)", "status", "apart")
	for _, cat := range categories {
		off := math.Max(0, math.Abs(truth[cat]-status[cat])-slack[cat])
		t.Logf("  %-10s %7.2f s +-%.2f %7.2f s %7.2f s", cat, truth[cat], slack[cat], status[cat], truth[cat]-status[cat])
		if off > 1 {
			t.Errorf("%s: the run's clock %.2f s (+-%.2f s), the status %.2f s: %.2f s apart beyond the test's lag, more than 1 s",
				cat, truth[cat], slack[cat], status[cat], off)
		}
	}
	if off := math.Abs(truthPercent-statusPercent) - slack[mlv1.GoodputProductive]/total*100; off > 2 {
		t.Errorf("goodput: the run's clock %.1f%%, the status %.1f%%: %.1f points apart beyond the lag, more than 2",
			truthPercent, statusPercent, off)
	}
	if g.LostWorkEstimate != nil || g.UnknownSeconds != 0 {
		t.Errorf("estimate left %+v, unknown %.2f s: want neither", g.LostWorkEstimate, g.UnknownSeconds)
	}
	counters.check()
	assertGoodputSeries(t, got)
}

// runClock keeps the timeline of a run on the test's own clock, from rank 0's log (every attempt's
// pod's, as the process node writes it) and the pods' states: nothing of the operator's.
type runClock struct {
	t        *testing.T
	ns, name string
	// running is when every worker's container first ran; first when each attempt printed its first epoch
	// (an attempt is known by the resume lines printed before it).
	running time.Time
	first   map[int]time.Time
	// checkpoints are when rank 0 printed a checkpoint, kills when the test killed rank 1's trainer.
	checkpoints, kills []time.Time
	// uids are the pods' UIDs by attempt and rank, read at each attempt's first epoch.
	uids     map[int]map[int]string
	lag      map[time.Time]time.Duration
	recreate bool
}

var (
	epochLine  = regexp.MustCompile(`(?m)^epoch (\d+)/\d+ loss=`)
	resumeLine = regexp.MustCompile(`(?m)^resuming from `)
	ckptLine   = regexp.MustCompile(`(?m)^checkpoint \S+checkpoint-epoch-\d+\s*$`)
)

// follow reads rank 0's logs every 100 ms until the job is over; act is told the attempt (the resume lines
// printed) and rank 0's last epoch printed.
func (c *runClock) follow(act func(attempt, epoch int)) {
	c.uids = map[int]map[int]string{}
	var before, last time.Time
	epochsSeen, ckptsSeen, attempt, baseline := 0, 0, 0, 0
	deadline := time.Now().Add(15 * time.Minute)
	for time.Now().Before(deadline) {
		now := time.Now()
		if !before.IsZero() {
			c.lag[last] = max(last.Sub(before), now.Sub(last)-poll)
		}
		before, last = last, now
		logs := node.AllLogs(stack.DataRoot, c.ns, c.name+"-worker-0-*", names.ContainerName)
		epochs := epochLine.FindAllStringSubmatch(logs, -1)
		if r := len(resumeLine.FindAllString(logs, -1)); r > attempt {
			attempt, baseline = r, epochsSeen // the epochs printed before this look are the older attempts'
		}
		if _, ok := c.first[attempt]; !ok && len(epochs) > baseline {
			c.first[attempt] = now
			c.uids[attempt] = map[int]string{}
			for r, p := range workerPods(c.t, c.ns, c.name) {
				c.uids[attempt][r] = string(p.UID)
			}
		}
		epochsSeen = len(epochs)
		if n := len(ckptLine.FindAllString(logs, -1)); n > ckptsSeen {
			c.checkpoints, ckptsSeen = append(c.checkpoints, now), n
		}
		if c.running.IsZero() && allRunning(c.t, c.ns, c.name, 2) {
			c.running = now
		}
		tj := getTJ(c.t, c.ns, c.name)
		if tj.Status.State == mlv1.StateCompleted || tj.Status.State == mlv1.StateFailed {
			return
		}
		if _, ok := c.first[attempt]; ok && len(epochs) > 0 {
			e, _ := strconv.Atoi(epochs[len(epochs)-1][1])
			if p, err := node.LogPath(stack.DataRoot, c.ns, c.name+"-worker-0-*", names.ContainerName); err == nil {
				if data, err := os.ReadFile(p); err == nil { // the newest pod's log: the current attempt's last epoch
					if m := epochLine.FindAllStringSubmatch(string(data), -1); len(m) > 0 {
						e, _ = strconv.Atoi(m[len(m)-1][1])
					}
				}
			}
			act(attempt, e)
		}
		time.Sleep(poll)
	}
	c.t.Fatalf("the job did not end in 15 minutes")
}

// allRunning reports whether every one of the job's workers' containers runs now.
func allRunning(t *testing.T, ns, name string, workers int) bool {
	n := 0
	for _, p := range workerPods(t, ns, name) {
		if len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil {
			n++
		}
	}
	return n == workers
}

// kill SIGKILLs rank 1's trainer (under its supervisor, which holds the exit).
func (c *runClock) kill() {
	pid := supervised(c.t, runningPIDs(c.t, c.ns, c.name, 2)[1])
	c.kills = append(c.kills, time.Now())
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		c.t.Fatalf("killing rank 1's trainer (pid %d): %v", pid, err)
	}
}

// truth returns each category's seconds on the run's clock, and how far each may be off (the lag of the
// looks that saw its boundaries).
func (c *runClock) truth(tj *mlv1.TrainingJob) (truth, slack map[string]float64) {
	truth, slack = map[string]float64{}, map[string]float64{}
	span := func(category string, from, to time.Time) {
		truth[category] += to.Sub(from).Seconds()
		slack[category] += (c.lag[from] + c.lag[to]).Seconds()
	}
	t0, end := tj.CreationTimestamp.Time, tj.Status.CompletionTime.Time
	if a := tj.Status.Goodput.AccountedTime; a != nil && a.After(end) {
		end = a.Time // the run's wall time ends where the status accounted it: the end of the completion's second
	}
	span(mlv1.BadputScheduling, t0, c.running)
	span(mlv1.BadputStartup, c.running, c.first[0])
	edges := []time.Time{c.first[0]}
	for i, kill := range c.kills {
		span(mlv1.BadputRestart, kill, c.first[i+1])
		kept := c.first[i]
		if ck := lastBefore(c.checkpoints, kill); ck.After(kept) {
			kept = ck
		}
		span(mlv1.BadputLostWork, kept, kill)
		edges = append(edges, kept, c.first[i+1])
	}
	for _, e := range edges {
		slack[mlv1.GoodputProductive] += c.lag[e].Seconds()
	}
	bad := 0.0
	for _, v := range truth {
		bad += v
	}
	truth[mlv1.GoodputProductive] = end.Sub(t0).Seconds() - bad
	return truth, slack
}

// patchRestartStrategy sets the job's failurePolicy.restartStrategy.
func patchRestartStrategy(t *testing.T, ns, name string, s mlv1.RestartStrategy) {
	t.Helper()
	tj := &mlv1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	patch := fmt.Sprintf(`{"spec":{"failurePolicy":{"restartStrategy":%q}}}`, s)
	if err := stack.Client.Patch(ctx, tj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// counterWatch reads the operator's goodput counters for a job (its registry, as /metrics serves them)
// each time it looks, and finds any that went back.
type counterWatch struct {
	t        *testing.T
	ns, name string
	last     map[string]float64
	back     []string
}

func (w *counterWatch) look() {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		w.t.Fatal(err)
	}
	if w.last == nil {
		w.last = map[string]float64{}
	}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "trainingjob_goodput") && !strings.HasPrefix(f.GetName(), "trainingjob_badput") {
			continue
		}
		for _, m := range f.Metric {
			if m.Counter == nil || label(m, metrics.LabelNamespace) != w.ns || label(m, metrics.LabelTrainingJob) != w.name {
				continue
			}
			key := f.GetName()
			if c := label(m, "category"); c != "" {
				key += "{" + c + "}"
			}
			v := m.Counter.GetValue()
			if prev, ok := w.last[key]; ok && v < prev-1e-9 {
				w.back = append(w.back, fmt.Sprintf("%s %.3f -> %.3f", key, prev, v))
			}
			w.last[key] = v
		}
	}
}

func (w *counterWatch) check() {
	w.t.Helper()
	if len(w.back) > 0 {
		w.t.Errorf("goodput counters went back (rate() reads that as a reset): %s", strings.Join(w.back, "; "))
	}
	if len(w.last) == 0 {
		w.t.Errorf("no goodput counter of the job was read")
	}
}
