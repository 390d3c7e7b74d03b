package controllers

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestDetailsAreCoalesced: a change of details alone (worker counts, a reason of normal progress) waits
// DetailInterval from when it was first seen (verdictWait once every worker has ended), and a state change
// within that time carries it: a 2-worker job whose workers start together is written three times,
// Initializing, Running, Completed, however long Kubernetes' Job controller takes to conclude.
func TestDetailsAreCoalesced(t *testing.T) {
	ctx := context.Background()
	tj := tjtest.NewTJ("ml", "w").Workers(2).Obj()
	tj.UID = "uid-w"
	r, clock, key := detailsReconciler(tj)
	writes := 0
	step := func(after time.Duration) (reconcile.Result, mlv1.TrainingJobStatus) {
		clock.SetTime(clock.Now().Add(after))
		before := &mlv1.TrainingJob{}
		if err := r.Get(ctx, key, before); err != nil {
			t.Fatal(err)
		}
		res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		if err != nil {
			t.Fatal(err)
		}
		got := &mlv1.TrainingJob{}
		if err := r.Get(ctx, key, got); err != nil {
			t.Fatal(err)
		}
		if got.ResourceVersion != before.ResourceVersion {
			writes++
		}
		return res, got.Status
	}
	step(0) // Initializing: the first write
	pods := make([]*corev1.Pod, 2)
	for i := range pods {
		pods[i] = ofTheJob(t, r, tj, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: fmt.Sprintf("w-worker-%d", i),
			Labels: names.AttemptLabels(tj)}, Status: corev1.PodStatus{Phase: corev1.PodPending}})
		if err := r.Create(ctx, pods[i]); err != nil {
			t.Fatal(err)
		}
	}
	setPhase := func(phase corev1.PodPhase, ps ...*corev1.Pod) {
		for _, p := range ps {
			p.Status.Phase = phase
			if err := r.Status().Update(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	type seen struct {
		State   mlv1.State
		Workers mlv1.WorkerCounts
		Requeue time.Duration
	}
	look := func(after time.Duration) seen {
		res, st := step(after)
		return seen{State: st.State, Workers: st.Workers, Requeue: res.RequeueAfter}
	}
	steps := []struct {
		name   string
		change func()
		after  time.Duration
		want   seen
	}{{
		name: "pods created: counts wait", after: time.Second,
		want: seen{State: mlv1.StateInitializing, Requeue: 5 * time.Second},
	}, {
		name: "still waiting", after: 3 * time.Second,
		want: seen{State: mlv1.StateInitializing, Requeue: 2 * time.Second},
	}, {
		name: "the interval since first seen: written", after: 2 * time.Second,
		want: seen{State: mlv1.StateInitializing, Workers: mlv1.WorkerCounts{Active: 2, Pending: 2}},
	}, {
		name: "all running: the state carries the counts at once", change: func() { setPhase(corev1.PodRunning, pods...) },
		after: time.Millisecond,
		want:  seen{State: mlv1.StateRunning, Workers: mlv1.WorkerCounts{Active: 2}},
	}, {
		name: "one finished: counts and WorkersFinishing wait", change: func() { setPhase(corev1.PodSucceeded, pods[0]) },
		after: time.Minute,
		want:  seen{State: mlv1.StateRunning, Workers: mlv1.WorkerCounts{Active: 2}, Requeue: 5 * time.Second},
	}, {
		name: "both finished: the counts wait for the Job's verdict", after: 4 * time.Second,
		change: func() { setPhase(corev1.PodSucceeded, pods[1]) },
		want:   seen{State: mlv1.StateRunning, Workers: mlv1.WorkerCounts{Active: 2}, Requeue: verdictWait - 4*time.Second},
	}, {
		name: "the Job complete: one write", after: 10 * time.Second, change: func() { completeJob(t, r, tj) },
		want: seen{State: mlv1.StateCompleted, Workers: mlv1.WorkerCounts{Succeeded: 2}},
	}}
	for _, s := range steps {
		if s.change != nil {
			s.change()
		}
		got := look(s.after)
		// Other rechecks may come sooner: a wait is checked to come back no later than it ends.
		if s.want.Requeue == 0 || got.Requeue > 0 && got.Requeue <= s.want.Requeue {
			got.Requeue = s.want.Requeue
		}
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", s.name, diff)
		}
	}
	if writes != 4 {
		t.Errorf("%d status writes, want 4: Initializing, the counts that waited 5 s, Running, Completed", writes)
	}
}

// TestCacheBehindOwnWrite: a reconcile that reads an object older than this process's last write of it
// waits; once the cache has caught up, the record is dropped.
func TestCacheBehindOwnWrite(t *testing.T) {
	var v statusWrites
	obj := func(uid, rv string) client.Object {
		return &mlv1.TrainingJob{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), ResourceVersion: rv}}
	}
	v.wrote(obj("a", "120"))
	v.wrote(obj("", "5")) // not from an API server: not tracked
	type behind struct {
		Older, AnotherObject, Untracked, CaughtUp, AfterCatchingUp bool
	}
	got := behind{ // in this order: the first read that has caught up drops the record
		Older:           v.behind(obj("a", "119")),
		AnotherObject:   v.behind(obj("b", "1")),
		Untracked:       v.behind(obj("", "1")),
		CaughtUp:        v.behind(obj("a", "120")),
		AfterCatchingUp: v.behind(obj("a", "119")),
	}
	want := behind{Older: true, AnotherObject: false, Untracked: false, CaughtUp: false, AfterCatchingUp: false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("behind: older, another object, untracked, caught up, after catching up (-want +got):\n%s", diff)
	}
}

// TestResultOfAConflict: a conflict is a quiet requeue, any other error is returned, and no result goes
// with an error.
func TestResultOfAConflict(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "c", errors.New("modified"))
	res, err := result(reconcile.Result{RequeueAfter: time.Second}, conflict)
	if err != nil || !res.Requeue { //nolint:staticcheck // what result returns on a conflict
		t.Errorf("conflict: %+v, %v; want a requeue and no error", res, err)
	}
	boom := errors.New("boom")
	if res, err := result(reconcile.Result{RequeueAfter: time.Second}, boom); !errors.Is(err, boom) || res != (reconcile.Result{}) {
		t.Errorf("error: %+v, %v; want only the error", res, err)
	}
	if res, err := result(reconcile.Result{RequeueAfter: time.Second}, nil); err != nil || res.RequeueAfter != time.Second {
		t.Errorf("no error: %+v, %v; want the result", res, err)
	}
}

// completeJob marks tj's current Job complete, with its workers succeeded, as kube-controller-manager does.
func completeJob(t *testing.T, r *JobReconciler, tj *mlv1.TrainingJob) {
	t.Helper()
	job := &batchv1.Job{}
	if err := r.Get(context.Background(), types.NamespacedName{Namespace: tj.Namespace, Name: names.JobName(tj)}, job); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(t0.Time)
	job.Status.Active, job.Status.Succeeded, job.Status.CompletionTime = 0, *job.Spec.Completions, &now
	job.Status.Conditions = append(job.Status.Conditions,
		batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
		batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now})
	if err := r.Status().Update(context.Background(), job); err != nil {
		t.Fatal(err)
	}
}

// TestFlappingDetailsAreWritten: details that come back to what is written for less than the interval stay
// pending: a worker unready four seconds in five is shown unready.
func TestFlappingDetailsAreWritten(t *testing.T) {
	ctx := context.Background()
	tj := tjtest.NewTJ("ml", "f").Workers(2).Obj()
	tj.UID = "uid-f"
	r, clock, key := detailsReconciler(tj)
	reconcileN(t, r, key, 1)
	pods := make([]*corev1.Pod, 2)
	for i := range pods {
		pods[i] = ofTheJob(t, r, tj, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: fmt.Sprintf("f-worker-%d", i),
			Labels: names.AttemptLabels(tj)}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}})
		if err := r.Create(ctx, pods[i]); err != nil {
			t.Fatal(err)
		}
	}
	setReady := func(ready corev1.ConditionStatus) {
		pods[1].Status.Conditions[0].Status = ready
		if err := r.Status().Update(ctx, pods[1]); err != nil {
			t.Fatal(err)
		}
	}
	reconcileN(t, r, key, 1) // Running, both ready: written
	shown := map[int32]int{}
	for s := range 60 {
		setReady(map[bool]corev1.ConditionStatus{true: corev1.ConditionTrue, false: corev1.ConditionFalse}[s%5 == 4])
		clock.SetTime(clock.Now().Add(time.Second))
		reconcileN(t, r, key, 1)
		got := &mlv1.TrainingJob{}
		if err := r.Get(ctx, key, got); err != nil {
			t.Fatal(err)
		}
		if got.Status.State == mlv1.StateRunning {
			shown[got.Status.Workers.Ready]++
		}
	}
	if shown[1] < 30 {
		t.Errorf("seconds shown with 1 and 2 workers ready: %v; want 1 ready most of the time, as it was", shown)
	}
}

// TestRecreatedJobIgnoresOldPods: pods of a job of the same name deleted before it was created again, still
// stopping, are not the new job's workers (another Job made them): its first reconcile neither starts its
// clock from them nor fails it on its deadline; it waits for them to stop, as for an older attempt's.
func TestRecreatedJobIgnoresOldPods(t *testing.T) {
	tj := tjtest.NewTJ("ml", "w").Workers(2).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.FailurePolicy = &mlv1.FailurePolicy{ActiveDeadlineSeconds: ptr.To(int64(24 * 3600))}
		tj.CreationTimestamp = t0
	}).Obj()
	tj.UID = "uid-new"
	objs := []client.Object{tj, node("n1", true, nil)}
	for i := range 2 {
		l := names.AttemptLabels(tj)
		l[names.RankLabel], l[names.ControllerUIDLabel] = fmt.Sprint(i), "job-uid" // jobOwner's: the old Job's
		// Created 48 h before and in the same second as the new job: the creation time does not tell them apart.
		created := []metav1.Time{metav1.NewTime(t0.Add(-48 * time.Hour)), t0}[i]
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: fmt.Sprintf("w-worker-%d-old", i), Labels: l,
			CreationTimestamp: created, DeletionTimestamp: &t0, OwnerReferences: jobOwner(tj.Name),
			Finalizers: []string{batchv1.JobTrackingFinalizer}}, Spec: corev1.PodSpec{NodeName: "n1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	}
	r := newReconciler(objs...)
	key := client.ObjectKeyFromObject(tj)
	reconcileN(t, r, key, 1)
	got := &mlv1.TrainingJob{}
	if err := r.Get(context.Background(), key, got); err != nil {
		t.Fatal(err)
	}
	type seen struct {
		State         mlv1.State
		FailureReason string
		StartTime     *metav1.Time
		Workers       mlv1.WorkerCounts
	}
	if diff := cmp.Diff(seen{State: mlv1.StatePending},
		seen{got.Status.State, got.Status.FailureReason, got.Status.StartTime, got.Status.Workers}); diff != "" {
		t.Errorf("the new job's status (-want +got):\n%s", diff)
	}
}

// TestFaultIsWrittenAtOnce: a fault a worker is stuck on (ImagePullBackOff) is no detail: it is written at
// the reconcile that sees it, however long the job's detail interval (monitoring.scrapeIntervalSeconds).
func TestFaultIsWrittenAtOnce(t *testing.T) {
	ctx := context.Background()
	tj := tjtest.NewTJ("ml", "f").Workers(2).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Monitoring = &mlv1.MonitoringSpec{ScrapeIntervalSeconds: ptr.To(int32(3600))}
	}).Obj()
	tj.UID = "uid-f"
	r, clock, key := detailsReconciler(tj)
	reconcileN(t, r, key, 1)
	pod := ofTheJob(t, r, tj, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "f-worker-0", Labels: names.AttemptLabels(tj)},
		Status: corev1.PodStatus{Phase: corev1.PodPending}})
	if err := r.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	clock.SetTime(clock.Now().Add(time.Second))
	reconcileN(t, r, key, 1) // the pending pod: a detail, waiting its hour
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: names.ContainerName, State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "nope"`}}}}
	if err := r.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	clock.SetTime(clock.Now().Add(time.Second))
	reconcileN(t, r, key, 1)
	got := &mlv1.TrainingJob{}
	if err := r.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	if reason := derive.ConditionReason(got.Status, mlv1.ConditionRunning); reason != "ImagePullBackOff" {
		t.Errorf("Running condition's reason %q, want ImagePullBackOff written at once", reason)
	}
}

// detailsReconciler returns a JobReconciler of tj with a fake clock at t0 and a detail interval of 5 s, the
// clock, and tj's key.
func detailsReconciler(tj *mlv1.TrainingJob) (*JobReconciler, *clocktesting.FakePassiveClock, client.ObjectKey) {
	r := newReconciler(tj)
	clock := clocktesting.NewFakePassiveClock(t0.Time)
	r.Clock, r.DetailInterval = clock, 5*time.Second
	return r, clock, client.ObjectKeyFromObject(tj)
}
