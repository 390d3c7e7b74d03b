package derive

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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
	st.Checkpoint = &mlv1.CheckpointStatus{Latest: at.String(), LastTime: &at}
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
	t0 := tj.CreationTimestamp.Time
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var ckpt *float64
	account := func(now float64) {
		tj.Status.Goodput = AccountGoodput(tj, ckpt, at(now))
		data, _ := json.Marshal(tj.Status) // as stored: times to the second, accountedTime to the microsecond
		tj.Status = mlv1.TrainingJobStatus{}
		_ = json.Unmarshal(data, &tj.Status)
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
		mlv1.BadputCheckpoint: b.Checkpoint}
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
		{"scheduling, startup, productive", plain, "", 1, want{"Scheduling": 10, "Startup": 5, "Productive": 100}, "86%"},
		{"the same, accounted only at the changes", plain, "", 0, want{"Scheduling": 10, "Startup": 5, "Productive": 100}, "86%"},
		{"a restart: lost work since the checkpoint, restart overhead", restart, "", 1,
			want{"Scheduling": 10, "Startup": 2, "Productive": 38.5 + 102, "LostWork": 29, "Restart": 18.5}, "70%"},
		{"a hang, acted on: the hang from the last progress, lost work before it", hang, "", 1,
			want{"Scheduling": 10, "Startup": 2, "Productive": 38.5 + 70, "LostWork": 29.5, "Hang": 35, "Restart": 15}, "54%"},
		{"queued by Kueue, then suspended", queued, "team-a", 1,
			want{"Queued": 60 + 30, "Scheduling": 2, "Startup": 1, "Productive": 18, "LostWork": 17, "Restart": 2}, "13%"},
		{"an operator down while the workers started: split where the Running condition changed (their startup counts as productive)", operatorDown, "", 1,
			want{"Scheduling": 10, "Productive": 90}, "90%"},
		{"checkpoint saves the trainer reports", checkpointSaves, "", 1, want{"Scheduling": 1, "Startup": 1, "Productive": 55, "Checkpoint": 5}, "88%"},
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
