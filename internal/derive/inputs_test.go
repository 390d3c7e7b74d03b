package derive

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/inputs"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// fetcher gives rank 0's pod a fetch-inputs init container in state s.
func (b *podB) fetcher(s corev1.ContainerState) *podB {
	b.p.Status.InitContainerStatuses = append(b.p.Status.InitContainerStatuses,
		corev1.ContainerStatus{Name: names.InputsContainerName, State: s})
	return b
}

// TestInputs: InputsReady, status.inputs and the Initializing message through a fetch, from what rank 0's
// fetch-inputs container shows; a failed fetch fails the run with InputsFailed, and no restart is spent.
func TestInputs(t *testing.T) {
	tj := tjtest.NewTJ("ml", "bert").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Model, tj.Spec.Dataset = "hf://google-bert/bert-base-uncased", "s3://datasets/squad"
	}).Obj()
	tj.Status.State = mlv1.StateInitializing
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	done := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, FinishedAt: t0,
		Message: `[{"name":"model","source":"hf://google-bert/bert-base-uncased","bytes":440000000,"files":4,"fetched":0},` +
			`{"name":"dataset","source":"s3://datasets/squad","bytes":1288490188,"files":2,"fetched":1288490188}]`}}
	failed := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", FinishedAt: t0,
		Message: "fetching dataset s3://datasets/squad: listing s3://datasets/squad/: " +
			"api error AccessDenied: Access Denied, StatusCode: 403"}}
	// Restarted in place (OnFailure): the fetch's last run failed, the container waits to run again.
	crashLooping := pod("0", corev1.PodPending).fetcher(corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 10s"}})
	crashLooping.p.Status.InitContainerStatuses[0].LastTerminationState = failed
	progress := []inputs.Status{{Name: "model", Source: "hf://google-bert/bert-base-uncased", Done: 440000000, Total: 440000000},
		{Name: "dataset", Source: "s3://datasets/squad", Done: 1288490188 / 3, Total: 1288490188}}
	failedAt := metav1.NewTime(t0.Add(-time.Minute))
	for _, tc := range []struct {
		name                     string
		obs                      Observed
		wantState                mlv1.State
		wantReady, wantReason    string
		wantMessage, wantRunning string
		wantInputs               []mlv1.InputStatus
	}{
		{
			name: "fetching, no progress read yet",
			obs: Observed{
				Job:  job(),
				Pods: pods(pod("0", corev1.PodPending).fetcher(running), pod("1", corev1.PodPending)),
			},
			wantState:  mlv1.StateInitializing,
			wantReady:  "False",
			wantReason: ReasonFetching,
			wantMessage: "rank 0 is fetching model hf://google-bert/bert-base-uncased and dataset s3://datasets/squad " +
				"into the input cache",
			wantRunning: "0 of 2 workers running; " +
				"rank 0 is fetching model hf://google-bert/bert-base-uncased and dataset s3://datasets/squad",
			wantInputs: nil,
		},
		{
			name: "fetching, with progress",
			obs: Observed{
				Job:            job(),
				Pods:           pods(pod("0", corev1.PodPending).fetcher(running), pod("1", corev1.PodPending)),
				InputsProgress: progress,
			},
			wantState:  mlv1.StateInitializing,
			wantReady:  "False",
			wantReason: ReasonFetching,
			wantMessage: "rank 0 is fetching model hf://google-bert/bert-base-uncased 419.6 MiB (done), " +
				"dataset s3://datasets/squad 409.6 MiB of 1.2 GiB into the input cache",
			wantRunning: "0 of 2 workers running; rank 0 is fetching model hf://google-bert/bert-base-uncased 419.6 MiB (done), " +
				"dataset s3://datasets/squad 409.6 MiB of 1.2 GiB",
			wantInputs: []mlv1.InputStatus{{Name: "model", Source: "hf://google-bert/bert-base-uncased", Bytes: 440000000, FetchedBytes: 440000000},
				{Name: "dataset", Source: "s3://datasets/squad", Bytes: 1288490188, FetchedBytes: 1288490188 / 3}},
		},
		{
			name:       "fetched",
			obs:        Observed{Job: job(), Pods: pods(pod("0", corev1.PodRunning).fetcher(done), pod("1", corev1.PodRunning))},
			wantState:  mlv1.StateRunning,
			wantReady:  "True",
			wantReason: ReasonFetched,
			wantMessage: "model hf://google-bert/bert-base-uncased: 419.6 MiB in 4 files (0 B read); " +
				"dataset s3://datasets/squad: 1.2 GiB in 2 files (1.2 GiB read)",
			wantRunning: "",
			wantInputs: []mlv1.InputStatus{
				{Name: "model", Source: "hf://google-bert/bert-base-uncased", Bytes: 440000000, Files: 4, ReadyTime: &t0},
				{Name: "dataset", Source: "s3://datasets/squad", Bytes: 1288490188, Files: 2, FetchedBytes: 1288490188, ReadyTime: &t0},
			},
		},
		{
			name: "failed",
			obs: Observed{
				Job: job(batchv1.JobCondition{
					Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: failedAt,
				}),
				Pods: pods(pod("0", corev1.PodFailed).fetcher(failed), pod("1", corev1.PodFailed)),
			},
			wantState:   mlv1.StateFailed,
			wantReady:   "False",
			wantReason:  ReasonInputsFailed,
			wantMessage: failed.Terminated.Message,
			wantRunning: "",
			wantInputs:  nil,
		},
		{
			name:        "failed, restarted in place (OnFailure)",
			obs:         Observed{Job: job(), Pods: pods(crashLooping, pod("1", corev1.PodPending))},
			wantState:   mlv1.StateFailed,
			wantReady:   "False",
			wantReason:  ReasonInputsFailed,
			wantMessage: failed.Terminated.Message,
			wantRunning: "",
			wantInputs:  nil,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := Status(tj, tc.obs, t0)
			if st.State != tc.wantState {
				t.Errorf("state %s, want %s (%+v)", st.State, tc.wantState, st.Conditions)
			}
			c := findCond(st.Conditions, mlv1.ConditionInputsReady)
			if c == nil || string(c.Status) != tc.wantReady || c.Reason != tc.wantReason || c.Message != tc.wantMessage {
				t.Errorf("InputsReady %+v, want %s %s %q", c, tc.wantReady, tc.wantReason, tc.wantMessage)
			}
			if r := findCond(st.Conditions, mlv1.ConditionRunning); tc.wantRunning != "" &&
				(r == nil || r.Message != tc.wantRunning || r.Reason != ReasonFetchingInputs) {
				t.Errorf("Running %+v, want FetchingInputs %q", r, tc.wantRunning)
			}
			if diff := cmp.Diff(tc.wantInputs, st.Inputs); diff != "" {
				t.Errorf("status.inputs (-want +got):\n%s", diff)
			}
			if tc.wantState == mlv1.StateFailed &&
				(st.RestartCount != 0 || findCond(st.Conditions, mlv1.ConditionFailed).Reason != ReasonInputsFailed) {
				t.Errorf("restarts %d, Failed %+v; want no restart, InputsFailed", st.RestartCount, findCond(st.Conditions, mlv1.ConditionFailed))
			}
		})
	}
}

func findCond(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}
