package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestOperatorRestartMidRestartInPlace: the operator is restarted in the middle of a restart in place,
// after it ordered the supervisors and before it labelled the pods. A new operator, with nothing in
// memory, finishes the restart from what the API holds, and the job ends as the same run does with no
// operator restart: the same orders, labels, attempt, restart count and state.
func TestOperatorRestartMidRestartInPlace(t *testing.T) {
	want := restartInPlaceRun(t, false)
	got := restartInPlaceRun(t, true)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("with an operator restart after the orders (-without +with):\n%s", diff)
	}
	if want.State != mlv1.StateCompleted || want.Attempt != 1 || want.PodAttempts != "1,1" {
		t.Errorf("the run without an operator restart ended %+v, want Completed in attempt 1", want)
	}
}

// restartInPlaceOutcome is what a restart in place leaves: the orders each supervisor took last, the
// attempt labels of the pods and the Job, and the job's end.
type restartInPlaceOutcome struct {
	Orders                map[string]controlapi.Order
	PodAttempts, JobLabel string
	State                 mlv1.State
	Attempt, RestartCount int32
}

// restartInPlaceRun runs a two-worker job whose rank 1 fails and is held, through the restart in place to
// its end; crash kills the operator at its first pod label, right after the orders.
func restartInPlaceRun(t *testing.T, crash bool) restartInPlaceOutcome {
	t.Helper()
	ctx := context.Background()
	opts := builders.Options{AgentTokenKey: builders.SecretKey("k"), InPlaceRestart: true}
	tj := tjtest.NewTJ("ml", "a").Workers(2).GPUs(0).Obj().Defaulted()
	tj.UID, tj.Status.State = "tj-uid", mlv1.StateRunning
	job := builders.AdmittedJob(tj, opts, nil)
	job.UID = "job-uid"
	job.OwnerReferences = []metav1.OwnerReference{{APIVersion: "ml.example.com/v1", Kind: "TrainingJob", Name: tj.Name, UID: tj.UID,
		Controller: ptr.To(true)}}
	job.Status = batchv1.JobStatus{Active: 2, Ready: ptr.To[int32](2)}
	cm, err := builders.ConfigMap(tj, opts)
	if err != nil {
		t.Fatal(err)
	}
	pods := []*corev1.Pod{heldPod("0", "10.0.0.1", true), heldPod("1", "10.0.0.2", false)}
	sup := &playedSupervisors{token: builders.ControlToken(tj, opts), asked: map[string]int{}, orders: map[string]controlapi.Order{},
		obey: true, held: map[string]controlapi.Exit{"10.0.0.2": {Held: true, ExitCode: 137, Signal: 9, Message: "Killed", FinishedAt: t0.Time}}}
	srv := httptest.NewServer(sup)
	defer srv.Close()
	objs := []client.Object{tj, job, cm}
	for _, p := range pods {
		objs = append(objs, p)
	}
	s := NewScheme()
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&mlv1.TrainingJob{}, &batchv1.Job{}).Build()
	clk := clocktesting.NewFakePassiveClock(t0.Time)
	operator := func(c client.Client) *JobReconciler {
		return &JobReconciler{Client: c, APIReader: c, Scheme: s, Recorder: events.NewFakeRecorder(100),
			Clock: clk, Options: opts, Control: controlClient(srv)}
	}
	killed := false
	r := operator(c)
	if crash {
		r = operator(interceptor.NewClient(c, interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if _, pod := obj.(*corev1.Pod); pod && !killed {
					killed = true
					return errors.New("the operator is killed")
				}
				return c.Patch(ctx, obj, patch, opts...)
			}}))
	}
	key := client.ObjectKeyFromObject(tj)
	labels := func() (string, string) {
		var got []string
		for _, p := range pods {
			cur := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(p), cur); err != nil {
				t.Fatal(err)
			}
			got = append(got, cur.Labels[names.AttemptLabel])
		}
		cur := &batchv1.Job{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(job), cur); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%s,%s", got[0], got[1]), cur.Labels[names.AttemptLabel]
	}
	reconcileUntil := func(what string, done func() bool) {
		t.Helper()
		for range 10 {
			if done() {
				return
			}
			clk.SetTime(clk.Now().Add(5 * time.Second)) // past a failed attempt's settling, and the labels' memory
			_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
			if err != nil && killed {
				r = operator(c) // a new operator: the API as it is, nothing in memory
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		if !done() {
			got := &mlv1.TrainingJob{}
			_ = c.Get(ctx, key, got)
			pl, jl := labels()
			t.Fatalf("%s: not after 10 reconciles: state %s attempt %d, labels %s %s, orders %v asked %v, status %+v", what,
				got.Status.State, got.Status.Attempt, pl, jl, sup.orders, sup.asked, got.Status.Conditions)
		}
	}
	reconcileUntil("the restart in place", func() bool {
		pods, job := labels()
		return pods == "1,1" && job == "1"
	})
	if crash && !killed {
		t.Fatal("the operator was never killed")
	}
	// The kubelet runs the pods' containers again; the trainers run, then end.
	setWorkers := func(phase corev1.PodPhase, ready bool, js batchv1.JobStatus) {
		t.Helper()
		for _, p := range pods {
			cur := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(p), cur); err != nil {
				t.Fatal(err)
			}
			cur.Status = heldPod(p.Labels[names.RankLabel], p.Status.PodIP, ready).Status
			cur.Status.Phase = phase
			cur.Status.ContainerStatuses[0].RestartCount = 1
			if phase == corev1.PodSucceeded {
				cur.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
			}
			if err := c.Status().Update(ctx, cur); err != nil {
				t.Fatal(err)
			}
		}
		cur := &batchv1.Job{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(job), cur); err != nil {
			t.Fatal(err)
		}
		cur.Status = js
		if err := c.Status().Update(ctx, cur); err != nil {
			t.Fatal(err)
		}
	}
	state := func() *mlv1.TrainingJob {
		got := &mlv1.TrainingJob{}
		if err := c.Get(ctx, key, got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	setWorkers(corev1.PodRunning, true, batchv1.JobStatus{Active: 2, Ready: ptr.To[int32](2)})
	reconcileUntil("running again", func() bool { return state().Status.State == mlv1.StateRunning && state().Status.Attempt == 1 })
	setWorkers(corev1.PodSucceeded, false, batchv1.JobStatus{Succeeded: 2, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue}, {Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}})
	reconcileUntil("completed", func() bool { return state().Status.State == mlv1.StateCompleted })
	t.Logf("crash %t: %d orders taken", crash, sup.ordered)
	end := state()
	podAttempts, jobLabel := labels()
	return restartInPlaceOutcome{Orders: sup.orders, PodAttempts: podAttempts, JobLabel: jobLabel, State: end.Status.State,
		Attempt: end.Status.Attempt, RestartCount: end.Status.RestartCount}
}
