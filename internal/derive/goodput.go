package derive

import (
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// Goodput accounting (docs/goodput.md). The job's wall time since its creation is split into productive
// training and badput categories. Each accounting step gives the time since status.goodput.accountedTime
// to the category the job is in now (GoodputCategory): the StatusController accounts on every change of
// state or attempt and at every scrape of a running job, so a change of category is seen within
// milliseconds (a watch event) or one scrape; it writes the accounting when the category changes and with
// its other writes, and readers add the time since (GoodputAt). Three kinds of time are known
// only afterwards and moved out of Productive when they are: the time since rank 0's last progress when
// the run turns out to hang (Hang); the training since the newest checkpoint when an attempt ends and the
// next resumes from that checkpoint (LostWork); the seconds the trainer reports it spent saving
// checkpoints (Checkpoint). Time the workers run with no progress source is Unknown until the attempt
// first progresses, when it is known to have been startup. Lost work is corrected once the checkpoint the
// next attempt resumed from is known. What is accumulated lives in the status, so an operator restart
// loses nothing: the time it was down goes to the category the job is in when it is back.

// GoodputCategory returns what a job's time goes to now, "" once it is over, and since when where the status
// tells: the Running condition's last change for the phases it starts or ends (a new attempt, all
// workers running), rank 0's last progress for a hang; else the zero time. Workers that run with no
// progress source (ProgressUnknown), or whose progress is not read (monitoring off), and have not
// progressed in the attempt are Unknown.
func GoodputCategory(tj *mlv1.TrainingJob) (category string, since time.Time) {
	st := &tj.Status
	retry := st.Attempt > 0
	var runningSince time.Time
	if c := meta.FindStatusCondition(st.Conditions, mlv1.ConditionRunning); c != nil {
		runningSince = c.LastTransitionTime.Time
	}
	switch st.State {
	case mlv1.StateCompleted, mlv1.StateFailed:
		return "", time.Time{}
	case mlv1.StateSuspended:
		return mlv1.BadputQueued, time.Time{}
	case mlv1.StatePending, "": // "": not seen by the JobController yet
		if builders.QueueName(tj) != "" {
			return mlv1.BadputQueued, time.Time{}
		}
		return pick(retry, mlv1.BadputRestart, mlv1.BadputScheduling), time.Time{}
	case mlv1.StateInitializing:
		return pick(retry, mlv1.BadputRestart, mlv1.BadputScheduling), runningSince
	}
	// Running.
	if meta.IsStatusConditionTrue(st.Conditions, mlv1.ConditionStalled) && st.LastProgressTime != nil {
		return mlv1.BadputHang, st.LastProgressTime.Time
	}
	if !ProgressedInAttempt(st) {
		if ProgressUnknown(st) || !tj.MonitoringEnabled() { // with monitoring off, nothing tells training from startup
			return mlv1.GoodputUnknown, runningSince
		}
		return pick(retry, mlv1.BadputRestart, mlv1.BadputStartup), runningSince
	}
	return mlv1.GoodputProductive, runningSince
}

func pick(cond bool, a, b string) string {
	if cond {
		return a
	}
	return b
}

// ProgressedInAttempt reports whether rank 0 has advanced since the current attempt's workers all ran.
func ProgressedInAttempt(st *mlv1.TrainingJobStatus) bool {
	running := meta.FindStatusCondition(st.Conditions, mlv1.ConditionRunning)
	return st.LastProgressTime != nil && (running == nil || !st.LastProgressTime.Before(&running.LastTransitionTime))
}

// AccountGoodput returns the job's goodput accounted up to now (or up to its end, once it is over), from the
// status's accounting. checkpointSeconds is the trainer's own count of seconds spent saving checkpoints in
// this attempt when it reports one (training_checkpoint_seconds_total), else nil. It is pure, and
// accounting its own result again at the same now changes nothing.
// A job that finished before the operator accounted it has none: nil.
func AccountGoodput(tj *mlv1.TrainingJob, checkpointSeconds *float64, now time.Time) *mlv1.GoodputStatus {
	category, since := GoodputCategory(tj)
	g := startAccounting(tj, category, now)
	if g == nil {
		return nil
	}
	if category == "" {
		// The end is kept to the second: the end of that second, so that no reader of the status before
		// the end was written (the metrics, at each scrape) counted the run past it.
		if end := endTime(tj); end != nil && endOfSecond(*end).Before(now) {
			now = endOfSecond(*end)
		}
	}
	a := accounting{g: g, gpus: float64(g.GPUs)} // held since the last step
	from := g.AccountedTime.Time
	since = firstProgress(tj, g, category, since)
	a.elapse(tj, category, since, now)
	if category == mlv1.BadputHang && g.Category != category && since.Before(from) {
		a.move(g.Category, category, seconds(now.Sub(since))) // known only now: the hang began at the last progress
	}
	a.settleUnknown(tj, category, from, now)
	if tj.Status.Attempt != g.Attempt {
		a.endAttempt(tj, now)
	}
	a.correctLostWork(tj)
	if checkpointSeconds != nil {
		a.checkpointSaves(*checkpointSeconds)
	}
	boundSinceCheckpoint(tj, g, now, category)
	g.Category, g.GPUs = category, activeWorkers(tj)*tj.GPUsPerWorker()
	g.Percent = goodputPercent(g)
	return g
}

// GoodputAt returns the job's goodput as of now, for those who read it (the metrics at each scrape, the
// kubectl plugin): the status holds the accounting as of its accountedTime and its category, written when
// the category changes and with the status's other writes, never on a timer; the time since goes to that
// category here. tj is defaulted, as the manager's cache and the plugin hold it, and is not changed. The
// status's own goodput (nil included) is returned where there is nothing to add to (no accountedTime).
func GoodputAt(tj *mlv1.TrainingJob, now time.Time) *mlv1.GoodputStatus {
	g := tj.Status.Goodput
	if g == nil || g.AccountedTime == nil {
		return g
	}
	if live := AccountGoodput(tj, nil, now); live != nil {
		return live
	}
	return g
}

// GoodputCounters are the values of a job's goodput counters (the operator's metrics), each a figure that
// never decreases however the accounting moves time between categories.
type GoodputCounters struct {
	// Goodput is every second counted productive as it passed, also what was later reclassified
	// (productiveSeconds plus reclassifiedSeconds).
	Goodput float64
	// Reclassified is the part of Goodput found not productive since, once known: Goodput less it is the
	// productive time.
	Reclassified float64
	// Badput is the badput by category, lost work once known.
	Badput mlv1.BadputSeconds
	// GPUSeconds is GPU time held by the running workers.
	GPUSeconds float64
}

// Counters returns g's counters. The accounting only adds to each of the figures they are made of, but
// one: the lost work of the last restart is an estimate until the next attempt's checkpoint tells the real
// one, which may be less (lostWorkEstimate). That estimate is counted neither as lost work nor as
// reclassified until it is known, so that no counter goes back when it is corrected; once the run is over
// (no category), what is left of it is known.
func Counters(g *mlv1.GoodputStatus) GoodputCounters {
	pending := 0.0
	if e := g.LostWorkEstimate; e != nil && g.Category != "" {
		pending = e.Seconds
	}
	b := g.BadputSeconds
	b.LostWork = math.Max(0, b.LostWork-pending)
	return GoodputCounters{Goodput: g.ProductiveSeconds + g.ReclassifiedSeconds, Reclassified: math.Max(0, g.ReclassifiedSeconds-pending),
		Badput: b, GPUSeconds: g.GPUSeconds}
}

// NewCheckpointBound reports whether next, a later accounting of the same attempt than prev, had its
// training since the newest checkpoint cut by a checkpoint prev did not know: the cut is to be written
// then, as a cut made later is looser by the time that passed (a checkpoint learned while the job did not
// train would let that figure, and the secured goodput, move back).
func NewCheckpointBound(prev, next *mlv1.GoodputStatus) bool {
	if prev == nil || next == nil || prev.Attempt != next.Attempt {
		return false
	}
	unbound := prev.SinceCheckpointSeconds + next.AttemptProductiveSeconds - prev.AttemptProductiveSeconds
	return next.SinceCheckpointSeconds < unbound-boundSlack
}

// boundSlack is less than a cut to the newest checkpoint can be, more than the rounding of an accounting.
const boundSlack = 0.01

// elapse gives the time since the last step to the category it was in, split at since when the change to
// category is older than this step, and moves the accounted time to now. The training since the newest
// checkpoint is bound at each end (boundToCheckpoint), so that the result does not depend on how often
// the accounting was written.
func (a accounting) elapse(tj *mlv1.TrainingJob, category string, since, now time.Time) {
	g := a.g
	from := g.AccountedTime.Time
	switch {
	case since.After(from) && since.Before(now): // the change is older than this step: split at it
		a.add(g.Category, seconds(since.Sub(from)))
		boundToCheckpoint(tj, g, since)
		a.add(category, seconds(now.Sub(since)))
		if g.Category == mlv1.GoodputProductive && category != g.Category {
			// Readers of the status (the metrics) counted it productive until now (a hang found since
			// rank 0's last progress): reclassified, so that their goodput counter does not go back.
			g.ReclassifiedSeconds = millis(g.ReclassifiedSeconds + seconds(now.Sub(since)))
		}
	case now.After(from):
		a.add(g.Category, seconds(now.Sub(from))) // the category of the time since the last step
	}
	boundToCheckpoint(tj, g, now)
	if now.After(from) {
		g.AccountedTime = &metav1.MicroTime{Time: now}
	}
}

// settleUnknown settles an attempt's Unknown time: once an attempt whose workers ran with no progress
// source has one (its category leaves Unknown for startup or productive), its time without one is known: it
// was starting up (restarting, for a retry) until rank 0's first progress, and productive after it. from is
// the last step's time: workers that (re)started running since have no Unknown time of their own.
func (a accounting) settleUnknown(tj *mlv1.TrainingJob, category string, from, now time.Time) {
	st := &tj.Status
	running := meta.FindStatusCondition(st.Conditions, mlv1.ConditionRunning)
	startup := pick(st.Attempt > 0, mlv1.BadputRestart, mlv1.BadputStartup)
	if a.g.Category != mlv1.GoodputUnknown || st.Attempt != a.g.Attempt || running == nil || running.LastTransitionTime.After(from) ||
		category != startup && category != mlv1.GoodputProductive {
		return
	}
	ran := seconds(now.Sub(running.LastTransitionTime.Time))
	before := ran // the workers' time before the first progress
	if category == mlv1.GoodputProductive && st.LastProgressTime != nil {
		before = math.Min(ran, math.Max(0, seconds(st.LastProgressTime.Sub(running.LastTransitionTime.Time))))
	}
	a.move(mlv1.GoodputUnknown, startup, before)
	a.move(mlv1.GoodputUnknown, mlv1.GoodputProductive, ran-before)
	if a.g.UnknownSeconds < unknownResidue { // the milliseconds the rounding left: not time of its own
		a.move(mlv1.GoodputUnknown, startup, a.g.UnknownSeconds)
	}
}

// unknownResidue is less Unknown time than the accounting's rounding can leave behind (a few ms): once an
// attempt's Unknown time is settled, that much is noise and goes with it, so that the percent is one
// figure.
const unknownResidue = 0.01

// endAttempt accounts the end of the attempt the accounting last saw: from the failing rank's exit to now
// the run did not train (restart overhead), and its training since the newest checkpoint is lost: the
// next attempt does it again. That estimate is kept (lostWorkEstimate) to be corrected from the
// checkpoint the next attempt resumed from, when the failure's time is known.
func (a accounting) endAttempt(tj *mlv1.TrainingJob, now time.Time) {
	g := a.g
	failure := tj.Status.LastFailureTime
	if failure != nil && g.Category != "" {
		a.move(g.Category, mlv1.BadputRestart, seconds(now.Sub(midSecond(failure.Time))))
	}
	trained := g.AttemptProductiveSeconds
	lost := math.Min(g.SinceCheckpointSeconds, g.ProductiveSeconds)
	a.move(mlv1.GoodputProductive, mlv1.BadputLostWork, lost)
	g.LostWorkEstimate = nil
	if failure != nil && tj.CheckpointEnabled() && trained+lost > 0 {
		g.LostWorkEstimate = &mlv1.LostWorkEstimate{Attempt: tj.Status.Attempt, Seconds: millis(lost),
			MaxSeconds: millis(math.Max(trained, lost))}
	}
	g.SinceCheckpointSeconds, g.CheckpointReportedSeconds, g.AttemptProductiveSeconds, g.Attempt = 0, 0, 0, tj.Status.Attempt
}

// correctLostWork corrects the last restart's estimated lost work once the attempt after it has resumed
// from a checkpoint whose writing time is known (status.checkpoint.resumedFromTime): the training from
// then to the failure was lost, no more than the ended attempt trained. The estimate stays when the
// attempt resumed from nothing or from a checkpoint of unknown time.
func (a accounting) correctLostWork(tj *mlv1.TrainingJob) {
	st, e := &tj.Status, a.g.LostWorkEstimate
	c := st.Checkpoint
	if e == nil || c == nil || c.ResumedAttempt != e.Attempt || st.Attempt != e.Attempt {
		return
	}
	if c.ResumedFrom != "" && c.ResumedFromTime != nil && st.LastFailureTime != nil {
		lost := math.Max(0, seconds(midSecond(st.LastFailureTime.Time).Sub(midSecond(c.ResumedFromTime.Time))))
		a.relose(math.Min(lost, e.MaxSeconds) - e.Seconds)
	}
	a.g.LostWorkEstimate = nil
}

// relose moves d seconds of an ended attempt's training from productive to lost work (d < 0: back), no
// more than the category it comes from holds, its GPU-seconds at the productive time's average.
func (a accounting) relose(d float64) {
	g := a.g
	d = millis(math.Max(-g.BadputSeconds.LostWork, math.Min(d, g.ProductiveSeconds)))
	if d == 0 {
		return
	}
	perSecond := a.gpus
	if g.ProductiveSeconds > 0 {
		perSecond = g.ProductiveGPUSeconds / g.ProductiveSeconds
	}
	g.ProductiveSeconds, g.BadputSeconds.LostWork = millis(g.ProductiveSeconds-d), millis(g.BadputSeconds.LostWork+d)
	g.ReclassifiedSeconds = millis(math.Max(0, g.ReclassifiedSeconds+d))
	g.ProductiveGPUSeconds = millis(math.Max(0, g.ProductiveGPUSeconds-d*perSecond))
}

// checkpointSaves moves what the trainer newly reports having spent saving checkpoints (reported: its
// count for this attempt) from productive to checkpoint.
func (a accounting) checkpointSaves(reported float64) {
	reported = bounded(reported) // the trainer's own figure: anything it printed
	d := reported - a.g.CheckpointReportedSeconds
	if reported < a.g.CheckpointReportedSeconds {
		d = reported // the trainer restarted its count
	}
	a.move(mlv1.GoodputProductive, mlv1.BadputCheckpoint, d)
	a.g.CheckpointReportedSeconds = reported
}

// startAccounting returns a copy of the status's accounting, or a new one: from the job's creation when it
// has not run yet, else (a job the operator sees only now: the operator was upgraded) from now; nil for a
// job that is over without one.
func startAccounting(tj *mlv1.TrainingJob, category string, now time.Time) *mlv1.GoodputStatus {
	if g := tj.Status.Goodput; g != nil && g.AccountedTime != nil {
		return sane(g.DeepCopy())
	}
	g := &mlv1.GoodputStatus{AccountedTime: &metav1.MicroTime{Time: accountingStart(tj)}, Category: category, Attempt: tj.Status.Attempt,
		GPUs: activeWorkers(tj) * tj.GPUsPerWorker()}
	switch {
	case category == "":
		return nil
	case tj.Status.StartTime != nil || tj.Status.Attempt > 0:
		g.AccountedTime = &metav1.MicroTime{Time: now}
	}
	return g
}

// longestDispatch bounds how long before a dispatched copy's creation its accounting may start.
const longestDispatch = 30 * 24 * time.Hour

// accountingStart returns when a job's accounting starts: its creation, or for a copy MultiKueue dispatched
// to this cluster the creation of the manager's job (names.OriginCreatedAnnotation), so the time before the
// copy existed (dispatching, a lost worker cluster and its run) counts, in the category the copy is first
// in (Queued). A time after the creation or more than longestDispatch before it is not taken.
func accountingStart(tj *mlv1.TrainingJob) time.Time {
	created := tj.CreationTimestamp.Time
	if !builders.Dispatched(tj) {
		return created
	}
	at, err := time.Parse(time.RFC3339, tj.Annotations[names.OriginCreatedAnnotation])
	if err != nil || !at.Before(created) || created.Sub(at) > longestDispatch {
		return created
	}
	return at
}

// mostSeconds bounds every figure of an accounting read from the status (some 30 million years of a
// thousand GPUs): whoever may write the status subresource could write anything the schema takes, and a
// value past it would overflow (an infinity cannot be written back as JSON).
const mostSeconds = 1e18

// sane returns g with every figure a finite number from 0 to mostSeconds, and no negative GPU count.
func sane(g *mlv1.GoodputStatus) *mlv1.GoodputStatus {
	b := &g.BadputSeconds
	for _, v := range []*float64{&g.ProductiveSeconds, &g.UnknownSeconds, &g.GPUSeconds, &g.ProductiveGPUSeconds,
		&g.SinceCheckpointSeconds, &g.CheckpointReportedSeconds, &g.AttemptProductiveSeconds, &g.ReclassifiedSeconds, &b.Queued, &b.Scheduling,
		&b.Startup, &b.Restart, &b.LostWork, &b.Hang, &b.Checkpoint} {
		*v = bounded(*v)
	}
	if e := g.LostWorkEstimate; e != nil {
		e.Seconds, e.MaxSeconds = bounded(e.Seconds), bounded(e.MaxSeconds)
	}
	g.GPUs = max(0, g.GPUs)
	return g
}

// bounded returns v within 0 to mostSeconds, 0 for a NaN.
func bounded(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return math.Min(mostSeconds, math.Max(0, v))
}

// endTime returns when a finished job ended: its completion time, else the Completed or Failed condition's;
// nil when neither is known.
func endTime(tj *mlv1.TrainingJob) *time.Time {
	if c := tj.Status.CompletionTime; c != nil {
		return &c.Time
	}
	for _, t := range []string{mlv1.ConditionCompleted, mlv1.ConditionFailed} {
		if c := meta.FindStatusCondition(tj.Status.Conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			return &c.LastTransitionTime.Time
		}
	}
	return nil
}

func activeWorkers(tj *mlv1.TrainingJob) int32 {
	switch tj.Status.State {
	case mlv1.StateCompleted, mlv1.StateFailed, mlv1.StateSuspended:
		return 0
	}
	return tj.Status.Workers.Active
}

// boundSinceCheckpoint keeps sinceCheckpointSeconds at most the time since the newest checkpoint was
// written (boundToCheckpoint), and at 0 once the run is over: its result is kept whatever came after the
// last checkpoint.
func boundSinceCheckpoint(tj *mlv1.TrainingJob, g *mlv1.GoodputStatus, now time.Time, category string) {
	if category == "" {
		g.SinceCheckpointSeconds = 0
		return
	}
	boundToCheckpoint(tj, g, now)
}

// boundToCheckpoint keeps sinceCheckpointSeconds at most the time since the newest checkpoint was
// written: the productive time after it cannot be longer. It is bound before an ended attempt's lost work
// is taken from it, as well as after, so that the result does not depend on how often it was written.
func boundToCheckpoint(tj *mlv1.TrainingJob, g *mlv1.GoodputStatus, now time.Time) {
	if c := tj.Status.Checkpoint; c != nil && c.LastTime != nil {
		g.SinceCheckpointSeconds = math.Max(0, math.Min(g.SinceCheckpointSeconds, seconds(now.Sub(midSecond(c.LastTime.Time)))))
	}
}

// firstProgress returns where time turned productive when the accounting last stood in the attempt's
// startup (or restart) and it is productive now: rank 0's first progress, which the status keeps to the
// second (lastProgressTime, cut down), so the end of that second: the progress was read before it, so no
// reader of the status before it was written (the metrics, at each scrape) counted startup past it, and a
// startup counter never goes back. The JobController accounts the first progress as its write arrives
// (milliseconds), before that end: the split is then now. Not when the workers began to run, which is
// since, returned in every other case (an accounting from before the workers ran: an operator that was
// down counts their startup as productive, docs/goodput.md).
func firstProgress(tj *mlv1.TrainingJob, g *mlv1.GoodputStatus, category string, since time.Time) time.Time {
	st := &tj.Status
	startup := g.Category == mlv1.BadputStartup || g.Category == mlv1.BadputRestart
	if category != mlv1.GoodputProductive || !startup || g.Attempt != st.Attempt || st.LastProgressTime == nil {
		return since
	}
	if p := endOfSecond(st.LastProgressTime.Time); p.After(since) {
		return p
	}
	return since
}

// endOfSecond returns the end of the second a time the status keeps to the second (cut down to it) fell in;
// a time with a fraction of a second is returned as it is.
func endOfSecond(t time.Time) time.Time {
	if t.Truncate(time.Second).Equal(t) {
		return t.Add(time.Second)
	}
	return t
}

// midSecond returns a time the status keeps to the second (cut down to it) taken at the middle of that
// second: the estimate without bias, where the goodput adds up many such times. A time with a fraction of a
// second is returned as it is.
func midSecond(t time.Time) time.Time {
	if t.Truncate(time.Second).Equal(t) {
		return t.Add(500 * time.Millisecond)
	}
	return t
}

// accounting adds and moves seconds between categories, GPU-seconds with them.
type accounting struct {
	g    *mlv1.GoodputStatus
	gpus float64
}

func (a accounting) add(category string, d float64) {
	if category == "" || d <= 0 {
		return
	}
	*a.slot(category) = millis(*a.slot(category) + d)
	a.g.GPUSeconds = millis(a.g.GPUSeconds + d*a.gpus)
	if category == mlv1.GoodputProductive {
		a.attemptTrained(d)
	}
}

// attemptTrained counts d seconds of the current attempt's training (d < 0: taken back) in its
// GPU-seconds, what a restart now would lose, and the attempt's training.
func (a accounting) attemptTrained(d float64) {
	g := a.g
	g.ProductiveGPUSeconds = millis(math.Max(0, g.ProductiveGPUSeconds+d*a.gpus))
	g.SinceCheckpointSeconds = millis(math.Max(0, g.SinceCheckpointSeconds+d))
	g.AttemptProductiveSeconds = millis(math.Max(0, g.AttemptProductiveSeconds+d))
}

// move takes up to d seconds from one category to another (no more than it holds).
func (a accounting) move(from, to string, d float64) {
	if from == "" || to == "" || from == to || d <= 0 {
		return
	}
	src := a.slot(from)
	d = math.Min(d, *src)
	*src = millis(*src - d)
	*a.slot(to) = millis(*a.slot(to) + d)
	switch {
	case from == mlv1.GoodputProductive:
		a.attemptTrained(-d)
		a.g.ReclassifiedSeconds = millis(a.g.ReclassifiedSeconds + d)
	case to == mlv1.GoodputProductive:
		a.attemptTrained(d)
	}
}

func (a accounting) slot(category string) *float64 {
	b := &a.g.BadputSeconds
	switch category {
	case mlv1.BadputQueued:
		return &b.Queued
	case mlv1.BadputScheduling:
		return &b.Scheduling
	case mlv1.BadputStartup:
		return &b.Startup
	case mlv1.BadputRestart:
		return &b.Restart
	case mlv1.BadputLostWork:
		return &b.LostWork
	case mlv1.BadputHang:
		return &b.Hang
	case mlv1.BadputCheckpoint:
		return &b.Checkpoint
	case mlv1.GoodputUnknown:
		return &a.g.UnknownSeconds
	}
	return &a.g.ProductiveSeconds
}

// goodputPercent returns productive time over all accounted time, rounded down: "82%"; "" before any time.
// With time of unknown productivity: "unknown" when none is known productive, else the range from
// counting it as badput to counting it as productive, "80%-95%" (one figure when both round alike).
func goodputPercent(g *mlv1.GoodputStatus) string {
	total := g.AccountedSeconds()
	if total <= 0 {
		return ""
	}
	low := floorPercent(g.ProductiveSeconds, total)
	switch {
	case g.UnknownSeconds <= 0 && g.Category != mlv1.GoodputUnknown: // in Unknown now: unknown from its first instant
		return fmt.Sprintf("%d%%", low)
	case g.ProductiveSeconds <= 0:
		return "unknown"
	}
	if high := floorPercent(g.ProductiveSeconds+g.UnknownSeconds, total); high != low {
		return fmt.Sprintf("%d%%-%d%%", low, high)
	}
	return fmt.Sprintf("%d%%", low)
}

func floorPercent(part, total float64) int { return int(math.Floor(part/total*100 + 1e-9)) }

func seconds(d time.Duration) float64 { return d.Seconds() }

// millis returns seconds rounded to the millisecond, so that the status does not carry float noise.
func millis(s float64) float64 { return math.Round(s*1000) / 1000 }
