package derive

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// timeline is a job's life as the controllers would write its status: each step at a second after the
// job's creation.
type timeline []step

type step struct {
	at     float64
	change func(st *mlv1.TrainingJobStatus, at metav1.Time)
	// checkpointSeconds is what the trainer reports having spent saving checkpoints, when it does.
	checkpointSeconds *float64
	// down: the operator is not running: the change happens, nothing is accounted until the next step.
	down bool
}

func state(s mlv1.State, attempt int32) func(*mlv1.TrainingJobStatus, metav1.Time) {
	return func(st *mlv1.TrainingJobStatus, at metav1.Time) {
		st.State, st.Attempt = s, attempt
		running := s == mlv1.StateRunning
		if c := meta.FindStatusCondition(st.Conditions, mlv1.ConditionRunning); c == nil || (c.Status == metav1.ConditionTrue) != running {
			st.Conditions = setCondition(st.Conditions, mlv1.ConditionRunning, running, at)
		}
		if s == mlv1.StateCompleted || s == mlv1.StateFailed {
			st.CompletionTime = &at
		}
		st.Workers.Active = 4
	}
}

func progress(st *mlv1.TrainingJobStatus, at metav1.Time) { st.LastProgressTime = &at }

func stalled(st *mlv1.TrainingJobStatus, at metav1.Time) {
	st.Conditions = setCondition(st.Conditions, mlv1.ConditionStalled, true, at)
}

func unstalled(st *mlv1.TrainingJobStatus, at metav1.Time) {
	st.Conditions = setCondition(st.Conditions, mlv1.ConditionStalled, false, at)
}

func checkpointed(st *mlv1.TrainingJobStatus, at metav1.Time) {
	st.Checkpoint = &mlv1.CheckpointStatus{Latest: at.String(), LastTime: &metav1.MicroTime{Time: at.Time}}
}

func setCondition(cs []metav1.Condition, t string, v bool, at metav1.Time) []metav1.Condition {
	s := metav1.ConditionFalse
	if v {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&cs, metav1.Condition{Type: t, Status: s, Reason: "Test", LastTransitionTime: at})
	return cs
}

// play runs the timeline, accounting at each step and every tick seconds between them (0: only at the
// steps, as after an operator that was down), and returns the job's goodput at its end.
func (tl timeline) play(tj *mlv1.TrainingJob, tick float64) *mlv1.GoodputStatus {
	return tl.playWith(tj, tick, nil, writeAlways)
}

// writing says which accountings playWith puts into the status.
type writing int

const (
	writeAlways writing = iota
	// writeEveryOther: every other accounting in the same category and attempt is not written.
	writeEveryOther
	// writeOnChange: as the JobController does for a job whose state does not change: only an accounting
	// that changes the category or the attempt or is cut by a newer checkpoint, and the last, are written.
	writeOnChange
)

// playWith plays the timeline; after each accounting is stored, again (when not nil) is given the
// accounting of the stored status at the same time. w says which accountings are written (the status
// keeps the one before the others).
func (tl timeline) playWith(tj *mlv1.TrainingJob, tick float64, again func(stored, next *mlv1.GoodputStatus),
	w writing) *mlv1.GoodputStatus {
	t0 := tj.CreationTimestamp.Time
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var ckpt *float64
	n := 0
	account := func(now float64) {
		next, prev := AccountGoodput(tj, ckpt, at(now)), tj.Status.Goodput
		written := w == writeAlways || w == writeEveryOther && n%2 == 0 || now == tl[len(tl)-1].at
		if written || prev == nil || next.Category != prev.Category || next.Attempt != prev.Attempt || NewCheckpointBound(prev, next) {
			tj.Status.Goodput = next
		}
		n++
		data, _ := json.Marshal(tj.Status) // as stored: times to the second, accountedTime to the microsecond
		tj.Status = mlv1.TrainingJobStatus{}
		_ = json.Unmarshal(data, &tj.Status)
		if again != nil {
			again(tj.Status.Goodput, AccountGoodput(tj, ckpt, at(now)))
		}
	}
	last := 0.0
	down := false
	for _, s := range tl {
		for t := last + tick; tick > 0 && t < s.at && !down; t += tick {
			account(t)
		}
		down = s.down
		if s.change != nil {
			s.change(&tj.Status, metav1.NewTime(at(s.at)))
		}
		if s.checkpointSeconds != nil {
			ckpt = s.checkpointSeconds
		}
		if !down {
			account(s.at)
		}
		last = s.at
	}
	return tj.Status.Goodput
}

// want is a goodput's seconds by category (Productive included), and its percent.
type want map[string]float64

func seconds_(g *mlv1.GoodputStatus) want {
	b := g.BadputSeconds
	out := want{mlv1.GoodputProductive: g.ProductiveSeconds, mlv1.BadputQueued: b.Queued, mlv1.BadputScheduling: b.Scheduling,
		mlv1.BadputStartup: b.Startup, mlv1.BadputRestart: b.Restart, mlv1.BadputLostWork: b.LostWork, mlv1.BadputHang: b.Hang,
		mlv1.BadputCheckpoint: b.Checkpoint, mlv1.GoodputUnknown: g.UnknownSeconds}
	for k, v := range out {
		if v == 0 {
			delete(out, k)
		}
	}
	return out
}

// TestGoodputTimelines: each category alone, overlaps, and an operator that was down in the middle.
func TestGoodputTimelines(t *testing.T) {
	plain := timeline{ // 10 s scheduled, 5 s starting, 100 s training
		{at: 0, change: state(mlv1.StatePending, 0)},
		{at: 0.2, change: state(mlv1.StateInitializing, 0)},
		{at: 10, change: state(mlv1.StateRunning, 0)},
		{at: 15, change: progress},
		{at: 60, change: progress},
		{at: 115, change: state(mlv1.StateCompleted, 0)},
	}
	// A rank exits at 79.5 s (the kubelet says 79 s: the middle of that second is taken), the restart is
	// decided at 80 s (last checkpoint at 50.5 s, kept as 50 s); attempt 1 runs at 95 s, advances at 98 s.
	restart := timeline{
		{at: 0, change: state(mlv1.StateInitializing, 0)},
		{at: 10, change: state(mlv1.StateRunning, 0)},
		{at: 12, change: progress},
		{at: 50.5, change: checkpointed},
		{at: 70, change: progress},
		{at: 80, change: func(st *mlv1.TrainingJobStatus, at metav1.Time) {
			state(mlv1.StateInitializing, 1)(st, at)
			st.LastFailureTime = &metav1.Time{Time: at.Add(-700 * time.Millisecond).Truncate(time.Second)} // as stored
		}},
		{at: 95, change: state(mlv1.StateRunning, 1)},
		{at: 98, change: progress},
		{at: 200, change: state(mlv1.StateCompleted, 1)},
	}
	// Rank 0 last advances at 80 s; the hang is seen at 110 s and acted on at 115 s (checkpoint at 50.5 s).
	hang := timeline{
		{at: 0, change: state(mlv1.StateInitializing, 0)},
		{at: 10, change: state(mlv1.StateRunning, 0)},
		{at: 12, change: progress},
		{at: 50.5, change: checkpointed},
		{at: 80, change: progress},
		{at: 110, change: stalled},
		{at: 115, change: func(st *mlv1.TrainingJobStatus, at metav1.Time) {
			state(mlv1.StateInitializing, 1)(st, at)
			unstalled(st, at)
		}},
		{at: 125, change: state(mlv1.StateRunning, 1)},
		{at: 130, change: progress},
		{at: 200, change: state(mlv1.StateCompleted, 1)},
	}
	queued := timeline{ // queued 60 s, suspended by its user 20 s later for 30 s
		{at: 0, change: state(mlv1.StatePending, 0)},
		{at: 60, change: state(mlv1.StateInitializing, 0)},
		{at: 62, change: state(mlv1.StateRunning, 0)},
		{at: 63, change: progress},
		{at: 80, change: state(mlv1.StateSuspended, 0)},
		{at: 110, change: state(mlv1.StateInitializing, 1)},
		{at: 111, change: state(mlv1.StateRunning, 1)},
		{at: 112, change: progress},
		{at: 130, change: state(mlv1.StateCompleted, 1)},
	}
	checkpointSaves := timeline{ // the trainer reports 2 s then 5 s spent saving
		{at: 0, change: state(mlv1.StateInitializing, 0)},
		{at: 1, change: state(mlv1.StateRunning, 0)},
		{at: 2, change: progress},
		{at: 30, change: progress, checkpointSeconds: ptr.To(2.0)},
		{at: 60, change: progress, checkpointSeconds: ptr.To(5.0)},
		{at: 62, change: state(mlv1.StateCompleted, 0)},
	}
	// The operator is down from 5 s to 40 s: the workers ran from 10 s, rank 0 advanced from 15 s.
	operatorDown := timeline{
		{at: 0, change: state(mlv1.StateInitializing, 0)},
		{at: 5, down: true},
		{at: 10, change: state(mlv1.StateRunning, 0), down: true},
		{at: 15, change: progress, down: true},
		{at: 40, change: progress},
		{at: 100, change: state(mlv1.StateCompleted, 0)},
	}
	for _, tc := range []struct {
		name    string
		tl      timeline
		queue   string
		tick    float64
		want    want
		percent string
	}{
		{
			name:    "scheduling, startup, productive",
			tl:      plain,
			queue:   "",
			tick:    1,
			want:    want{"Scheduling": 10, "Startup": 5, "Productive": 100},
			percent: "86%",
		},
		{
			name:    "the same, accounted only at the changes",
			tl:      plain,
			queue:   "",
			tick:    0,
			want:    want{"Scheduling": 10, "Startup": 5, "Productive": 100},
			percent: "86%",
		},
		{
			name:    "a restart: lost work since the checkpoint, restart overhead",
			tl:      restart,
			queue:   "",
			tick:    1,
			want:    want{"Scheduling": 10, "Startup": 2, "Productive": 38.5 + 102, "LostWork": 29, "Restart": 18.5},
			percent: "70%",
		},
		{
			name:    "a hang, acted on: the hang from the last progress, lost work before it",
			tl:      hang,
			queue:   "",
			tick:    1,
			want:    want{"Scheduling": 10, "Startup": 2, "Productive": 38.5 + 70, "LostWork": 29.5, "Hang": 35, "Restart": 15},
			percent: "54%",
		},
		{
			name:    "queued by Kueue, then suspended",
			tl:      queued,
			queue:   "team-a",
			tick:    1,
			want:    want{"Queued": 60 + 30, "Scheduling": 2, "Startup": 1, "Productive": 18, "LostWork": 17, "Restart": 2},
			percent: "13%",
		},
		{
			name:    "an operator down while the workers started: split where the Running condition changed (their startup counts as productive)",
			tl:      operatorDown,
			queue:   "",
			tick:    1,
			want:    want{"Scheduling": 10, "Productive": 90},
			percent: "90%",
		},
		{
			name:    "checkpoint saves the trainer reports",
			tl:      checkpointSaves,
			queue:   "",
			tick:    1,
			want:    want{"Scheduling": 1, "Startup": 1, "Productive": 55, "Checkpoint": 5},
			percent: "88%",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "a").Queue(tc.queue).Obj()
			tj.CreationTimestamp = metav1.NewTime(time.Unix(1_000_000, 0))
			g := tc.tl.play(tj, tc.tick)
			if diff := cmp.Diff(tc.want, seconds_(g)); diff != "" {
				t.Errorf("seconds by category (-want +got):\n%s", diff)
			}
			if g.Percent != tc.percent || g.Category != "" || g.SinceCheckpointSeconds != 0 {
				t.Errorf("percent %q category %q sinceCheckpoint %v; want %q, over, 0", g.Percent, g.Category, g.SinceCheckpointSeconds, tc.percent)
			}
			tj = tjtest.NewTJ("ml", "a").Queue(tc.queue).Obj()
			tj.CreationTimestamp = metav1.NewTime(time.Unix(1_000_000, 0))
			if diff := cmp.Diff(tc.want, seconds_(tc.tl.playWith(tj, tc.tick, nil, writeOnChange))); diff != "" {
				t.Errorf("written only when the category changes: seconds by category (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGoodputGPUSeconds: GPU-seconds held by the active workers, and the productive part.
func TestGoodputGPUSeconds(t *testing.T) {
	tl := timeline{
		{at: 0, change: state(mlv1.StateInitializing, 0)}, // 4 workers active from the start
		{at: 10, change: state(mlv1.StateRunning, 0)},
		{at: 15, change: progress},
		{at: 115, change: state(mlv1.StateCompleted, 0)},
	}
	tj := tjtest.NewTJ("ml", "a").GPUs(2).Obj()
	tj.CreationTimestamp = metav1.NewTime(time.Unix(1_000_000, 0))
	g := tl.play(tj, 1)
	if got, want := []float64{g.GPUSeconds, g.ProductiveGPUSeconds}, []float64{4 * 2 * 115, 4 * 2 * 100}; !cmp.Equal(got, want) {
		t.Errorf("GPU-seconds held, productive = %v, want %v", got, want)
	}
}

// then makes one change of several.
func then(changes ...func(*mlv1.TrainingJobStatus, metav1.Time)) func(*mlv1.TrainingJobStatus, metav1.Time) {
	return func(st *mlv1.TrainingJobStatus, at metav1.Time) {
		for _, c := range changes {
			c(st, at)
		}
	}
}

// sourceless: the last read of rank 0 found no progress endpoint and no recognised line.
func sourceless(st *mlv1.TrainingJobStatus, at metav1.Time) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: mlv1.ConditionProgressReported, Status: metav1.ConditionFalse,
		Reason: ReasonNoProgressSource, LastTransitionTime: at})
}

// fromOutput: the supervisor recognises progress in rank 0's output.
func fromOutput(st *mlv1.TrainingJobStatus, at metav1.Time) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: mlv1.ConditionProgressReported, Status: metav1.ConditionTrue,
		Reason: ReasonFromOutput, LastTransitionTime: at})
}

// failedAt: the restart to attempt decided now, after a rank exited at second exit (kept to the second).
func failedAt(attempt int32, exit float64) func(*mlv1.TrainingJobStatus, metav1.Time) {
	return func(st *mlv1.TrainingJobStatus, at metav1.Time) {
		state(mlv1.StateInitializing, attempt)(st, at)
		st.LastFailureTime = &metav1.Time{Time: goodputT0.Add(time.Duration(exit * float64(time.Second)))}
	}
}

// learned: the operator learns of checkpoint name, written at second written (the status keeps the
// newest one, what the next attempt resumed from is kept).
func learned(name string, written float64) func(*mlv1.TrainingJobStatus, metav1.Time) {
	return func(st *mlv1.TrainingJobStatus, _ metav1.Time) {
		c := checkpointCopy(st)
		c.Latest, c.LastTime = name, &metav1.MicroTime{Time: goodputT0.Add(time.Duration(written * float64(time.Second)))}
		st.Checkpoint = c
	}
}

// resumed: RESUME_FROM is settled for the current attempt (the CheckpointController's ApplyResumed).
func resumed(from string) func(*mlv1.TrainingJobStatus, metav1.Time) {
	return func(st *mlv1.TrainingJobStatus, _ metav1.Time) { ApplyResumed(st, from) }
}

var goodputT0 = time.Unix(1_000_000, 0)

// unknownAndResumedTimelines: runs without a progress source, and restarts whose lost work is corrected
// from the checkpoint the next attempt resumed from.
var unknownAndResumedTimelines = []struct {
	name    string
	tl      timeline
	want    want
	percent string
}{{
	name: "no progress source at all: unknown, also once completed",
	tl: timeline{
		{at: 0, change: state(mlv1.StateInitializing, 0)},
		{at: 10, change: then(state(mlv1.StateRunning, 0), sourceless)},
		{at: 610, change: state(mlv1.StateCompleted, 0)},
	},
	want: want{"Scheduling": 10, "Unknown": 600}, percent: "unknown",
}, {
	name: "no source for 30 s, then the first progress: that was startup",
	tl: timeline{
		{at: 0, change: state(mlv1.StateInitializing, 0)},
		{at: 10, change: then(state(mlv1.StateRunning, 0), sourceless)},
		{at: 40, change: then(fromOutput, progress)},
		{at: 640, change: state(mlv1.StateCompleted, 0)},
	},
	want: want{"Scheduling": 10, "Startup": 30, "Productive": 600}, percent: "93%",
}, {
	name: "a retry: no source for 20 s, a source found, progress 5 s later: restarting",
	tl: timeline{
		{at: 0, change: state(mlv1.StateInitializing, 0)},
		{at: 10, change: state(mlv1.StateRunning, 0)},
		{at: 12, change: progress},
		{at: 50, change: state(mlv1.StateInitializing, 1)},
		{at: 60, change: then(state(mlv1.StateRunning, 1), sourceless)},
		{at: 80, change: fromOutput},
		{at: 85, change: progress},
		{at: 185, change: state(mlv1.StateCompleted, 1)},
	},
	want: want{"Scheduling": 10, "Startup": 2, "LostWork": 38, "Restart": 35, "Productive": 100}, percent: "54%",
}, {
	name: "part of the run unknown: a range",
	tl: timeline{
		{at: 0, change: state(mlv1.StateInitializing, 0)},
		{at: 10, change: then(state(mlv1.StateRunning, 0), sourceless)},
		{at: 110, change: state(mlv1.StateInitializing, 1)},
		{at: 120, change: then(state(mlv1.StateRunning, 1), fromOutput)},
		{at: 125, change: progress},
		{at: 400, change: state(mlv1.StateCompleted, 1)},
	},
	want: want{"Scheduling": 10, "Unknown": 100, "Restart": 15, "Productive": 275}, percent: "68%-93%",
}, {
	// Each kill comes 2 s after a checkpoint the operator learns of only after the failure: at the failure
	// it knows an older one, and the next attempt resumes from the new one.
	name: "kills just after checkpoints learned late: lost work from the checkpoint resumed from",
	tl: timeline{
		{at: 0, change: state(mlv1.StateInitializing, 0)},
		{at: 10, change: state(mlv1.StateRunning, 0)},
		{at: 12, change: progress},
		{at: 30, change: learned("ck-30", 30)},
		{at: 71, change: failedAt(1, 70.5)}, // written at 68.5, exit at 70.5
		{at: 72, change: learned("ck-68", 68.5)},
		{at: 73, change: resumed("ck-68")},
		{at: 85, change: state(mlv1.StateRunning, 1)},
		{at: 87, change: progress},
		{at: 131, change: failedAt(2, 130.5)}, // written at 128.5, exit at 130.5
		{at: 132, change: learned("ck-128", 128.5)},
		{at: 133, change: resumed("ck-128")},
		{at: 145, change: state(mlv1.StateRunning, 2)},
		{at: 147, change: progress},
		{at: 200, change: state(mlv1.StateCompleted, 2)},
	},
	want:    want{"Scheduling": 10, "Startup": 2, "Productive": 56.5 + 41.5 + 53, "LostWork": 2 + 2, "Restart": 16.5 + 16.5},
	percent: "75%",
}, {
	// The newest checkpoint known at the failure turns out unusable: the agent reports the older one
	// again, and the next attempt resumes from it.
	name: "resumed from an older checkpoint than the one known at the failure: more lost work",
	tl: timeline{
		{at: 0, change: state(mlv1.StateInitializing, 0)},
		{at: 10, change: state(mlv1.StateRunning, 0)},
		{at: 12, change: progress},
		{at: 40, change: learned("ck-40", 40)},
		{at: 60, change: learned("ck-60", 60)},
		{at: 71, change: failedAt(1, 70.5)},
		{at: 72, change: learned("ck-40", 40)},
		{at: 73, change: resumed("ck-40")},
		{at: 85, change: state(mlv1.StateRunning, 1)},
		{at: 87, change: progress},
		{at: 150, change: state(mlv1.StateCompleted, 1)},
	},
	want:    want{"Scheduling": 10, "Startup": 2, "Productive": 28.5 + 63, "LostWork": 30, "Restart": 16.5},
	percent: "61%",
}, {
	name: "resumed from an earlier attempt's checkpoint: no more lost than the attempt trained",
	tl: timeline{
		{at: 0, change: state(mlv1.StateInitializing, 0)},
		{at: 10, change: state(mlv1.StateRunning, 0)},
		{at: 12, change: progress},
		{at: 30, change: learned("ck-30", 30)},
		{at: 51, change: failedAt(1, 50.5)},
		{at: 52, change: resumed("ck-30")},
		{at: 60, change: state(mlv1.StateRunning, 1)},
		{at: 62, change: progress},
		{at: 81, change: failedAt(2, 80.5)},
		{at: 82, change: resumed("ck-30")},
		{at: 90, change: state(mlv1.StateRunning, 2)},
		{at: 92, change: progress},
		{at: 150, change: state(mlv1.StateCompleted, 2)},
	},
	want:    want{"Scheduling": 10, "Startup": 2, "Productive": 18.5 + 58, "LostWork": 20 + 18.5, "Restart": 11.5 + 11.5},
	percent: "51%",
}, {
	name: "resumed from nothing: the estimate stays",
	tl: timeline{
		{at: 0, change: state(mlv1.StateInitializing, 0)},
		{at: 10, change: state(mlv1.StateRunning, 0)},
		{at: 12, change: progress},
		{at: 30, change: learned("ck-30", 30)},
		{at: 71, change: failedAt(1, 70.5)},
		{at: 73, change: resumed("")},
		{at: 85, change: state(mlv1.StateRunning, 1)},
		{at: 87, change: progress},
		{at: 150, change: state(mlv1.StateCompleted, 1)},
	},
	want:    want{"Scheduling": 10, "Startup": 2, "Productive": 18.5 + 63, "LostWork": 40, "Restart": 16.5},
	percent: "54%",
}}

// TestGoodputCountersNeverDecrease: the counters the metrics export (Counters) of every accounting of
// timelines with restarts whose lost work is corrected both ways, time with no progress source, hangs
// and checkpoints learned late never go back (rate() would read it as a reset), written at every step or
// only at changes; and once the run is over, they add up to its wall time.
func TestGoodputCountersNeverDecrease(t *testing.T) {
	tls := map[string]timeline{}
	for _, tc := range unknownAndResumedTimelines {
		tls[tc.name] = tc.tl
	}
	tls["a hang, then a restart"] = timeline{
		{at: 0, change: state(mlv1.StateInitializing, 0)}, {at: 10, change: state(mlv1.StateRunning, 0)},
		{at: 12, change: progress}, {at: 40, change: learned("ck-40", 40)}, {at: 80, change: progress}, {at: 110, change: stalled},
		{at: 140, change: then(state(mlv1.StateInitializing, 1), unstalled)}, {at: 141, change: resumed("ck-40")},
		{at: 150, change: state(mlv1.StateRunning, 1)}, {at: 152, change: progress}, {at: 200, change: state(mlv1.StateCompleted, 1)},
	}
	for name, tl := range tls {
		for _, w := range []writing{writeAlways, writeOnChange} {
			t.Run(fmt.Sprintf("%s/%d", name, w), func(t *testing.T) {
				tj := tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StoragePVC}).Obj()
				tj.CreationTimestamp = metav1.NewTime(goodputT0)
				var last *GoodputCounters
				g := tl.playWith(tj, 1, func(_, next *mlv1.GoodputStatus) {
					c := Counters(next)
					if last != nil {
						b, lb := c.Badput, last.Badput
						for _, d := range [][2]float64{{c.Goodput, last.Goodput}, {c.Reclassified, last.Reclassified}, {b.Queued, lb.Queued},
							{b.Scheduling, lb.Scheduling}, {b.Startup, lb.Startup}, {b.Restart, lb.Restart}, {b.LostWork, lb.LostWork},
							{b.Hang, lb.Hang}, {b.Checkpoint, lb.Checkpoint}} {
							if d[0] < d[1]-1e-9 {
								t.Fatalf("a counter went back at %v: %+v after %+v", next.AccountedTime, c, *last)
							}
						}
					}
					last = &c
				}, w)
				c := Counters(g)
				b := c.Badput
				sum := c.Goodput - c.Reclassified + g.UnknownSeconds + b.Queued + b.Scheduling + b.Startup + b.Restart + b.LostWork + b.Hang +
					b.Checkpoint
				if math.Abs(sum-g.AccountedSeconds()) > 0.01 || math.Abs(c.Goodput-c.Reclassified-g.ProductiveSeconds) > 0.01 {
					t.Errorf("counters %+v add up to %.3f s, accounted %.3f s; productive %.3f s", c, sum, g.AccountedSeconds(), g.ProductiveSeconds)
				}
			})
		}
	}
}

// TestGoodputUnknownAndResumedLostWork: time with no progress source, settled once the attempt
// progresses; lost work corrected from the checkpoint the next attempt resumed from.
func TestGoodputUnknownAndResumedLostWork(t *testing.T) {
	for _, tc := range unknownAndResumedTimelines {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StoragePVC}).Obj()
			tj.CreationTimestamp = metav1.NewTime(goodputT0)
			g := tc.tl.play(tj, 1)
			if diff := cmp.Diff(tc.want, seconds_(g)); diff != "" {
				t.Errorf("seconds by category (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.percent, g.Percent); diff != "" || g.LostWorkEstimate != nil || g.Category != "" {
				t.Errorf("percent (-want +got):\n%s\nlost work estimate %+v, category %q; want none, over", diff, g.LostWorkEstimate, g.Category)
			}
		})
	}
}

// TestGoodputAccountedAgain: the accounting of its own stored result at the same time changes nothing,
// at every step of every timeline; written only every other time, or only when the category or the
// attempt changes (never on a timer), it comes to the same: a correction is made once, whether its result
// is written or not.
func TestGoodputAccountedAgain(t *testing.T) {
	for _, tc := range unknownAndResumedTimelines {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StoragePVC}).Obj()
			tj.CreationTimestamp = metav1.NewTime(goodputT0)
			tc.tl.playWith(tj, 1, func(stored, next *mlv1.GoodputStatus) {
				if diff := cmp.Diff(stored, next); diff != "" {
					t.Errorf("accounted again at %v (-stored +again):\n%s", stored.AccountedTime, diff)
				}
			}, writeAlways)
			for _, w := range []writing{writeEveryOther, writeOnChange} {
				tj = tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StoragePVC}).Obj()
				tj.CreationTimestamp = metav1.NewTime(goodputT0)
				g := tc.tl.playWith(tj, 1, nil, w)
				if diff := cmp.Diff(tc.want, seconds_(g)); diff != "" {
					t.Errorf("writing %d: seconds by category (-want +got):\n%s", w, diff)
				}
			}
		})
	}
}

// TestGoodputAt: what a reader sees between two writes: the time since accountedTime goes to the status's
// category, the job read is not changed, and a status with nothing to add to is returned as it is.
func TestGoodputAt(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	running := tjtest.NewTJ("ml", "a").Obj()
	running.Status = mlv1.TrainingJobStatus{State: mlv1.StateRunning, Workers: mlv1.WorkerCounts{Active: 2},
		LastProgressTime: &metav1.Time{Time: t0}}
	running.Status.Conditions = setCondition(nil, mlv1.ConditionRunning, true, metav1.NewTime(t0.Add(-time.Minute)))
	running.Status.Goodput = &mlv1.GoodputStatus{Category: mlv1.GoodputProductive, AccountedTime: &metav1.MicroTime{Time: t0},
		ProductiveSeconds: 30, BadputSeconds: mlv1.BadputSeconds{Scheduling: 10}, Percent: "75%"}
	unaccounted := running.DeepCopy()
	unaccounted.Status.Goodput.AccountedTime = nil
	for _, tc := range []struct {
		name        string
		tj          *mlv1.TrainingJob
		at          time.Duration
		wantSeconds want
		wantPercent string
	}{
		{name: "30 s after the last write", tj: running, at: 30 * time.Second,
			wantSeconds: want{mlv1.GoodputProductive: 60, mlv1.BadputScheduling: 10}, wantPercent: "85%"},
		{name: "at the last write", tj: running, at: 0,
			wantSeconds: want{mlv1.GoodputProductive: 30, mlv1.BadputScheduling: 10}, wantPercent: "75%"},
		{name: "no accountedTime: as the status says", tj: unaccounted, at: time.Hour,
			wantSeconds: want{mlv1.GoodputProductive: 30, mlv1.BadputScheduling: 10}, wantPercent: "75%"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read := tc.tj.DeepCopy()
			g := GoodputAt(read, t0.Add(tc.at))
			if diff := cmp.Diff(tc.wantSeconds, seconds_(g)); diff != "" {
				t.Errorf("seconds by category (-want +got):\n%s", diff)
			}
			if g.Percent != tc.wantPercent {
				t.Errorf("percent %q, want %q", g.Percent, tc.wantPercent)
			}
			if diff := cmp.Diff(tc.tj, read); diff != "" {
				t.Errorf("the job read was changed (-before +after):\n%s", diff)
			}
		})
	}
	if g := GoodputAt(&mlv1.TrainingJob{}, t0); g != nil {
		t.Errorf("a job never accounted: %+v, want nil", g)
	}
}

// TestGoodputFromAHostileStatus: whoever may write the status subresource may write any figure the schema
// takes, and the trainer prints what it likes: the accounting of such a status is finite, never negative,
// never falling, and can be written back (an infinity could not: every later status write would fail).
func TestGoodputFromAHostileStatus(t *testing.T) {
	at := func(s float64) time.Time { return goodputT0.Add(time.Duration(s * float64(time.Second))) }
	inf := math.Inf(1)
	for _, tc := range []struct {
		name              string
		set               func(g *mlv1.GoodputStatus)
		checkpointSeconds *float64
	}{
		{name: "gpuSeconds 1e306", set: func(g *mlv1.GoodputStatus) { g.GPUSeconds = 1e306 }},
		{name: "productiveSeconds 1e306", set: func(g *mlv1.GoodputStatus) { g.ProductiveSeconds = 1e306 }},
		{name: "negative GPUs", set: func(g *mlv1.GoodputStatus) { g.GPUs = -5 }},
		{name: "negative hang", set: func(g *mlv1.GoodputStatus) { g.BadputSeconds.Hang = -50 }},
		{name: "a trainer reporting infinite checkpoint seconds", set: func(*mlv1.GoodputStatus) {}, checkpointSeconds: &inf},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "a").Obj()
			tj.CreationTimestamp = metav1.NewTime(goodputT0)
			tj.Status.State, tj.Status.Workers.Active = mlv1.StateRunning, 1
			tj.Status.Conditions = setCondition(nil, mlv1.ConditionRunning, true, metav1.NewTime(at(10)))
			tj.Status.LastProgressTime = &metav1.Time{Time: at(3500)}
			tj.Status.Goodput = &mlv1.GoodputStatus{Category: mlv1.GoodputProductive, AccountedTime: &metav1.MicroTime{Time: at(3000)},
				ProductiveSeconds: 100, GPUs: 2}
			tc.set(tj.Status.Goodput)
			g1 := AccountGoodput(tj, tc.checkpointSeconds, at(3600))
			g2 := GoodputAt(tj, at(3660))
			for _, g := range []*mlv1.GoodputStatus{g1, g2} {
				if _, err := json.Marshal(g); err != nil {
					t.Fatalf("the accounting cannot be written: %v", err)
				}
				for _, v := range []float64{g.ProductiveSeconds, g.GPUSeconds, g.BadputSeconds.Hang, g.CheckpointReportedSeconds} {
					if math.IsInf(v, 0) || math.IsNaN(v) || v < 0 {
						t.Errorf("a figure of %v: %+v", v, g)
					}
				}
			}
			if g2.GPUSeconds < GoodputAt(tj, at(3600)).GPUSeconds {
				t.Errorf("GPU-seconds fell between two reads")
			}
		})
	}
}

// TestGoodputWrittenOnChangeOnly: timelines where what the status learns between two changes of category
// (a checkpoint, written at preemption or during a hang) matters: written only at changes of category,
// attempt, or when a newer checkpoint cuts the training since the last one, the accounting comes to the
// same as written every second.
func TestGoodputWrittenOnChangeOnly(t *testing.T) {
	for _, tc := range []struct {
		name string
		tl   timeline
	}{
		{name: "Kueue preemption: a checkpoint at SIGTERM learned while suspended, resumed in the same attempt, then a crash", tl: timeline{
			{at: 0, change: state(mlv1.StateInitializing, 0)}, {at: 10, change: state(mlv1.StateRunning, 0)},
			{at: 12, change: progress}, {at: 40, change: learned("ck-40", 40)}, {at: 70, change: progress},
			{at: 80, change: state(mlv1.StateSuspended, 0)}, {at: 85, change: learned("ck-82", 82)},
			{at: 200, change: state(mlv1.StateInitializing, 0)}, {at: 210, change: state(mlv1.StateRunning, 0)},
			{at: 215, change: progress}, {at: 301, change: failedAt(1, 300)}, {at: 310, change: state(mlv1.StateRunning, 1)},
			{at: 312, change: progress}, {at: 400, change: state(mlv1.StateCompleted, 1)},
		}},
		{name: "a hang, a checkpoint learned during it, then a restart", tl: timeline{
			{at: 0, change: state(mlv1.StateInitializing, 0)}, {at: 10, change: state(mlv1.StateRunning, 0)},
			{at: 12, change: progress}, {at: 80, change: progress}, {at: 110, change: stalled},
			{at: 112, change: learned("ck-75", 75)}, {at: 140, change: then(state(mlv1.StateInitializing, 1), unstalled)},
			{at: 150, change: state(mlv1.StateRunning, 1)}, {at: 152, change: progress},
			{at: 200, change: state(mlv1.StateCompleted, 1)},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fresh := func() *mlv1.TrainingJob {
				tj := tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StoragePVC}).Obj()
				tj.CreationTimestamp = metav1.NewTime(goodputT0)
				return tj
			}
			always := tc.tl.playWith(fresh(), 1, nil, writeAlways)
			onChange := tc.tl.playWith(fresh(), 1, nil, writeOnChange)
			if diff := cmp.Diff(seconds_(always), seconds_(onChange)); diff != "" {
				t.Errorf("(-written every second +written on change):\n%s", diff)
			}
		})
	}
}

// TestGoodputMonitoringOff: with monitoring off nothing tells training from startup: the time the workers
// ran is unknown, not startup (which read "0% goodput" for a job that trained).
func TestGoodputMonitoringOff(t *testing.T) {
	tl := timeline{
		{at: 0, change: state(mlv1.StateInitializing, 0)},
		{at: 10, change: state(mlv1.StateRunning, 0)},
		{at: 100, change: state(mlv1.StateCompleted, 0)},
	}
	for _, w := range []writing{writeAlways, writeOnChange} {
		tj := tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
			tj.Spec.Monitoring = &mlv1.MonitoringSpec{Enabled: new(bool)}
		}).Obj()
		tj.CreationTimestamp = metav1.NewTime(goodputT0)
		g := tl.playWith(tj, 1, nil, w)
		if diff := cmp.Diff(want{mlv1.BadputScheduling: 10, mlv1.GoodputUnknown: 90}, seconds_(g)); diff != "" {
			t.Errorf("writing %d: seconds by category (-want +got):\n%s", w, diff)
		}
		if g.Percent != "unknown" {
			t.Errorf("writing %d: percent %q, want unknown", w, g.Percent)
		}
	}
}

// TestAccountingStartOfADispatchedCopy: a copy MultiKueue made starts its accounting at the manager job's
// creation (the origin-created annotation) when that is before its own creation and at most 30 days
// before; any other value, or a job that is not such a copy, starts at its creation.
func TestAccountingStartOfADispatchedCopy(t *testing.T) {
	created := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	dispatched := map[string]string{names.MultiKueueOriginLabel: "manager"}
	tests := []struct {
		name   string
		labels map[string]string
		origin string
		want   time.Time
	}{
		{name: "10 minutes before", labels: dispatched, origin: "2026-12-03T11:50:00Z", want: created.Add(-10 * time.Minute)},
		{name: "not a dispatched copy", origin: "2026-12-03T11:50:00Z", want: created},
		{name: "after its creation", labels: dispatched, origin: "2026-12-03T12:00:01Z", want: created},
		{name: "31 days before", labels: dispatched, origin: "2026-11-02T11:59:59Z", want: created},
		{name: "not a time", labels: dispatched, origin: "yesterday", want: created},
		{name: "year 1", labels: dispatched, origin: "0001-01-01T00:00:00Z", want: created},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "copy").Queue("lq").Obj()
			tj.CreationTimestamp = metav1.NewTime(created)
			tj.Labels = tt.labels
			tj.Annotations = map[string]string{names.PrebuiltWorkloadKey: "trainingjob-copy-0a1b2c3d", names.OriginCreatedAnnotation: tt.origin}
			g := AccountGoodput(tj, nil, created.Add(time.Minute))
			if got := created.Add(time.Minute).Sub(tt.want).Seconds(); g == nil || math.Abs(g.BadputSeconds.Queued-got) > 0.001 {
				t.Errorf("goodput %+v, want %.0f s queued (from %s)", g, got, tt.want)
			}
		})
	}
}
