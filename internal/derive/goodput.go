package derive

import (
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/builders"
)

// Goodput accounting (docs/goodput.md). The job's wall time since its creation is split into productive
// training and badput categories. Each accounting step gives the time since status.goodput.accountedTime
// to the category the job is in now (GoodputCategory): the StatusController accounts on every change of
// state or attempt, at every scrape of a running job and at least once per goodput interval, so a change
// of category is seen within milliseconds (a watch event) or one scrape. Three kinds of time are known
// only afterwards and moved out of Productive when they are: the time since rank 0's last progress when
// the run turns out to hang (Hang); the training since the newest checkpoint when an attempt ends and the
// next resumes from that checkpoint (LostWork); the seconds the trainer reports it spent saving
// checkpoints (Checkpoint). What is accumulated lives in the status, so an operator restart loses nothing:
// the time it was down goes to the category the job is in when it is back.

// GoodputCategory is what a job's time goes to now, "" once it is over, and since when where the status
// tells: the Running condition's last change for the phases it starts or ends (a new attempt, all
// workers running), rank 0's last progress for a hang; else the zero time.
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

// ProgressedInAttempt: rank 0 has advanced since the current attempt's workers all ran.
func ProgressedInAttempt(st *mlv1.TrainingJobStatus) bool {
	running := meta.FindStatusCondition(st.Conditions, mlv1.ConditionRunning)
	return st.LastProgressTime != nil && (running == nil || !st.LastProgressTime.Before(&running.LastTransitionTime))
}

// AccountGoodput is the job's goodput accounted up to now (or up to its end, once it is over), from the
// status's accounting. checkpointSeconds is the trainer's own count of seconds spent saving checkpoints in
// this attempt when it reports one (training_checkpoint_seconds_total), else nil. It is pure.
// A job that finished before the operator accounted it has none: nil.
func AccountGoodput(tj *mlv1.TrainingJob, checkpointSeconds *float64, now time.Time) *mlv1.GoodputStatus {
	category, since := GoodputCategory(tj)
	g := startAccounting(tj, category, now)
	if g == nil {
		return nil
	}
	if category == "" {
		if end := endTime(tj); end != nil && end.Before(now) {
			now = *end
		}
	}
	a := accounting{g: g, gpus: float64(g.GPUs)} // held since the last step
	from := g.AccountedTime.Time
	switch {
	case since.After(from) && since.Before(now): // the change is older than this step: split at it
		a.add(g.Category, seconds(since.Sub(from)))
		a.add(category, seconds(now.Sub(since)))
	case now.After(from):
		a.add(g.Category, seconds(now.Sub(from))) // the category of the time since the last step
	}
	if now.After(from) {
		g.AccountedTime = &metav1.MicroTime{Time: now}
	}
	if category == mlv1.BadputHang && g.Category != category && since.Before(from) {
		a.move(g.Category, category, seconds(now.Sub(since))) // known only now: the hang began at the last progress
	}
	if tj.Status.Attempt != g.Attempt {
		a.endAttempt(tj, now)
	}
	if checkpointSeconds != nil {
		a.checkpointSaves(*checkpointSeconds)
	}
	boundSinceCheckpoint(tj, g, now, category)
	g.Category, g.GPUs = category, activeWorkers(tj)*builders.GPUsPerWorker(tj)
	g.Percent = goodputPercent(g)
	return g
}

// endAttempt accounts the end of the attempt the accounting last saw: from the failing rank's exit to now
// the run did not train (restart overhead), and its training since the newest checkpoint is lost: the
// next attempt does it again.
func (a accounting) endAttempt(tj *mlv1.TrainingJob, now time.Time) {
	g := a.g
	if t := tj.Status.LastFailureTime; t != nil && g.Category != "" {
		a.move(g.Category, mlv1.BadputRestart, seconds(now.Sub(midSecond(t.Time))))
	}
	a.move(mlv1.GoodputProductive, mlv1.BadputLostWork, g.SinceCheckpointSeconds)
	g.SinceCheckpointSeconds, g.CheckpointReportedSeconds, g.Attempt = 0, 0, tj.Status.Attempt
}

// checkpointSaves moves what the trainer newly reports having spent saving checkpoints (reported: its
// count for this attempt) from productive to checkpoint.
func (a accounting) checkpointSaves(reported float64) {
	d := reported - a.g.CheckpointReportedSeconds
	if reported < a.g.CheckpointReportedSeconds {
		d = reported // the trainer restarted its count
	}
	a.move(mlv1.GoodputProductive, mlv1.BadputCheckpoint, d)
	a.g.CheckpointReportedSeconds = reported
}

// startAccounting is a copy of the status's accounting, or a new one: from the job's creation when it
// has not run yet, else (a job the operator sees only now: the operator was upgraded) from now.
func startAccounting(tj *mlv1.TrainingJob, category string, now time.Time) *mlv1.GoodputStatus {
	if g := tj.Status.Goodput; g != nil && g.AccountedTime != nil {
		return g.DeepCopy()
	}
	g := &mlv1.GoodputStatus{AccountedTime: &metav1.MicroTime{Time: tj.CreationTimestamp.Time}, Category: category, Attempt: tj.Status.Attempt,
		GPUs: activeWorkers(tj) * builders.GPUsPerWorker(tj)}
	switch {
	case category == "":
		return nil
	case tj.Status.StartTime != nil || tj.Status.Attempt > 0:
		g.AccountedTime = &metav1.MicroTime{Time: now}
	}
	return g
}

// endTime is when a finished job ended: its completion time, else the Completed or Failed condition's.
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
// written (the productive time after it cannot be longer), and at 0 once the run is over: its result is
// kept whatever came after the last checkpoint.
func boundSinceCheckpoint(tj *mlv1.TrainingJob, g *mlv1.GoodputStatus, now time.Time, category string) {
	if category == "" {
		g.SinceCheckpointSeconds = 0
		return
	}
	if c := tj.Status.Checkpoint; c != nil && c.LastTime != nil {
		g.SinceCheckpointSeconds = math.Max(0, math.Min(g.SinceCheckpointSeconds, seconds(now.Sub(midSecond(c.LastTime.Time)))))
	}
}

// midSecond is a time the status keeps to the second (cut down to it) taken at the middle of that second:
// the estimate without bias, where the goodput adds up many such times.
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
		a.g.ProductiveGPUSeconds = millis(a.g.ProductiveGPUSeconds + d*a.gpus)
		a.g.SinceCheckpointSeconds = millis(a.g.SinceCheckpointSeconds + d)
	}
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
	if from == mlv1.GoodputProductive {
		a.g.ProductiveGPUSeconds = millis(math.Max(0, a.g.ProductiveGPUSeconds-d*a.gpus))
		a.g.SinceCheckpointSeconds = millis(math.Max(0, a.g.SinceCheckpointSeconds-d))
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
	}
	return &a.g.ProductiveSeconds
}

// goodputPercent is productive time over all accounted time, rounded down: "82%"; "" before any time.
func goodputPercent(g *mlv1.GoodputStatus) string {
	total := g.AccountedSeconds()
	if total <= 0 {
		return ""
	}
	return fmt.Sprintf("%d%%", int(math.Floor(g.ProductiveSeconds/total*100+1e-9)))
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// millis keeps seconds to the millisecond, so that the status does not carry float noise.
func millis(s float64) float64 { return math.Round(s*1000) / 1000 }
