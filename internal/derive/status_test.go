package derive

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

var t0 = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

type podB struct{ p corev1.Pod }

func pod(rank string, phase corev1.PodPhase) *podB {
	return &podB{p: corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "w-" + rank, Labels: map[string]string{names.RankLabel: rank}},
		Status:     corev1.PodStatus{Phase: phase},
	}}
}

func (b *podB) exited(code int32, reason string, last bool) *podB {
	t := &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}
	cs := corev1.ContainerStatus{Name: "trainer"}
	if last {
		cs.LastTerminationState.Terminated, cs.RestartCount = t, 1
	} else {
		cs.State.Terminated = t
	}
	b.p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	return b
}

// message sets the termination message of the container's (last) run.
func (b *podB) message(m string) *podB {
	cs := &b.p.Status.ContainerStatuses[0]
	if t := cs.State.Terminated; t != nil {
		t.Message = m
	} else {
		cs.LastTerminationState.Terminated.Message = m
	}
	return b
}

// sidecarCrashing adds a checkpoint-agent sidecar waiting in CrashLoopBackOff after exiting 1.
func (b *podB) sidecarCrashing() *podB {
	b.p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "checkpoint-agent",
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 10s"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}}
	return b
}

// agentExited adds a checkpoint-agent sidecar that exited with code at second sec.
func (b *podB) agentExited(code int32, sec int) *podB {
	b.p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "checkpoint-agent", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{
			ExitCode: code, Reason: "Error", FinishedAt: metav1.NewTime(t0.Add(time.Duration(sec) * time.Second)),
		}}}}
	return b
}

// at sets the second the container's (last) run finished.
func (b *podB) at(sec int) *podB {
	cs := &b.p.Status.ContainerStatuses[0]
	t := cs.State.Terminated
	if t == nil {
		t = cs.LastTerminationState.Terminated
	}
	t.FinishedAt = metav1.NewTime(t0.Add(time.Duration(sec) * time.Second))
	return b
}

func (b *podB) waiting(reason, msg string) *podB {
	if len(b.p.Status.ContainerStatuses) == 0 {
		b.p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "trainer"}}
	}
	b.p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
	return b
}

func (b *podB) unschedulable(msg string) *podB {
	b.p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg},
	}
	return b
}

func pods(bs ...*podB) []corev1.Pod {
	var out []corev1.Pod
	for _, b := range bs {
		out = append(out, b.p)
	}
	return out
}

func job(conds ...batchv1.JobCondition) *batchv1.Job {
	start := metav1.NewTime(t0.Add(-time.Hour))
	return &batchv1.Job{Status: batchv1.JobStatus{Conditions: conds, StartTime: &start, Active: 2}}
}

func suspendedJob() *batchv1.Job {
	j := job()
	j.Spec.Suspend, j.Status.Active = ptr.To(true), 0
	return j
}

func jobCond(t batchv1.JobConditionType, reason, msg string) batchv1.JobCondition {
	return batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: msg, LastTransitionTime: t0}
}

func TestDeriveStatus(t *testing.T) {
	base := tjtest.NewTJ("ml", "mnist")
	running := base.Obj()
	running.Status.State = mlv1.StateRunning
	// Failures under restartPolicy OnFailure: the Job restarted the workers in place until its backoffLimit.
	inPlace := tjtest.NewTJ("ml", "mnist").BackoffLimit(3, mlv1.RestartOnFailure).Obj()
	inPlace.Status.State = mlv1.StateRunning
	failed := base.Obj()
	failed.Status = mlv1.TrainingJobStatus{State: mlv1.StateFailed, FailureReason: "boom", Conditions: []metav1.Condition{
		{Type: mlv1.ConditionFailed, Status: metav1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "boom"},
	}}
	cases := []struct {
		name        string
		tj          *mlv1.TrainingJob
		obs         Observed
		wantState   mlv1.State
		wantReason  string
		wantFailure string
	}{
		{name: "no job yet", tj: base.Obj(), obs: Observed{}, wantState: mlv1.StatePending, wantReason: "Accepted", wantFailure: ""},
		{
			name:        "job rejected by the API server",
			tj:          base.Obj(),
			obs:         Observed{CreateRejected: "quota exceeded"},
			wantState:   mlv1.StatePending,
			wantReason:  "CreateRejected",
			wantFailure: "",
		},
		{
			name:        "suspended before start",
			tj:          tjtest.NewTJ("ml", "s").Suspend(true).Obj(),
			obs:         Observed{},
			wantState:   mlv1.StateSuspended,
			wantReason:  "Suspended",
			wantFailure: "",
		},
		{
			name:        "job without pods",
			tj:          base.Obj(),
			obs:         Observed{Job: job()},
			wantState:   mlv1.StateInitializing,
			wantReason:  "WorkersStarting",
			wantFailure: "",
		},
		{
			name:        "one of two running",
			tj:          base.Obj(),
			obs:         Observed{Job: job(), Pods: pods(pod("0", corev1.PodRunning), pod("1", corev1.PodPending))},
			wantState:   mlv1.StateInitializing,
			wantReason:  "WorkersStarting",
			wantFailure: "",
		},
		{
			name:        "unschedulable",
			tj:          base.Obj(),
			obs:         Observed{Job: job(), Pods: pods(pod("0", corev1.PodPending).unschedulable("0/3 nodes have nvidia.com/gpu"))},
			wantState:   mlv1.StateInitializing,
			wantReason:  "Unschedulable",
			wantFailure: "",
		},
		{
			name: "missing secret",
			tj:   base.Obj(),
			obs: Observed{
				Job:  job(),
				Pods: pods(pod("0", corev1.PodPending).waiting("CreateContainerConfigError", `secret "hf" not found`)),
			},
			wantState:   mlv1.StateInitializing,
			wantReason:  "CreateContainerConfigError",
			wantFailure: "",
		},
		{
			name:        "all running",
			tj:          base.Obj(),
			obs:         Observed{Job: job(), Pods: pods(pod("0", corev1.PodRunning), pod("1", corev1.PodRunning))},
			wantState:   mlv1.StateRunning,
			wantReason:  "AllWorkersRunning",
			wantFailure: "",
		},
		{
			name: "crash loop while running names the exit code",
			tj:   running,
			obs: Observed{Job: job(), Pods: pods(pod("0", corev1.PodRunning),
				pod("1", corev1.PodRunning).exited(3, "Error", true).waiting("CrashLoopBackOff", "back-off 20s restarting failed container"))},
			wantState:   mlv1.StateRunning,
			wantReason:  "CrashLoopBackOff",
			wantFailure: "",
		},
		{
			name:        "ranks finishing",
			tj:          running,
			obs:         Observed{Job: job(), Pods: pods(pod("0", corev1.PodSucceeded), pod("1", corev1.PodRunning))},
			wantState:   mlv1.StateRunning,
			wantReason:  "WorkersFinishing",
			wantFailure: "",
		},
		{
			name:        "every rank finished, job not complete yet",
			tj:          running,
			obs:         Observed{Job: job(), Pods: pods(pod("0", corev1.PodSucceeded), pod("1", corev1.PodSucceeded))},
			wantState:   mlv1.StateRunning,
			wantReason:  "WorkersFinishing",
			wantFailure: "",
		},
		{
			name:        "a crashing sidecar is named",
			tj:          running,
			obs:         Observed{Job: job(), Pods: pods(pod("0", corev1.PodRunning).sidecarCrashing(), pod("1", corev1.PodRunning))},
			wantState:   mlv1.StateRunning,
			wantReason:  "CrashLoopBackOff",
			wantFailure: "",
		},
		{
			name:        "rank restarting stays running",
			tj:          running,
			obs:         Observed{Job: job(), Pods: pods(pod("0", corev1.PodRunning), pod("1", corev1.PodPending))},
			wantState:   mlv1.StateRunning,
			wantReason:  "WorkersRestarting",
			wantFailure: "",
		},
		{
			name:        "job complete",
			tj:          running,
			obs:         Observed{Job: job(jobCond(batchv1.JobComplete, "CompletionsReached", ""))},
			wantState:   mlv1.StateCompleted,
			wantReason:  "Succeeded",
			wantFailure: "",
		},
		{
			name:        "pytorch's default image runs the runner",
			tj:          tjtest.NewTJ("ml", "mnist").NoCommand().Obj(),
			obs:         Observed{Job: job(jobCond(batchv1.JobComplete, "CompletionsReached", ""))},
			wantState:   mlv1.StateCompleted,
			wantReason:  "Succeeded",
			wantFailure: "",
		},
		{
			name:        "another default image without a command trained nothing",
			tj:          tjtest.NewTJ("ml", "mnist").NoCommand().Framework(mlv1.FrameworkJAX).Obj(),
			obs:         Observed{Job: job(jobCond(batchv1.JobComplete, "CompletionsReached", ""))},
			wantState:   mlv1.StateFailed,
			wantReason:  ReasonNoTrainingProgram,
			wantFailure: ReasonNoTrainingProgram + ": " + NoTrainingProgramMessage,
		},
		{
			name: "default image with args runs them",
			tj: tjtest.NewTJ("ml", "mnist").NoCommand().With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Args = []string{"python3", "t.py"}
			}).Obj(),
			obs:         Observed{Job: job(jobCond(batchv1.JobComplete, "CompletionsReached", ""))},
			wantState:   mlv1.StateCompleted,
			wantReason:  "Succeeded",
			wantFailure: "",
		},
		{
			name: "job failed names the rank",
			tj:   inPlace,
			obs: Observed{
				Job:  job(jobCond(batchv1.JobFailed, "BackoffLimitExceeded", "Job has reached the specified backoff limit")),
				Pods: pods(pod("1", corev1.PodFailed).exited(137, "OOMKilled", false), pod("0", corev1.PodFailed).exited(1, "Error", true)),
			},
			wantState:  mlv1.StateFailed,
			wantReason: "BackoffLimitExceeded",
			wantFailure: "BackoffLimitExceeded: Job has reached the specified backoff limit; " +
				"rank 1 (pod w-1, container trainer) exited with code 137 (OOMKilled)",
		},
		{
			name: "job failed names the first rank to fail",
			tj:   inPlace,
			obs: Observed{
				Job: job(jobCond(batchv1.JobFailed, "BackoffLimitExceeded", "")),
				Pods: pods(pod("0", corev1.PodFailed).exited(1, "Error", false).at(2), pod("1", corev1.PodFailed).exited(2, "Error", false).at(1),
					pod("2", corev1.PodFailed).exited(137, "Error", false).at(3)),
			},
			wantState:   mlv1.StateFailed,
			wantReason:  "BackoffLimitExceeded",
			wantFailure: "BackoffLimitExceeded; rank 1 (pod w-1, container trainer) exited with code 2",
		},
		{
			name: "a stopped rank (SIGTERM) is not blamed",
			tj:   inPlace,
			obs: Observed{
				Job:  job(jobCond(batchv1.JobFailed, "BackoffLimitExceeded", "")),
				Pods: pods(pod("0", corev1.PodFailed).exited(143, "Error", false).at(1), pod("1", corev1.PodFailed).exited(1, "Error", false).at(1)),
			},
			wantState:   mlv1.StateFailed,
			wantReason:  "BackoffLimitExceeded",
			wantFailure: "BackoffLimitExceeded; rank 1 (pod w-1, container trainer) exited with code 1",
		},
		{
			name: "the end of the crashed rank's log",
			tj:   inPlace,
			obs: Observed{
				Job: job(jobCond(batchv1.JobFailed, "BackoffLimitExceeded", "")),
				Pods: pods(pod("0", corev1.PodFailed).exited(1, "Error", false).message(
					"epoch 1/5 loss=0.6\nTraceback (most recent call last):\n  File \"train.py\", line 9\n    save(s3)\nPermissionError: AccessDenied\n")),
			},
			wantState:  mlv1.StateFailed,
			wantReason: "BackoffLimitExceeded",
			wantFailure: "BackoffLimitExceeded; rank 0 (pod w-0, container trainer) exited with code 1:   " +
				"File \"train.py\", line 9\n    save(s3)\nPermissionError: AccessDenied",
		},
		{
			name:        "suspended while running",
			tj:          tjtest.NewTJ("ml", "s").Suspend(true).Obj(),
			obs:         Observed{Job: job()},
			wantState:   mlv1.StateSuspended,
			wantReason:  "Suspended",
			wantFailure: "",
		},
		{
			name:        "failed is final",
			tj:          failed,
			obs:         Observed{},
			wantState:   mlv1.StateFailed,
			wantReason:  "BackoffLimitExceeded",
			wantFailure: "boom",
		},
		{
			name: "waiting for kueue",
			tj: tjtest.NewTJ("ml", "q").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Scheduling = &mlv1.SchedulingSpec{QueueName: "team-a"}
			}).Obj(),
			obs:         Observed{Queue: &Queue{Name: "team-a", Workload: "w"}},
			wantState:   mlv1.StateSuspended,
			wantReason:  "Queued",
			wantFailure: "",
		},
		{
			name: "evicted by kueue, workers stopping",
			tj:   tjtest.NewTJ("ml", "q").Obj(),
			obs: Observed{Job: suspendedJob(), Queue: &Queue{Name: "team-a",
				Evicted: &metav1.Condition{Reason: "Preempted"}, Preempted: &metav1.Condition{Reason: "InClusterQueue"}}},
			wantState:   mlv1.StateSuspended,
			wantReason:  "Preempted",
			wantFailure: "",
		},
		{
			name:        "admitted by kueue",
			tj:          tjtest.NewTJ("ml", "q").Obj(),
			obs:         Observed{Job: job(), Queue: &Queue{Name: "team-a", Admission: &builders.Admission{}}},
			wantState:   mlv1.StateInitializing,
			wantReason:  "WorkersStarting",
			wantFailure: "",
		},
		{
			name:        "job suspended by someone else",
			tj:          tjtest.NewTJ("ml", "q").Obj(),
			obs:         Observed{Job: suspendedJob()},
			wantState:   mlv1.StateSuspended,
			wantReason:  "JobSuspended",
			wantFailure: "",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := Status(tc.tj, tc.obs, t0)
			running := ConditionReason(st, mlv1.ConditionRunning)
			got := []any{st.State, running, st.FailureReason}
			want := []any{tc.wantState, tc.wantReason, tc.wantFailure}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("state, Running reason, failureReason (-want +got):\n%s", diff)
			}
			again := tc.tj.DeepCopy()
			again.Status = st
			if diff := cmp.Diff(st, Status(again, tc.obs, metav1.NewTime(t0.Add(time.Minute)))); diff != "" {
				t.Errorf("status is not stable on a second reconcile (-first +second):\n%s", diff)
			}
		})
	}
}

func TestDeriveStatusTimes(t *testing.T) {
	tj := tjtest.NewTJ("ml", "mnist").Epochs(12).Obj()
	j := job(jobCond(batchv1.JobComplete, "CompletionsReached", ""))
	done := metav1.NewTime(t0.Add(-15 * time.Minute))
	j.Status.CompletionTime = &done
	j.Status.Failed, j.Status.Succeeded = 1, 2
	st := Status(tj, Observed{Job: j, Pods: pods(pod("0", corev1.PodSucceeded).exited(0, "Completed", true))}, t0)
	got := []any{st.StartTime.Time, st.CompletionTime.Time, st.Duration, st.Workers.Succeeded, st.Workers.Failed}
	want := []any{t0.Add(-time.Hour), done.Time, "45m0s", int32(2), int32(1)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("start, completion, duration, succeeded, failed (-want +got):\n%s", diff)
	}
}

// TestWorkerCountsComeFromThePods: the counts are read from the pods, as the state is, so the status written
// with a state change carries the counts of that moment; the Job's active and ready counts lag the pods
// (its controller writes them later) and would make a second write.
func TestWorkerCountsComeFromThePods(t *testing.T) {
	ready := func(b *podB) *podB {
		b.p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		return b
	}
	terminating := func(b *podB) *podB {
		b.p.DeletionTimestamp = &t0
		return b
	}
	created := func(b *podB, sec int) *podB {
		b.p.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration(sec) * time.Second))
		return b
	}
	noStart := func(j *batchv1.Job) *batchv1.Job { j.Status.StartTime, j.Status.Active = nil, 0; return j }
	tests := []struct {
		name      string
		job       *batchv1.Job
		pods      []*podB
		want      mlv1.WorkerCounts
		wantStart *metav1.Time
	}{{
		name: "pods created, the Job's counts and start not written yet",
		job:  noStart(job()),
		pods: []*podB{created(pod("0", corev1.PodPending), 2), created(pod("1", ""), 1)},
		want: mlv1.WorkerCounts{Active: 2, Pending: 2}, wantStart: ptr.To(metav1.NewTime(t0.Add(time.Second))),
	}, {
		name: "running, one ready, the Job's ready count behind",
		job:  job(),
		pods: []*podB{ready(pod("0", corev1.PodRunning)), pod("1", corev1.PodRunning)},
		want: mlv1.WorkerCounts{Active: 2, Ready: 1}, wantStart: ptr.To(metav1.NewTime(t0.Add(-time.Hour))),
	}, {
		name: "one finished, one being deleted",
		job:  job(),
		pods: []*podB{pod("0", corev1.PodSucceeded), terminating(ready(pod("1", corev1.PodRunning)))},
		want: mlv1.WorkerCounts{Succeeded: 1}, wantStart: ptr.To(metav1.NewTime(t0.Add(-time.Hour))),
	}, {
		name: "no start from pods being deleted or older than the Job (a job of the same name, deleted)",
		job: func() *batchv1.Job {
			j := noStart(job())
			j.CreationTimestamp = t0
			return j
		}(),
		pods: []*podB{created(pod("0", corev1.PodRunning), -3600), terminating(created(pod("1", corev1.PodRunning), 5))},
		want: mlv1.WorkerCounts{Active: 1},
	}, {
		name: "the Job counts pods gone since they finished",
		job:  func() *batchv1.Job { j := job(); j.Status.Succeeded = 3; return j }(),
		pods: []*podB{pod("0", corev1.PodSucceeded), ready(pod("1", corev1.PodRunning))},
		want: mlv1.WorkerCounts{Active: 1, Ready: 1, Succeeded: 3}, wantStart: ptr.To(metav1.NewTime(t0.Add(-time.Hour))),
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "mnist").Obj()
			var ps []corev1.Pod
			for _, b := range tc.pods {
				ps = append(ps, b.p)
			}
			st := Status(tj, Observed{Job: tc.job, Pods: ps}, t0)
			if diff := cmp.Diff(tc.want, st.Workers); diff != "" {
				t.Errorf("workers (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantStart, st.StartTime); diff != "" {
				t.Errorf("startTime (-want +got):\n%s", diff)
			}
		})
	}
}

// BenchmarkDeriveStatus derives the status of a 1,024-worker job from its pods, as every reconcile does.
func BenchmarkDeriveStatus(b *testing.B) {
	tj := tjtest.NewTJ("ml", "big").Workers(1024).Obj()
	var bs []*podB
	for i := 0; i < 1024; i++ {
		bs = append(bs, pod(fmt.Sprint(i), corev1.PodRunning))
	}
	obs := Observed{Job: job(), Pods: pods(bs...)}
	b.ReportAllocs()
	for b.Loop() {
		_ = Status(tj, obs, t0)
	}
}

func TestCrashLoopMessage(t *testing.T) {
	tj := tjtest.NewTJ("ml", "mnist").Obj()
	tj.Status.State = mlv1.StateRunning
	obs := Observed{Job: job(), Pods: pods(pod("0", corev1.PodRunning),
		pod("1", corev1.PodRunning).exited(3, "Error", true).waiting("CrashLoopBackOff", "back-off 20s"))}
	got := ConditionMessage(Status(tj, obs, t0), mlv1.ConditionRunning)
	want := "2 of 2 workers running; pod w-1: back-off 20s; rank 1 (pod w-1, container trainer) exited with code 3"
	if got != want {
		t.Errorf("Running message = %q, want %q", got, want)
	}
}

func TestSignificant(t *testing.T) {
	base := mlv1.TrainingJobStatus{State: mlv1.StateRunning, Conditions: []metav1.Condition{
		{
			Type: mlv1.ConditionRunning, Status: metav1.ConditionTrue, Reason: "AllWorkersRunning", Message: "2 of 2 workers running",
			LastTransitionTime: t0,
		},
	}}
	for _, tc := range []struct {
		name   string
		change func(*mlv1.TrainingJobStatus)
		want   bool
	}{
		{name: "nothing", change: func(*mlv1.TrainingJobStatus) {}, want: false},
		{name: "worker counts", change: func(s *mlv1.TrainingJobStatus) { s.Workers.Ready = 2 }, want: false},
		{name: "start time", change: func(s *mlv1.TrainingJobStatus) { s.StartTime = &t0 }, want: false},
		{
			name: "a reason and message under the same status",
			change: func(s *mlv1.TrainingJobStatus) {
				s.Conditions[0].Reason, s.Conditions[0].Message = "WorkersFinishing", "1 of 2 workers running, 1 finished"
			},
			want: false,
		},
		{name: "the state", change: func(s *mlv1.TrainingJobStatus) { s.State = mlv1.StateCompleted }, want: true},
		{name: "a condition's status", change: func(s *mlv1.TrainingJobStatus) { s.Conditions[0].Status = metav1.ConditionFalse }, want: true},
		{
			name: "a new condition",
			change: func(s *mlv1.TrainingJobStatus) {
				s.Conditions = append(s.Conditions, metav1.Condition{Type: mlv1.ConditionRestarting, Status: metav1.ConditionTrue})
			},
			want: true,
		},
		{name: "the attempt", change: func(s *mlv1.TrainingJobStatus) { s.Attempt = 1 }, want: true},
		{name: "the completion time", change: func(s *mlv1.TrainingJobStatus) { s.CompletionTime = &t0 }, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := *base.DeepCopy()
			tc.change(&st)
			if got := Significant(base, st); got != tc.want {
				t.Errorf("Significant = %t, want %t", got, tc.want)
			}
		})
	}
}

// TestWaitingReason: a container waiting because its pod restarts in place is no trouble; one waiting in a
// crash loop is.
func TestWaitingReason(t *testing.T) {
	waiting := func(reason string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a-worker-0"}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "trainer",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "m"}}}}
		return p
	}
	for _, tt := range []struct {
		name, reason, want string
	}{
		{name: "restarting in place", reason: "RestartingAllContainers", want: ""},
		{name: "crash loop", reason: "CrashLoopBackOff", want: "CrashLoopBackOff"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := waitingReason([]corev1.Pod{waiting(tt.reason)}); got != tt.want {
				t.Errorf("reason %q, want %q", got, tt.want)
			}
		})
	}
}

// TestFirstExitAfterARestartInPlace: the ends a restart in place gave every container (137,
// RestartingAllContainers, no times) are no cause: the next failure is the trainer's own exit.
func TestFirstExitAfterARestartInPlace(t *testing.T) {
	restarted := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: ReasonRestartingAllContainers}}
	pod := func(rank string, state corev1.ContainerState) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a-worker-" + rank, Labels: map[string]string{names.RankLabel: rank}}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: names.ContainerName, State: state, LastTerminationState: restarted}}
		return p
	}
	failed := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error",
		FinishedAt: metav1.Now()}}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	e := firstExit([]corev1.Pod{pod("0", running), pod("1", failed)})
	if e == nil || e.t.ExitCode != 3 || e.pod.Name != "a-worker-1" {
		t.Fatalf("first exit = %+v, want rank 1's code 3", e)
	}
}
