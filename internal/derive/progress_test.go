package derive

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

func TestParseSample(t *testing.T) {
	cases := []struct {
		name, text string
		want       Sample
	}{
		{
			name: "example trainer",
			text: `# HELP training_epoch Epochs completed.
# TYPE training_epoch gauge
training_epoch 3
training_epochs_total 10
training_step 300
training_steps_total 1000
training_loss 0.25
training_accuracy 0.9
training_learning_rate 0.001
training_samples_per_second 1500.5
`,
			want: Sample{Epoch: ptr.To(3.0), TotalEpochs: ptr.To(10.0), Step: ptr.To(300.0), TotalSteps: ptr.To(1000.0), Loss: ptr.To(0.25),
				Accuracy: ptr.To(0.9), LearningRate: ptr.To(0.001), Throughput: ptr.To(1500.5), Custom: map[string]float64{}},
		},
		{
			name: "DCGM utilisation averaged over GPUs; runtime series dropped; custom kept",
			text: `# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0"} 80
DCGM_FI_DEV_GPU_UTIL{gpu="1"} 60
DCGM_FI_DEV_FB_USED{gpu="0"} 1000
go_goroutines 12
process_cpu_seconds_total 3
python_gc_objects_collected_total{generation="0"} 5
# TYPE training_tokens_total counter
training_tokens_total 1e+06
training_perplexity NaN
`,
			want: Sample{GPUUtilization: ptr.To(70.0), Custom: map[string]float64{"training_tokens_total": 1e6}},
		},
		{
			name: "rank 0's own GPU figure wins over DCGM",
			text: "training_gpu_utilization_percent 40\nDCGM_FI_DEV_GPU_UTIL 90\n",
			want: Sample{GPUUtilization: ptr.To(40.0), Custom: map[string]float64{}},
		},
		{
			name: "histograms and summaries are not single values",
			text: "# TYPE lat histogram\nlat_bucket{le=\"1\"} 1\nlat_bucket{le=\"+Inf\"} 2\nlat_sum 3\nlat_count 2\n",
			want: Sample{Custom: map[string]float64{}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSample(strings.NewReader(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, err := ParseSample(strings.NewReader("training_epoch{ 3\n")); err == nil {
		t.Errorf("malformed text parsed")
	}
}

func TestFractionAndETA(t *testing.T) {
	cases := []struct {
		name       string
		s          Sample
		specEpochs int32
		want       float64
		ok         bool
	}{
		{name: "epochs from rank 0", s: Sample{Epoch: ptr.To(3.0), TotalEpochs: ptr.To(12.0)}, specEpochs: 10, want: 0.25, ok: true},
		{name: "total from the spec", s: Sample{Epoch: ptr.To(3.0)}, specEpochs: 10, want: 0.3, ok: true},
		{name: "steps when epochs are unknown", s: Sample{Step: ptr.To(50.0), TotalSteps: ptr.To(200.0)}, specEpochs: 0, want: 0.25, ok: true},
		{
			name:       "epochs win over steps",
			s:          Sample{Epoch: ptr.To(1.0), Step: ptr.To(50.0), TotalSteps: ptr.To(200.0)},
			specEpochs: 4,
			want:       0.25,
			ok:         true,
		},
		{name: "clamped", s: Sample{Epoch: ptr.To(12.0)}, specEpochs: 10, want: 1, ok: true},
		{name: "unknown", s: Sample{Loss: ptr.To(1.0)}, specEpochs: 0, want: 0, ok: false},
		{name: "no total", s: Sample{Epoch: ptr.To(3.0)}, specEpochs: 0, want: 0, ok: false},
	}
	for _, tc := range cases {
		if got, ok := tc.s.Fraction(tc.specEpochs); got != tc.want || ok != tc.ok {
			t.Errorf("%s: Fraction = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	t0 := time.Unix(1000, 0)
	etas := []struct {
		name string
		w    RateWindow
		f    float64
		now  time.Time
		want string
	}{
		{name: "10% per minute, 60% left", w: RateWindow{At: t0, Fraction: 0.3}, f: 0.4, now: t0.Add(time.Minute), want: "6m0s"},
		{name: "resumed at 50%: rate from the window", w: RateWindow{At: t0, Fraction: 0.5}, f: 0.6, now: t0.Add(10 * time.Minute),
			want: "40m0s"},
		{name: "no movement yet", w: RateWindow{At: t0, Fraction: 0.3}, f: 0.3, now: t0.Add(time.Minute), want: ""},
		{name: "first sample", w: RateWindow{At: t0, Fraction: 0.3}, f: 0.3, now: t0, want: ""},
		{name: "done", w: RateWindow{At: t0, Fraction: 0.3}, f: 1, now: t0.Add(time.Minute), want: "0s"},
	}
	for _, tc := range etas {
		if got := eta(tc.w, tc.f, tc.now); got != tc.want {
			t.Errorf("%s: eta = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestApplySample(t *testing.T) {
	tj := tjtest.NewTJ("ml", "a").Epochs(10).Obj()
	t0 := metav1.NewTime(time.Unix(1000, 0))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	st := mlv1.TrainingJobStatus{State: mlv1.StateRunning}
	s := Sample{Epoch: ptr.To(2.0), Loss: ptr.To(0.5), Custom: map[string]float64{"training_b": 2, "training_a": 1.5}}
	ApplySample(&st, tj, s, RateWindow{At: t0.Time, Fraction: 0.1}, t0)
	want := mlv1.TrainingJobStatus{State: mlv1.StateRunning, Progress: "20%", CurrentEpoch: 2, ETA: "",
		Metrics: &mlv1.TrainingMetrics{Loss: ptr.To(0.5), Custom: map[string]string{"training_a": "1.5", "training_b": "2"}, Epoch: 2,
			Display: &mlv1.MetricsDisplay{Loss: "0.5"}}, LastProgressTime: &t0}
	got := st.DeepCopy()
	got.Conditions = nil
	if diff := cmp.Diff(&want, got); diff != "" {
		t.Errorf("first sample (-want +got):\n%s", diff)
	}
	before := st.DeepCopy()
	ApplySample(&st, tj, s, RateWindow{At: t0.Time, Fraction: 0.1}, t1)
	if diff := cmp.Diff(before, &st); diff != "" {
		t.Errorf("the same figures changed the status (-before +after):\n%s", diff)
	}
	ApplySample(&st, tj, Sample{Epoch: ptr.To(4.0), Loss: ptr.To(0.4)}, RateWindow{At: t0.Time, Fraction: 0.2}, t1)
	if st.Progress != "40%" || st.ETA != "3m0s" || !st.LastProgressTime.Equal(&t1) || st.Metrics.Custom != nil {
		t.Errorf("new figures: progress %q eta %q last %v custom %v", st.Progress, st.ETA, st.LastProgressTime, st.Metrics.Custom)
	}
	ApplyScrapeError(&st, errors.New("connection refused"), t1)
	c := condition(st, mlv1.ConditionProgressReported)
	if c.Status != metav1.ConditionFalse || c.Reason != "ScrapeFailed" ||
		c.Message != "progress is stale (last reported at 1970-01-01T00:17:40Z): connection refused" || st.Progress != "40%" {
		t.Errorf("after a failed scrape: %+v, progress %q", c, st.Progress)
	}
}

func TestCustomMetricsAreBounded(t *testing.T) {
	c := map[string]float64{}
	for i := 0; i < 100; i++ {
		c[string(rune('a'+i%26))+strings.Repeat("x", i/26)] = float64(i)
	}
	got := customStrings(c)
	if len(got) != MaxCustomMetrics {
		t.Fatalf("%d custom metrics, want %d", len(got), MaxCustomMetrics)
	}
	if _, ok := got["a"]; !ok {
		t.Errorf("the first names in sorted order should be kept: %v", got)
	}
}

func TestDecideSuccess(t *testing.T) {
	policy := func(p mlv1.SuccessPolicy) *mlv1.TrainingJob {
		return tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) { tj.Spec.SuccessPolicy = &p }).Obj()
	}
	type step struct {
		epoch, loss, acc float64
		want             string // "" or reason: message
	}
	cases := []struct {
		name  string
		tj    *mlv1.TrainingJob
		steps []step
	}{
		{name: "no policy", tj: tjtest.NewTJ("ml", "a").Obj(), steps: []step{{epoch: 1, loss: 0.1, acc: 1, want: ""}}},
		{
			name: "target accuracy",
			tj:   policy(mlv1.SuccessPolicy{TargetAccuracy: ptr.To(0.9)}),
			steps: []step{
				{epoch: 1, loss: 1, acc: 0.5, want: ""},
				{epoch: 2, loss: 1, acc: 0.9, want: "TargetReached: accuracy 0.9 reached targetAccuracy 0.9"},
			},
		},
		{
			name: "accuracy printed as a percentage",
			tj:   policy(mlv1.SuccessPolicy{TargetAccuracy: ptr.To(0.95)}),
			steps: []step{
				{epoch: 1, loss: 1, acc: 12.5, want: ""},
				{epoch: 2, loss: 1, acc: 94.9, want: ""},
				{epoch: 3, loss: 1, acc: 95.5, want: "TargetReached: accuracy 0.955 reached targetAccuracy 0.95"},
			},
		},
		{
			name: "target loss",
			tj:   policy(mlv1.SuccessPolicy{TargetLoss: ptr.To(0.2)}),
			steps: []step{
				{epoch: 1, loss: 0.3, acc: 0, want: ""},
				{epoch: 2, loss: 0.19, acc: 0, want: "TargetReached: loss 0.19 reached targetLoss 0.2"},
			},
		},
		{
			name: "patience on loss",
			tj:   policy(mlv1.SuccessPolicy{EarlyStoppingPatience: ptr.To[int32](2)}),
			steps: []step{
				{epoch: 1, loss: 0.5, acc: 0, want: ""},
				{epoch: 2, loss: 0.4, acc: 0, want: ""},
				{epoch: 3, loss: 0.4, acc: 0, want: ""},
				{epoch: 3, loss: 0.45, acc: 0, want: ""},
				{epoch: 4, loss: 0.41, acc: 0, want: "EarlyStopped: loss did not improve for 2 epochs (best 0.4 at epoch 2)"},
			},
		},
		{
			name: "improvement resets patience",
			tj:   policy(mlv1.SuccessPolicy{EarlyStoppingPatience: ptr.To[int32](2)}),
			steps: []step{
				{epoch: 1, loss: 0.5, acc: 0, want: ""},
				{epoch: 2, loss: 0.6, acc: 0, want: ""},
				{epoch: 3, loss: 0.3, acc: 0, want: ""},
				{epoch: 4, loss: 0.31, acc: 0, want: ""},
			},
		},
		{
			name: "patience on accuracy when only targetAccuracy is set",
			tj:   policy(mlv1.SuccessPolicy{TargetAccuracy: ptr.To(0.99), EarlyStoppingPatience: ptr.To[int32](1)}),
			steps: []step{
				{epoch: 1, loss: 0.1, acc: 0.8, want: ""},
				{epoch: 2, loss: 0.05, acc: 0.8, want: "EarlyStopped: accuracy did not improve for 1 epochs (best 0.8 at epoch 1)"},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := &mlv1.TrainingJobStatus{}
			for i, s := range tc.steps {
				d := DecideSuccess(tc.tj, st, Sample{Epoch: ptr.To(s.epoch), Loss: ptr.To(s.loss), Accuracy: ptr.To(s.acc)})
				got := ""
				if d.Done {
					got = d.Reason + ": " + d.Message
				}
				if got != s.want {
					t.Fatalf("step %d: %q, want %q", i, got, s.want)
				}
			}
		})
	}
}

func condition(st mlv1.TrainingJobStatus, typ string) metav1.Condition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

func TestFinishedRunSettlesProgress(t *testing.T) {
	tj := tjtest.NewTJ("ml", "a").Obj()
	tj.Status = mlv1.TrainingJobStatus{State: mlv1.StateRunning, Progress: "90%", ETA: "1m0s"}
	// The JobController derives the end, then the StatusController settles its progress.
	read := metav1.NewTime(time.Unix(1000, 0))
	tj.Status.LastProgressTime = &read
	ApplyScrapeError(&tj.Status, errors.New("rank 0 has no running pod"), read) // rank 0 exited before the end was seen
	settled := func(obs Observed) mlv1.TrainingJobStatus {
		st := Status(tj, obs, metav1.Now())
		SettleProgress(&st, metav1.Now())
		return st
	}
	done := settled(Observed{Job: job(jobCond("Complete", "CompletionsReached", ""))})
	failed := settled(Observed{
		Job:  job(jobCond("Failed", "BackoffLimitExceeded", "")),
		Pods: pods(pod("0", corev1.PodFailed).exited(1, "Error", false)),
	})
	c := condition(done, mlv1.ConditionProgressReported)
	got := []string{done.Progress, done.ETA, failed.Progress, failed.ETA, string(c.Status), c.Reason, c.Message}
	want := []string{"100%", "", "90%", "", "False", ReasonRunEnded,
		"the run ended: progress is no longer read; the last, read at 1970-01-01T00:16:40Z, is kept"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("progress, eta of completed and failed runs, ProgressReported (-want +got):\n%s", diff)
	}
}

// TestFinishedRunNeverReadSaysNothingOfProgress: a run whose progress was never read (monitoring off)
// ends with no ProgressReported condition: "the run ended: progress is no longer read" would be news
// about something that never happened, and a status write.
func TestFinishedRunNeverReadSaysNothingOfProgress(t *testing.T) {
	st := mlv1.TrainingJobStatus{State: mlv1.StateCompleted}
	SettleProgress(&st, metav1.Now())
	if c := condition(st, mlv1.ConditionProgressReported); c.Type != "" {
		t.Errorf("ProgressReported %+v, want none", c)
	}
}

// TestFinishedRunAgreesWithItself: the last scrape of a run that then ended may be an epoch behind. Once it
// has ended, the epoch, the percentage and the newest checkpoint agree: a checkpoint of epoch N means N
// epochs were done, and a run whose workers all succeeded did all it planned.
func TestFinishedRunAgreesWithItself(t *testing.T) {
	ckpt := func(epoch int32) *mlv1.CheckpointStatus {
		return &mlv1.CheckpointStatus{Latest: fmt.Sprintf("/c/checkpoint-epoch-%d", epoch), LatestEpoch: epoch}
	}
	ended := func(state mlv1.State, reason string) []metav1.Condition {
		typ := map[mlv1.State]string{mlv1.StateCompleted: mlv1.ConditionCompleted, mlv1.StateFailed: mlv1.ConditionFailed}[state]
		return []metav1.Condition{{Type: typ, Status: metav1.ConditionTrue, Reason: reason}}
	}
	type figures struct {
		Progress     string
		CurrentEpoch int32
		TotalEpochs  int32
	}
	for _, tc := range []struct {
		name  string
		state mlv1.State
		why   string
		last  figures
		ckpt  *mlv1.CheckpointStatus
		want  figures
	}{
		{
			name:  "succeeded, last read an epoch before the end",
			state: mlv1.StateCompleted,
			why:   "Succeeded",
			last:  figures{Progress: "83%", CurrentEpoch: 5, TotalEpochs: 6},
			ckpt:  ckpt(6),
			want:  figures{Progress: "100%", CurrentEpoch: 6, TotalEpochs: 6},
		},
		{
			name:  "succeeded, no checkpoints",
			state: mlv1.StateCompleted,
			why:   "Succeeded",
			last:  figures{Progress: "83%", CurrentEpoch: 5, TotalEpochs: 6},
			ckpt:  nil,
			want:  figures{Progress: "100%", CurrentEpoch: 6, TotalEpochs: 6},
		},
		{
			name:  "succeeded, read at the end",
			state: mlv1.StateCompleted,
			why:   "Succeeded",
			last:  figures{Progress: "100%", CurrentEpoch: 6, TotalEpochs: 6},
			ckpt:  ckpt(6),
			want:  figures{Progress: "100%", CurrentEpoch: 6, TotalEpochs: 6},
		},
		{
			name:  "succeeded, no epochs reported",
			state: mlv1.StateCompleted,
			why:   "Succeeded",
			last:  figures{Progress: "40%", CurrentEpoch: 0, TotalEpochs: 0},
			ckpt:  nil,
			want:  figures{Progress: "100%", CurrentEpoch: 0, TotalEpochs: 0},
		},
		{
			name:  "target reached early keeps its epoch",
			state: mlv1.StateCompleted,
			why:   "TargetReached",
			last:  figures{Progress: "30%", CurrentEpoch: 3, TotalEpochs: 10},
			ckpt:  ckpt(3),
			want:  figures{Progress: "30%", CurrentEpoch: 3, TotalEpochs: 10},
		},
		{
			name:  "failed after a checkpoint not yet scraped",
			state: mlv1.StateFailed,
			why:   "BackoffLimitExceeded",
			last:  figures{Progress: "40%", CurrentEpoch: 4, TotalEpochs: 10},
			ckpt:  ckpt(5),
			want:  figures{Progress: "50%", CurrentEpoch: 5, TotalEpochs: 10},
		},
		{
			name:  "failed, older checkpoint",
			state: mlv1.StateFailed,
			why:   "BackoffLimitExceeded",
			last:  figures{Progress: "40%", CurrentEpoch: 4, TotalEpochs: 10},
			ckpt:  ckpt(3),
			want:  figures{Progress: "40%", CurrentEpoch: 4, TotalEpochs: 10},
		},
		{
			name:  "running is left alone",
			state: mlv1.StateRunning,
			why:   "",
			last:  figures{Progress: "40%", CurrentEpoch: 4, TotalEpochs: 10},
			ckpt:  ckpt(5),
			want:  figures{Progress: "40%", CurrentEpoch: 4, TotalEpochs: 10},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := mlv1.TrainingJobStatus{State: tc.state, Progress: tc.last.Progress, CurrentEpoch: tc.last.CurrentEpoch,
				TotalEpochs: tc.last.TotalEpochs, Checkpoint: tc.ckpt, Metrics: &mlv1.TrainingMetrics{Epoch: tc.last.CurrentEpoch}}
			if tc.why != "" {
				st.Conditions = ended(tc.state, tc.why)
			}
			SettleProgress(&st, metav1.Now())
			if diff := cmp.Diff(tc.want, figures{Progress: st.Progress, CurrentEpoch: st.CurrentEpoch, TotalEpochs: st.TotalEpochs}); diff != "" {
				t.Errorf("progress, epoch, total (-want +got):\n%s", diff)
			}
			if st.Metrics.Epoch != tc.last.CurrentEpoch {
				t.Errorf("metrics.epoch = %d, want %d: the metrics are still those of the last read", st.Metrics.Epoch, tc.last.CurrentEpoch)
			}
		})
	}
}

func TestApplyCheckpoints(t *testing.T) {
	now := metav1.NewTime(time.Unix(2000, 0))
	st := mlv1.TrainingJobStatus{}
	ApplyCheckpoints(&st, testPlace, agentapi.Status{}, now)
	if st.Checkpoint != nil || len(st.Conditions) != 0 {
		t.Fatalf("an agent that has not synced changed the status: %+v", st)
	}
	last := time.Unix(1900, 500)
	ApplyCheckpoints(&st, testPlace, agentapi.Status{
		Time: now.Time, Latest: "s3://b/ml/a/checkpoint-epoch-4", LatestEpoch: 4, Count: 2, SizeBytes: 300, LastTime: last,
	}, now)
	want := &mlv1.CheckpointStatus{
		Latest: "s3://b/ml/a/checkpoint-epoch-4", LatestEpoch: 4, Count: 2, SizeBytes: 300, LastTime: &metav1.MicroTime{Time: time.Unix(1900, 0)},
	}
	if diff := cmp.Diff(want, st.Checkpoint); diff != "" {
		t.Errorf("status.checkpoint (-want +got):\n%s", diff)
	}
	ApplyCheckpoints(&st, testPlace, agentapi.Status{
		Time: now.Time, Error: "listing s3://b/ml/a/: connection refused",
		Latest: want.Latest, LatestEpoch: 4, Count: 2, SizeBytes: 300, LastTime: last,
	}, now)
	if c := condition(st, mlv1.ConditionCheckpointStorageReady); c.Status != metav1.ConditionFalse || c.Reason != "StorageError" ||
		!strings.Contains(c.Message, "connection refused") {
		t.Errorf("condition %+v", c)
	}
	if st.Checkpoint.LatestEpoch != 4 {
		t.Errorf("the last good report was lost: %+v", st.Checkpoint)
	}
}

func TestCrashingSidecarIsNamed(t *testing.T) {
	tj := tjtest.NewTJ("ml", "a").Obj()
	tj.Status.State = mlv1.StateRunning
	st := Status(tj, Observed{Job: job(), Pods: pods(pod("0", "Running").sidecarCrashing(), pod("1", "Running"))}, metav1.Now())
	c := condition(st, mlv1.ConditionRunning)
	if c.Reason != "CrashLoopBackOff" || !strings.Contains(c.Message, "rank 0 (pod w-0, container checkpoint-agent) exited with code 1") {
		t.Errorf("Running condition %+v", c)
	}
}

// TestDisplay: loss and accuracy as kubectl get -o wide shows them.
func TestDisplay(t *testing.T) {
	for _, tc := range []struct {
		name           string
		loss, accuracy *float64
		want           *mlv1.MetricsDisplay
	}{
		{name: "neither", loss: nil, accuracy: nil, want: nil},
		{
			name:     "the issue's figures",
			loss:     ptr.To(0.15692955421071692),
			accuracy: ptr.To(0.93701171875),
			want:     &mlv1.MetricsDisplay{Loss: "0.1569", Accuracy: "93.7%"},
		},
		{name: "a large loss", loss: ptr.To(1234.5678), accuracy: nil, want: &mlv1.MetricsDisplay{Loss: "1235"}},
		{name: "a tiny loss", loss: ptr.To(0.000012345), accuracy: nil, want: &mlv1.MetricsDisplay{Loss: "1.234e-05"}},
		{name: "accuracy in percent already", loss: nil, accuracy: ptr.To(87.25), want: &mlv1.MetricsDisplay{Accuracy: "87.2%"}},
		{name: "NaN loss", loss: ptr.To(math.NaN()), accuracy: ptr.To(1.0), want: &mlv1.MetricsDisplay{Accuracy: "100.0%"}},
	} {
		if diff := cmp.Diff(tc.want, display(tc.loss, tc.accuracy)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestApplySampleAfterARestart: the first figures an attempt after a restart serves are its progress, also
// when they are the very figures the last attempt stopped at (one-second epochs redone from a checkpoint
// reach them between two reads), but not a step and epoch of 0 (served before the rendezvous), nor a
// sample remembered from before the attempt's workers ran.
func TestApplySampleAfterARestart(t *testing.T) {
	tj := tjtest.NewTJ("ml", "a").Epochs(70).Obj()
	failed := metav1.NewTime(time.Unix(1000, 0))
	running := metav1.NewTime(failed.Add(5 * time.Second))
	fresh := func() mlv1.TrainingJobStatus {
		st := mlv1.TrainingJobStatus{State: mlv1.StateRunning, Attempt: 1, CurrentEpoch: 25, CurrentStep: 2500, LastProgressTime: &failed}
		st.Conditions = setCondition(st.Conditions, mlv1.ConditionRunning, true, running)
		return st
	}
	same := Sample{Epoch: ptr.To(25.0), Step: ptr.To(2500.0)}
	for _, tc := range []struct {
		name     string
		s        Sample
		at       metav1.Time
		progress bool
	}{
		{"the figures the last attempt stopped at", same, metav1.NewTime(running.Add(time.Second)), true},
		{"other figures", Sample{Epoch: ptr.To(49.0), Step: ptr.To(4900.0)}, metav1.NewTime(running.Add(time.Second)), true},
		{"epoch and step 0, before the rendezvous", Sample{Epoch: ptr.To(0.0), Step: ptr.To(0.0)},
			metav1.NewTime(running.Add(time.Second)), false},
		{"a sample from before the workers ran", same, metav1.NewTime(running.Add(-time.Second)), false},
	} {
		st := fresh()
		ApplySample(&st, tj, tc.s, RateWindow{}, tc.at)
		if got := ProgressedInAttempt(&st); got != tc.progress {
			t.Errorf("%s: progressed %v, want %v (last progress %v)", tc.name, got, tc.progress, st.LastProgressTime)
		}
	}
	st := fresh() // once the attempt progressed, the same figures again are no progress
	ApplySample(&st, tj, same, RateWindow{}, metav1.NewTime(running.Add(time.Second)))
	ApplySample(&st, tj, same, RateWindow{}, metav1.NewTime(running.Add(2*time.Second)))
	if want := running.Add(time.Second); !st.LastProgressTime.Time.Equal(want) {
		t.Errorf("the same figures again moved the last progress to %v, want %v", st.LastProgressTime, want)
	}
}
