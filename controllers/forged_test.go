package controllers

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestForgedOlderAttemptLabel: a forged rank 0 pod with a made-up Job UID labelled with an attempt the
// operator never writes ("-1", "x", "+0") is no older attempt's: its termination message, naming a
// checkpoint in the run's directory that nobody wrote (epoch 999999999), reaches neither the status nor
// RESUME_FROM. (One labelled "0" on attempt 1 is taken by its shape, as an older attempt's Job is gone;
// what it names must still be in the run's directory.)
func TestForgedOlderAttemptLabel(t *testing.T) {
	const own = "s3://b/ml/a/uid-1/checkpoint-epoch-"
	for _, label := range []string{"-1", "x", "+0"} {
		for _, attempt := range []int32{0, 1} {
			t.Run(label+"@"+strconv.Itoa(int(attempt)), func(t *testing.T) {
				evil := own + "999999999"
				real := rank0Pod("a-worker-0-0", strconv.Itoa(int(attempt)), "job-uid")
				forged := withFinalReport(rank0Pod("zz-not-yours", label, "made-up"),
					`{"latest":"`+evil+`","latestEpoch":999999999,"count":1,"time":"2026-01-01T00:00:00Z"}`)
				s := newRank0Scene(t, s3Storage, attempt, own+"4",
					agentapi.Status{Latest: own + "5", LatestEpoch: 5, Count: 2, Time: t0.Time}, real, forged)
				s.reconcile(t, 2)
				if _, resumeFrom := s.resumeFrom(t); resumeFrom == evil {
					t.Errorf("a pod a made-up Job 'controls', labelled attempt %q at attempt %d, moved RESUME_FROM to %q (acked to the real agent: %v)",
						label, attempt, evil, s.agent.acked)
				}
				// The genuine rank 0 starts and reports epoch 5: the status and RESUME_FROM move to it.
				_ = s.c.Get(context.Background(), client.ObjectKeyFromObject(real), real)
				real.Status.Phase, real.Status.PodIP = corev1.PodRunning, "10.0.0.1"
				_ = s.c.Status().Update(context.Background(), real)
				s.r.Clock = clocktesting.NewFakeClock(t0.Add(3600e9))
				s.reconcile(t, 2)
				latest, resumeFrom := s.resumeFrom(t)
				t.Logf("after the real agent reports: status %q RESUME_FROM %q acked %v", latest, resumeFrom, s.agent.acked)
				if latest != own+"5" || resumeFrom != own+"5" {
					t.Errorf("after the real agent reports epoch 5: status %q, RESUME_FROM %q; want both %q", latest, resumeFrom, own+"5")
				}
			})
		}
	}
}

// TestTokenSecretSquatted: a Secret "<name>-tokens" made before the job by someone else (tokens of their
// choosing, no owner) is not handed to the workers: no Job is created and the status says why; once it is
// deleted, the job starts with its own.
func TestTokenSecretSquatted(t *testing.T) {
	tj := tjtest.NewTJ("ml", "tok").Obj()
	tj.UID = "uid-tok"
	squat := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: names.TokenSecretName(tj)},
		Immutable: ptr.To(true),
		Data:      map[string][]byte{names.ControlTokenKey: []byte("squatter-control"), names.AgentTokenKey: []byte("squatter-agent")}}
	r := newReconciler(tj, squat)
	r.Options.AgentTokenKey = builders.SecretKey("0123456789abcdef0123456789abcdef")
	nn := types.NamespacedName{Namespace: "ml", Name: "tok"}
	ctx := context.Background()
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: nn}); err == nil {
		t.Fatal("no error with a squatted token Secret")
	}
	if err := r.Get(ctx, types.NamespacedName{Namespace: "ml", Name: names.JobName(tj)}, &batchv1.Job{}); err == nil {
		t.Error("the Job was created beside a squatted token Secret")
	}
	got := &mlv1.TrainingJob{}
	if err := r.Get(ctx, nn, got); err != nil {
		t.Fatal(err)
	}
	msg := derive.ConditionMessage(got.Status, mlv1.ConditionCreated)
	if !strings.Contains(msg, names.TokenSecretName(tj)+", which would hold") {
		t.Errorf("the Created condition says %q, want the squatted Secret named", msg)
	}
	if err := r.Delete(ctx, squat); err != nil {
		t.Fatal(err)
	}
	reconcileN(t, r, nn, 2)
	s := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(squat), s); err != nil || !metav1.IsControlledBy(s, got) {
		t.Errorf("after the squat is deleted: the job's own token Secret %v (%v)", s.OwnerReferences, err)
	}
	if err := r.Get(ctx, types.NamespacedName{Namespace: "ml", Name: names.JobName(tj)}, &batchv1.Job{}); err != nil {
		t.Errorf("after the squat is deleted: no Job (%v)", err)
	}
}

// TestKeptPodVerdictWithSidecars: a template with 8 sidecars whose names sort before "trainer" (the
// kubelet lists statuses by name). keptStates takes "failed" by ExitCode != 0, unlike the verdict
// (failedEnd: not 137 RestartingAllContainers), and keeps 8: the trainer's own exit can be dropped.
func TestKeptPodVerdictWithSidecars(t *testing.T) {
	tj := tjtest.NewTJ("ml", "g").Workers(2).BackoffLimit(3, mlv1.RestartGang).Obj()
	tj.Status.State = mlv1.StateRunning
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: names.JobName(tj), UID: "job-uid"},
		Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue,
			Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: metav1.NewTime(time.Unix(1, 0))}}}}
	term := func(code int32, reason string, at int64) *corev1.ContainerStateTerminated {
		return &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: "m",
			StartedAt: metav1.NewTime(time.Unix(1000, 0)), FinishedAt: metav1.NewTime(time.Unix(at, 0))}
	}
	for _, tc := range []struct {
		name    string
		sidecar func(i int) corev1.ContainerStatus
		trainer corev1.ContainerStatus
		forced  bool
	}{
		{name: "sidecars exit 143 after the trainer's 1", trainer: corev1.ContainerStatus{Name: names.ContainerName,
			State: corev1.ContainerState{Terminated: term(1, "Error", 2000)}},
			sidecar: func(i int) corev1.ContainerStatus {
				return corev1.ContainerStatus{Name: fmt.Sprintf("log-%d", i), State: corev1.ContainerState{Terminated: term(143, "Error", 2005)}}
			}},
		{name: "sidecars' last end the in-place restart's 137, trainer's 1", trainer: corev1.ContainerStatus{Name: names.ContainerName,
			State: corev1.ContainerState{Terminated: term(1, "Error", 2000)}},
			sidecar: func(i int) corev1.ContainerStatus {
				return corev1.ContainerStatus{Name: fmt.Sprintf("log-%d", i), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
					LastTerminationState: corev1.ContainerState{Terminated: term(137, derive.ReasonRestartingAllContainers, 1500)}}
			}},
		{name: "forced delete: 8 running sidecars, trainer ended 0", forced: true, trainer: corev1.ContainerStatus{Name: names.ContainerName,
			State: corev1.ContainerState{Terminated: term(0, "Completed", 2000)}},
			sidecar: func(i int) corev1.ContainerStatus {
				return corev1.ContainerStatus{Name: fmt.Sprintf("log-%d", i), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := workerPod("w-1", "0", 0)
			p.Labels[names.RankLabel] = "1"
			p.Status.Phase = corev1.PodFailed
			p.Status.ContainerStatuses = nil
			for i := range 8 {
				p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, tc.sidecar(i))
			}
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, tc.trainer)
			if tc.forced {
				p.Status.Phase = corev1.PodRunning
				forceDeleted(p)
			}
			kept := keptPod(p)
			verdict := func(p corev1.Pod) mlv1.TrainingJobStatus {
				obs := derive.Observed{Job: job, Gone: []corev1.Pod{p}}
				if derive.ForceDeleted(&p) {
					obs.Gone, obs.ForceDeleted = nil, []corev1.Pod{p}
				}
				return derive.Status(tj, obs, metav1.NewTime(time.Unix(100, 0)))
			}
			want, got := verdict(*p), verdict(kept)
			t.Logf("full: %s %s %q", want.State, want.FailureReason, want.LastFailure)
			t.Logf("kept: %s %s %q", got.State, got.FailureReason, got.LastFailure)
			if want.State != got.State || want.FailureReason != got.FailureReason || want.LastFailure != got.LastFailure {
				t.Errorf("the verdict on the kept copy differs from the verdict on the pod")
			}
		})
	}
}

// TestOwnGraceKeptAfterASpecEdit: spec.checkpoint is mutable while the job runs. The older attempt's
// genuine pods were built with checkpoint.preemptionGraceSeconds 120 (checkpoint on SIGTERM); the spec
// then lowers it (or turns onPreemption off). stopPods deletes them with the current spec's grace
// (workerGrace), re-deleting even those the garbage collector already stops with their own 120 s:
// the checkpoint-on-SIGTERM window is cut. Before, with grace nil, they kept their own.
func TestOwnGraceKeptAfterASpecEdit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(tj *mlv1.TrainingJob)
		deleting bool
	}{
		{name: "onPreemption turned off", edit: func(tj *mlv1.TrainingJob) { tj.Spec.Checkpoint.OnPreemption = false }},
		{name: "onPreemption turned off, GC already deleting with 120", deleting: true,
			edit: func(tj *mlv1.TrainingJob) { tj.Spec.Checkpoint.OnPreemption = false }},
		{name: "grace lowered to 5, GC already deleting with 120", deleting: true,
			edit: func(tj *mlv1.TrainingJob) { tj.Spec.Checkpoint.PreemptionGraceSeconds = ptr.To[int32](5) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "n").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "b"}).Obj()
			tj.Spec.Checkpoint.OnPreemption, tj.Spec.Checkpoint.PreemptionGraceSeconds = true, ptr.To[int32](120)
			built := builders.TerminationGrace(tj) // the older attempt's pods' own grace
			tc.edit(tj)
			tj.Status.Attempt, tj.Status.LastFailure = 1, "rank 1 exited with code 137"
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "w-0", UID: "u0",
				Labels: map[string]string{names.NameLabel: tj.Name, names.AttemptLabel: "0"}},
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: built}}
			if tc.deleting {
				now := metav1.Now()
				pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds, pod.Finalizers = &now, built, []string{"example.com/keep"}
			}
			var got []int64
			r := newReconciler(tj)
			r.Client = interceptor.NewClient(fake.NewClientBuilder().WithScheme(r.Scheme).WithObjects(pod).Build(), interceptor.Funcs{
				Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
					o := &client.DeleteOptions{}
					o.ApplyOptions(opts)
					if o.GracePeriodSeconds != nil {
						got = append(got, *o.GracePeriodSeconds)
					}
					return nil
				}})
			if err := r.stopPods(context.Background(), tj, []corev1.Pod{*pod}); err != nil {
				t.Fatal(err)
			}
			t.Logf("pod's own grace %d; deletes with %v", *built, got)
			for _, g := range got {
				if g < *built {
					t.Errorf("a genuine older worker (own grace %d s, checkpoints on SIGTERM) deleted with %d s", *built, g)
				}
			}
		})
	}
}

// TestForgedReportNamesAnotherJobsDir: mounted storage shared by two jobs (one PVC). Job other/b
// writes, inside its own run directory, ml/a/uid-1/checkpoint-epoch-999 (its pickle). A forged rank 0 of
// ml/a labelled attempt 0 on attempt 1 (taken by its shape for an older attempt's) names that path as its
// final report: the path does not begin at the mount (InRun), so ml/a's RESUME_FROM stays its own.
func TestForgedReportNamesAnotherJobsDir(t *testing.T) {
	evil := "/checkpoints/other/b/uid-9/ml/a/uid-1/checkpoint-epoch-999"
	forged := withFinalReport(rank0Pod("zz-not-yours", "0", "made-up"),
		`{"latest":"`+evil+`","latestEpoch":999,"count":1,"time":"2026-01-01T00:00:00Z"}`)
	s := newRank0Scene(t, &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "shared"}, 1,
		"/checkpoints/ml/a/uid-1/checkpoint-epoch-4", agentapi.Status{}, forged)
	s.reconcile(t, 2)
	_, resumeFrom := s.resumeFrom(t)
	t.Logf("run root %s; RESUME_FROM %q", builders.CheckpointRoot(s.tj), resumeFrom)
	if resumeFrom == evil {
		t.Errorf("RESUME_FROM names another job's file: %q", evil)
	}
}
