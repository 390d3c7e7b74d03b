package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

var t0 = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

func newReconciler(objs ...client.Object) *JobReconciler {
	s := NewScheme()
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&mlv1.TrainingJob{}).Build()
	return &JobReconciler{Client: c, APIReader: c, Scheme: s, Recorder: events.NewFakeRecorder(100),
		Clock: clocktesting.NewFakePassiveClock(t0.Time)}
}

// children counts a namespace's Jobs, Services and ConfigMaps.
type children struct {
	Jobs, Services, ConfigMaps int
}

func reconcileN(t *testing.T, r *JobReconciler, key types.NamespacedName, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: key}); err != nil {
			t.Fatalf("reconcile %d: %v", i, err)
		}
	}
}

func countChildren(t *testing.T, c client.Client, ns string) children {
	t.Helper()
	ctx := context.Background()
	var jobs batchv1.JobList
	var svcs corev1.ServiceList
	var cms corev1.ConfigMapList
	for _, l := range []client.ObjectList{&jobs, &svcs, &cms} {
		if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
	}
	return children{Jobs: len(jobs.Items), Services: len(svcs.Items), ConfigMaps: len(cms.Items)}
}

// TestReconcileIsIdempotent: a ConfigMap left by a reconcile that crashed before creating the rest is
// reused, and repeated reconciles never create duplicates.
func TestReconcileIsIdempotent(t *testing.T) {
	tj := tjtest.NewTJ("ml", "mnist").Obj()
	tj.UID = "uid-1"
	leftover, err := builders.ConfigMap(tj, builders.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := newReconciler(tj, leftover)
	key := types.NamespacedName{Namespace: "ml", Name: "mnist"}
	reconcileN(t, r, key, 4)
	if diff := cmp.Diff(children{Jobs: 1, Services: 1, ConfigMaps: 1}, countChildren(t, r.Client, "ml")); diff != "" {
		t.Errorf("jobs, services, configmaps (-want +got):\n%s", diff)
	}
	got := &mlv1.TrainingJob{}
	if err := r.Get(context.Background(), key, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.State != mlv1.StateInitializing {
		t.Errorf("state = %q, want Initializing", got.Status.State)
	}
}

// TestReconcileFinishedJobIsNotRecreated: once Completed, a deleted Job is not created again.
func TestReconcileFinishedJobIsNotRecreated(t *testing.T) {
	tj := tjtest.NewTJ("ml", "done").Obj()
	tj.Status.State = mlv1.StateCompleted
	r := newReconciler(tj)
	reconcileN(t, r, types.NamespacedName{Namespace: "ml", Name: "done"}, 2)
	if diff := cmp.Diff(children{Jobs: 0, Services: 0, ConfigMaps: 0}, countChildren(t, r.Client, "ml")); diff != "" {
		t.Errorf("jobs, services, configmaps (-want +got):\n%s", diff)
	}
}

// TestReconcileForeignJob: a Job of the same name that the TrainingJob does not own is an error, not
// silently adopted.
func TestReconcileForeignJob(t *testing.T) {
	tj := tjtest.NewTJ("ml", "x").Obj()
	tj.Status.State = mlv1.StatePending
	foreign := builders.Job(tj, builders.Options{})
	r := newReconciler(tj, foreign)
	_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ml", Name: "x"}})
	if err == nil {
		t.Fatal("Reconcile() error = nil, want an error about the foreign job")
	}
}

// TestReconcileReplacesStaleSuspendedJob: spec edits made while suspended reach the workers on resume:
// the stale suspended Job is replaced and the ConfigMap updated.
func TestReconcileReplacesStaleSuspendedJob(t *testing.T) {
	ctx := context.Background()
	old := tjtest.NewTJ("ml", "s").Suspend(true).Epochs(5).Obj()
	old.UID = "uid-s"
	staleJob := builders.Job(old, builders.Options{})
	staleJob.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "ml.example.com/v1", Kind: "TrainingJob", Name: "s", UID: "uid-s", Controller: ptr.To(true),
	}}
	staleCM, _ := builders.ConfigMap(old, builders.Options{})
	edited := old.DeepCopy()
	edited.Spec.NumWorkers, edited.Spec.Hyperparameters.Epochs = 3, ptr.To[int32](9)
	edited.Status.State = mlv1.StateSuspended
	r := newReconciler(edited, staleJob, staleCM)
	key := types.NamespacedName{Namespace: "ml", Name: "s"}
	reconcileN(t, r, key, 1)
	if diff := cmp.Diff(children{Jobs: 0, Services: 1, ConfigMaps: 1}, countChildren(t, r.Client, "ml")); diff != "" {
		t.Fatalf("stale job not removed while suspended; jobs, services, configmaps (-want +got):\n%s", diff)
	}
	resumed := &mlv1.TrainingJob{}
	if err := r.Get(ctx, key, resumed); err != nil {
		t.Fatal(err)
	}
	resumed.Spec.Suspend = ptr.To(false)
	if err := r.Update(ctx, resumed); err != nil {
		t.Fatal(err)
	}
	reconcileN(t, r, key, 1)
	job, cm := &batchv1.Job{}, &corev1.ConfigMap{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: "ml", Name: "s-worker"}, job); err != nil {
		t.Fatal(err)
	}
	if err := r.Get(ctx, types.NamespacedName{Namespace: "ml", Name: "s-config"}, cm); err != nil {
		t.Fatal(err)
	}
	type resumedJob struct {
		Parallelism     int32
		Suspend         bool
		ConfigHasEpochs bool
	}
	got := resumedJob{
		Parallelism:     *job.Spec.Parallelism,
		Suspend:         *job.Spec.Suspend,
		ConfigHasEpochs: strings.Contains(cm.Data[names.ConfigFileName], `"epochs": 9`),
	}
	if diff := cmp.Diff(resumedJob{Parallelism: 3, Suspend: false, ConfigHasEpochs: true}, got); diff != "" {
		t.Errorf("parallelism, suspend, config has new epochs (-want +got):\n%s", diff)
	}
}

// TestReconcileRecordsFaultOnce: a worker stuck on a fault gives one Warning event naming it, not one per
// reconcile.
func TestReconcileRecordsFaultOnce(t *testing.T) {
	tj := tjtest.NewTJ("ml", "f").Workers(1).Obj()
	tj.UID, tj.Status.State = "uid-f", mlv1.StateInitializing
	r := newReconciler(tj)
	reconcileN(t, r, types.NamespacedName{Namespace: "ml", Name: "f"}, 1)
	p := ofTheJob(t, r, tj, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ml", Name: "f-worker-0", Labels: map[string]string{names.NameLabel: "f", names.RankLabel: "0"},
	}})
	p.Status.Conditions = []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "no gpu",
	}}
	if err := r.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	reconcileN(t, r, types.NamespacedName{Namespace: "ml", Name: "f"}, 3)
	rec := r.Recorder.(*events.FakeRecorder)
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{"Warning Unschedulable 0 of 1 workers running; pod f-worker-0: no gpu"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestCleanup: cleanPodPolicy decides whether a finished run's running workers are stopped and its pods
// deleted; ttlSecondsAfterFinished removes the children, and with deleteTrainingJob the TrainingJob.
func TestCleanup(t *testing.T) {
	ctx := context.Background()
	finishedTJ := func(name string, c *mlv1.CleanupPolicy, finishedAgo time.Duration) *mlv1.TrainingJob {
		tj := tjtest.NewTJ("ml", name).Obj()
		tj.UID, tj.Spec.Cleanup = types.UID("uid-"+name), c
		tj.Status.State = mlv1.StateCompleted
		tj.Status.CompletionTime = &metav1.Time{Time: t0.Add(-finishedAgo)}
		return tj
	}
	oneEach := children{Jobs: 1, Services: 1, ConfigMaps: 1}
	cases := []struct {
		name             string
		tj               *mlv1.TrainingJob
		wantSuspend      bool // the running Job is stopped
		wantPods         int
		wantChildren     children
		wantTJ           bool
		wantRequeueAfter time.Duration // checked when not 0
	}{
		{name: "default (Running): running workers stopped, pods kept", tj: finishedTJ("run", nil, 0),
			wantSuspend: true, wantPods: 1, wantChildren: oneEach, wantTJ: true},
		{name: "None: nothing stopped or deleted", tj: finishedTJ("none", &mlv1.CleanupPolicy{CleanPodPolicy: mlv1.CleanPodsNone}, 0),
			wantSuspend: false, wantPods: 1, wantChildren: oneEach, wantTJ: true},
		{name: "All: pods deleted", tj: finishedTJ("all", &mlv1.CleanupPolicy{CleanPodPolicy: mlv1.CleanPodsAll}, 0),
			wantSuspend: true, wantPods: 0, wantChildren: oneEach, wantTJ: true},
		{name: "TTL not passed",
			tj:          finishedTJ("ttl", &mlv1.CleanupPolicy{TTLSecondsAfterFinished: ptr.To[int32](60)}, 30*time.Second),
			wantSuspend: true, wantPods: 1, wantChildren: oneEach, wantTJ: true, wantRequeueAfter: 30 * time.Second},
		{name: "TTL passed: children deleted, the TrainingJob kept",
			tj:          finishedTJ("ttl-passed", &mlv1.CleanupPolicy{TTLSecondsAfterFinished: ptr.To[int32](60)}, 2*time.Minute),
			wantSuspend: false, wantPods: 1, wantChildren: children{Jobs: 0, Services: 0, ConfigMaps: 0}, wantTJ: true},
		{name: "TTL passed, deleteTrainingJob",
			tj: finishedTJ("gone",
				&mlv1.CleanupPolicy{TTLSecondsAfterFinished: ptr.To[int32](0), DeleteTrainingJob: true}, time.Second),
			wantSuspend: false, wantPods: 1, wantChildren: oneEach, wantTJ: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			owned := func(obj client.Object) client.Object {
				obj.SetOwnerReferences([]metav1.OwnerReference{{
					APIVersion: "ml.example.com/v1", Kind: "TrainingJob", Name: tc.tj.Name, UID: tc.tj.UID, Controller: ptr.To(true),
				}})
				return obj
			}
			job := builders.Job(tc.tj, builders.Options{})
			job.Status.Active = 1
			cm, _ := builders.ConfigMap(tc.tj, builders.Options{})
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
				Namespace: "ml", Name: tc.tj.Name + "-worker-0", Labels: names.AttemptLabels(tc.tj),
			}}
			r := newReconciler(tc.tj, owned(job), owned(builders.Service(tc.tj)), owned(cm), pod)
			res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tc.tj)})
			if err != nil {
				t.Fatal(err)
			}
			var pods corev1.PodList
			if err := r.List(ctx, &pods); err != nil {
				t.Fatal(err)
			}
			suspended := false
			if got := (&batchv1.Job{}); r.Get(ctx, client.ObjectKeyFromObject(job), got) == nil {
				suspended = ptr.Deref(got.Spec.Suspend, false)
			}
			tjFound := r.Get(ctx, client.ObjectKeyFromObject(tc.tj), &mlv1.TrainingJob{}) == nil
			type outcome struct {
				Suspended bool
				Pods      int
				Children  children
				TJKept    bool
			}
			got := outcome{Suspended: suspended, Pods: len(pods.Items), Children: countChildren(t, r.Client, "ml"), TJKept: tjFound}
			want := outcome{Suspended: tc.wantSuspend, Pods: tc.wantPods, Children: tc.wantChildren, TJKept: tc.wantTJ}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("job suspended, pods, children, TrainingJob kept (-want +got):\n%s", diff)
			}
			if tc.wantRequeueAfter != 0 && res.RequeueAfter != tc.wantRequeueAfter {
				t.Errorf("RequeueAfter = %s, want the %s left", res.RequeueAfter, tc.wantRequeueAfter)
			}
		})
	}
}

// TestReconcileRefusesOperatorNamesInWorkerPod: behind admission, the builder's check refuses a workerPod
// that takes an operator's container name or mounts its volume (a cluster whose CRD is older than its
// operator): no Job is created, and Created=False/CreateRejected names the field.
func TestReconcileRefusesOperatorNamesInWorkerPod(t *testing.T) {
	tj := tjtest.NewTJ("ml", "sneaky").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Dataset = "s3://datasets/squad"
		tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{Sidecars: []mlv1.WorkerContainer{{Name: "fetch-inputs", Image: "evil",
			VolumeMounts: []corev1.VolumeMount{{Name: builders.InputsCacheVolume, MountPath: "/all"}}}}}
	}).Obj()
	tj.UID = "uid-1"
	r := newReconciler(tj)
	key := types.NamespacedName{Namespace: "ml", Name: "sneaky"}
	for range 3 { // a refused spec is returned as the error too (retried with back-off until the spec changes)
		_, _ = r.Reconcile(context.Background(), reconcile.Request{NamespacedName: key})
	}
	var jobs batchv1.JobList
	if err := r.List(context.Background(), &jobs, client.InNamespace("ml")); err != nil || len(jobs.Items) != 0 {
		t.Errorf("jobs %d (%v), want none created", len(jobs.Items), err)
	}
	got := &mlv1.TrainingJob{}
	if err := r.Get(context.Background(), key, got); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(got.Status.Conditions, mlv1.ConditionCreated)
	if c == nil || c.Reason != derive.ReasonCreateRejected ||
		!strings.Contains(c.Message, "spec.workerPod.sidecars: the container name fetch-inputs is the operator's") ||
		!strings.Contains(c.Message, "spec.workerPod.sidecars[fetch-inputs].volumeMounts: inputs-cache is not a volume") {
		t.Errorf("Created condition %+v, want CreateRejected naming the sidecar's name and mount", c)
	}
}
