package controllers

import (
	"context"
	"errors"
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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestDetailsAreCoalesced: a change of worker counts alone is written at most once per DetailInterval
// after the job's last write; a state change is written at once.
func TestDetailsAreCoalesced(t *testing.T) {
	ctx := context.Background()
	tj := tjtest.NewTJ("ml", "w").Workers(2).Obj()
	tj.UID = "uid-w"
	r := newReconciler(tj)
	clock := clocktesting.NewFakePassiveClock(t0.Time)
	r.Clock, r.DetailInterval = clock, 5*time.Second
	key := client.ObjectKeyFromObject(tj)
	reconcileN(t, r, key, 1) // Initializing, written: the first write
	job := &batchv1.Job{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: "ml", Name: names.JobName(tj)}, job); err != nil {
		t.Fatal(err)
	}
	setActive := func(n int32) {
		job.Status.Active = n
		if err := r.Status().Update(ctx, job); err != nil {
			t.Fatal(err)
		}
	}
	step := func(after time.Duration) (reconcile.Result, mlv1.TrainingJobStatus) {
		clock.SetTime(clock.Now().Add(after))
		res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		if err != nil {
			t.Fatal(err)
		}
		got := &mlv1.TrainingJob{}
		if err := r.Get(ctx, key, got); err != nil {
			t.Fatal(err)
		}
		return res, got.Status
	}
	setActive(1)
	res, st := step(time.Second)
	if st.Workers.Active != 0 || res.RequeueAfter != 4*time.Second {
		t.Errorf("1 s after the last write: active %d written, requeue after %s; want nothing written, 4s", st.Workers.Active, res.RequeueAfter)
	}
	_, st = step(4 * time.Second)
	if st.Workers.Active != 1 {
		t.Errorf("after the interval: active %d, want 1 written", st.Workers.Active)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "w-worker-0", Labels: names.AttemptLabels(tj)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	pod2 := pod.DeepCopy()
	pod2.Name = "w-worker-1"
	for _, p := range []*corev1.Pod{pod, pod2} {
		if err := r.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	setActive(2)
	_, st = step(time.Millisecond)
	type written struct {
		State  mlv1.State
		Active int32
	}
	if diff := cmp.Diff(written{State: mlv1.StateRunning, Active: 2}, written{State: st.State, Active: st.Workers.Active}); diff != "" {
		t.Errorf("a state change is written at once, with the details (-want +got):\n%s", diff)
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
