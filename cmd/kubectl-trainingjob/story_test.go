package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

func TestStory(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(-ago)} }
	tj := tjtest.NewTJ("vision", "resnet").Workers(2).GPUs(1).Epochs(20).
		Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "ckpt"}).Obj()
	tj.Status = mlv1.TrainingJobStatus{
		State: mlv1.StateRunning, Progress: "45%", CurrentEpoch: 9, TotalEpochs: 20, ETA: "12m30s", LastProgressTime: at(5 * time.Second),
		Metrics: &mlv1.TrainingMetrics{Loss: ptr.To(0.2313), Accuracy: ptr.To(0.9121), Custom: map[string]string{"f1": "0.88"}},
		Workers: mlv1.WorkerCounts{Active: 2, Ready: 2}, RestartCount: 2, Attempt: 2,
		Goodput: &mlv1.GoodputStatus{
			Percent: "82%", ProductiveSeconds: 3690, GPUSeconds: 8280, ProductiveGPUSeconds: 7380, Category: mlv1.GoodputProductive,
			BadputSeconds: mlv1.BadputSeconds{Queued: 360, Restart: 180, LostWork: 240, Scheduling: 20, Startup: 10},
		},
		Checkpoint: &mlv1.CheckpointStatus{
			Latest: "/checkpoints/vision/resnet/checkpoint-epoch-8", LatestEpoch: 8, Count: 3,
			LastTime: &metav1.MicroTime{Time: at(2 * time.Minute).Time},
		},
		MLflow: &mlv1.MLflowStatus{URL: "http://mlflow/#/experiments/1/runs/r1", RunID: "r1", RunStatus: "RUNNING", LoggedEpoch: 9},
		Conditions: []metav1.Condition{{
			Type: "Running", Status: "True", Reason: "AllWorkersRunning", Message: "2 of 2 workers running\nmore",
			LastTransitionTime: *at(time.Hour),
		}},
	}
	pods := []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "resnet-worker-0-abc", Labels: map[string]string{names.RankLabel: "0"}},
		Spec:   corev1.PodSpec{NodeName: "gpu-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{RestartCount: 1}}}}}
	events := []corev1.Event{{
		Type: "Normal", Reason: "Running", Message: "Initializing -> Running: 2 of 2 workers running", LastTimestamp: *at(time.Hour),
	}}
	want := `TrainingJob  vision/resnet
State        Running (AllWorkersRunning: 2 of 2 workers running)
Trains       cnn on mnist, pytorch, 2 workers, 1 GPUs each
Progress     45%, epoch 9/20, ETA 12m30s, read 5s ago
Metrics      loss 0.2313, accuracy 0.9121, f1 0.88
Workers      2 active, 2 ready, 0 pending, 0 succeeded, 0 failed (attempt 2, 2 restarts)
` + "Goodput      82% goodput: 6m queued, 4m of training done again after restarts, 3m restarting (2 restarts), " +
		"20s scheduling and pulling images, 10s starting up; 2.0 of 2.3 GPU-hours productive\n" +
		`Checkpoint   epoch 8, 3 kept, written 2m ago: /checkpoints/vision/resnet/checkpoint-epoch-8
MLflow       http://mlflow/#/experiments/1/runs/r1 (run r1, RUNNING, epoch 9 logged)

Conditions:
  TYPE     STATUS  REASON             SINCE  MESSAGE
  Running  True    AllWorkersRunning  60m    2 of 2 workers running

Events:
  AGE  TYPE    REASON   MESSAGE
  60m  Normal  Running  Initializing -> Running: 2 of 2 workers running

Workers of attempt 2:
  RANK  POD                  PHASE    NODE   RESTARTS
  0     resnet-worker-0-abc  Running  gpu-1  1
`
	if diff := cmp.Diff(want, story(tj, pods, events, now)); diff != "" {
		t.Errorf("story (-want +got):\n%s", diff)
	}
	fetching := tj.DeepCopy()
	fetching.Status.Conditions = append(fetching.Status.Conditions, metav1.Condition{
		Type: mlv1.ConditionInputsReady, Status: "False", Reason: "Fetching",
		Message: "rank 0 is fetching dataset s3://datasets/squad 409.6 MiB of 1.2 GiB into the input cache"})
	fetchingLine := "Inputs       Fetching: rank 0 is fetching dataset s3://datasets/squad 409.6 MiB of 1.2 GiB into the input cache\n"
	if got, line := story(fetching, pods, events, now), fetchingLine; !strings.Contains(got, line) {
		t.Errorf("story lacks %q:\n%s", line, got)
	}
	got := checkpointStory(tj, "/checkpoints/vision/resnet/checkpoint-epoch-8", now)
	for _, line := range []string{
		"Storage              pvc claim ckpt",
		"Newest               /checkpoints/vision/resnet/checkpoint-epoch-8 (epoch 8, 0 bytes, written 2m ago)",
		"Workers resume from  /checkpoints/vision/resnet/checkpoint-epoch-8",
	} {
		if !strings.Contains(got, line) {
			t.Errorf("checkpoints output lacks %q:\n%s", line, got)
		}
	}
}

func TestParse(t *testing.T) {
	cases := []struct {
		args    []string
		cmd     string
		name    string
		o       options
		wantErr bool
	}{
		{args: []string{"logs", "resnet", "--rank", "2", "-f", "-n", "vision"}, cmd: "logs", name: "resnet",
			o: options{rank: 2, follow: true, namespace: "vision", tail: -1}, wantErr: false},
		{args: []string{"status", "-n", "vision", "resnet", "--kubeconfig", "k"}, cmd: "status", name: "resnet",
			o: options{namespace: "vision", kubeconfig: "k", tail: -1}, wantErr: false},
		{args: []string{"status"}, cmd: "", name: "", o: options{}, wantErr: true},
		{args: []string{"status", "a", "b"}, cmd: "", name: "", o: options{}, wantErr: true},
	}
	for _, tc := range cases {
		cmd, o, name, err := parse(tc.args)
		if (err != nil) != tc.wantErr {
			t.Fatalf("%v: err %v", tc.args, err)
		}
		if err == nil {
			type parsed struct {
				Cmd, Name string
				O         options
			}
			want, got := parsed{Cmd: tc.cmd, Name: tc.name, O: tc.o}, parsed{Cmd: cmd, Name: name, O: o}
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(options{})); diff != "" {
				t.Errorf("%v (-want +got):\n%s", tc.args, diff)
			}
		}
	}
}

// TestMetricsLineSaysWhichEpoch: a finished run settled past the epoch its metrics were read at says so.
func TestMetricsLineSaysWhichEpoch(t *testing.T) {
	m := &mlv1.TrainingMetrics{Loss: ptr.To(0.25), Epoch: 5}
	for epoch, want := range map[int32]string{5: "loss 0.25", 6: "loss 0.25 (read at epoch 5)"} {
		if got := metricsLine(m, epoch); got != want {
			t.Errorf("epoch %d: %q, want %q", epoch, got, want)
		}
	}
}

// TestGoodputLineUnknown: time the workers ran with no progress source is told as such, and why.
func TestGoodputLineUnknown(t *testing.T) {
	noSource := metav1.Condition{Type: mlv1.ConditionProgressReported, Status: "False", Reason: "NoProgressSource"}
	cases := []struct {
		name          string
		g             mlv1.GoodputStatus
		cond          []metav1.Condition
		monitoringOff bool
		want          string
	}{{
		name: "no source at all, still running",
		g: mlv1.GoodputStatus{Percent: "unknown", UnknownSeconds: 241, GPUSeconds: 2520, Category: mlv1.GoodputUnknown,
			BadputSeconds: mlv1.BadputSeconds{Scheduling: 11}},
		cond: []metav1.Condition{noSource},
		want: "unknown goodput: productive time unknown for the 4m1s the workers have run with no progress source (the program serves no " +
			"progress endpoint and prints nothing recognised as progress); 11s scheduling and pulling images; 0.7 GPU-hours held",
	}, {
		name: "part unknown, over",
		g: mlv1.GoodputStatus{Percent: "68%-93%", UnknownSeconds: 100, ProductiveSeconds: 275, GPUSeconds: 3600, ProductiveGPUSeconds: 2480,
			BadputSeconds: mlv1.BadputSeconds{Scheduling: 10, Restart: 15}},
		want: "68%-93% goodput: productive time unknown for the 100s the workers ran with no progress source (the program serves no " +
			"progress endpoint and prints nothing recognised as progress); 15s restarting (1 restart), 10s scheduling and pulling images; " +
			"at least 0.7 of 1.0 GPU-hours productive",
	}, {
		name: "never read",
		g:    mlv1.GoodputStatus{Percent: "unknown", UnknownSeconds: 30, Category: mlv1.GoodputUnknown},
		cond: []metav1.Condition{{Type: mlv1.ConditionProgressReported, Status: "False", Reason: "ScrapeFailed"}},
		want: "unknown goodput: productive time unknown for the 30s the workers have run with no progress source " +
			"(rank 0's progress could never be read)",
	}, {
		name:          "monitoring off",
		g:             mlv1.GoodputStatus{Percent: "unknown", UnknownSeconds: 32, BadputSeconds: mlv1.BadputSeconds{Scheduling: 2}},
		monitoringOff: true,
		want: "unknown goodput: productive time unknown for the 32s the workers ran with no progress source " +
			"(monitoring.enabled is false: progress is not read); 2s scheduling and pulling images",
	}}
	for _, tc := range cases {
		tj := tjtest.NewTJ("ml", "a").Obj()
		*tj.Spec.Monitoring.Enabled = !tc.monitoringOff
		tj.Status = mlv1.TrainingJobStatus{Goodput: &tc.g, Conditions: tc.cond, RestartCount: 1}
		if diff := cmp.Diff(tc.want, goodputLine(tj)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestProgressLineSaysTheSource: progress read from rank 0's output, or from nowhere, says so.
func TestProgressLineSaysTheSource(t *testing.T) {
	cases := []struct {
		name string
		cond metav1.Condition
		want string
	}{
		{name: "the endpoint", cond: metav1.Condition{Type: mlv1.ConditionProgressReported, Status: "True", Reason: "Scraped"},
			want: "40%, epoch 4/10"},
		{name: "the output", cond: metav1.Condition{Type: mlv1.ConditionProgressReported, Status: "True", Reason: "FromOutput",
			Message: "rank 0 serves no progress endpoint; its output shows progress (tqdm)"},
			want: "40%, epoch 4/10, from rank 0's output (tqdm)"},
		{name: "nowhere", cond: metav1.Condition{Type: mlv1.ConditionProgressReported, Status: "False", Reason: "NoProgressSource"},
			want: "40%, epoch 4/10, no progress source: rank 0 serves no figures and prints no line recognised as progress " +
				"(see the ProgressReported condition)"},
	}
	for _, tc := range cases {
		st := mlv1.TrainingJobStatus{Progress: "40%", CurrentEpoch: 4, TotalEpochs: 10, Conditions: []metav1.Condition{tc.cond}}
		if got := progressLine(st, time.Now()); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestRestartWords: the goodput line counts every gang restart and says how many counted against
// backoffLimit when a disruption's did not.
func TestRestartWords(t *testing.T) {
	for _, tc := range []struct {
		name     string
		attempt  int32
		restarts int32
		want     string
	}{
		{name: "every restart counted", attempt: 2, restarts: 2, want: "restarting (2 restarts)"},
		{name: "one restart counted", attempt: 1, restarts: 1, want: "restarting (1 restart)"},
		{name: "a disruption's restart", attempt: 1, restarts: 0, want: "restarting (1 restart, not counted)"},
		{name: "some of them", attempt: 3, restarts: 2, want: "restarting (3 restarts, 2 counted)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := restartWords(mlv1.TrainingJobStatus{Attempt: tc.attempt, RestartCount: tc.restarts})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
