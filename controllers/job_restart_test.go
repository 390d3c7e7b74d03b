package controllers

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestDeleteAttempt: an older attempt's Job is deleted first (Kubernetes' Job controller then neither replaces
// nor releases its pods), and its pods are deleted and their Job tracking finalizers released (other
// finalizers kept); a pod already stopping is not deleted again.
func TestDeleteAttempt(t *testing.T) {
	for _, tc := range []struct {
		name string
		pods int
	}{
		{name: "two pods", pods: 2},
		{name: "no pod left", pods: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "n").Obj()
			tj.Status.Attempt = 1
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: names.JobName(tj), UID: "job-0",
				Labels: map[string]string{names.AttemptLabel: "0"}}}
			objs := []client.Object{tj, job}
			for i := range tc.pods {
				objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "w-" + strconv.Itoa(i),
					Labels:          map[string]string{names.NameLabel: tj.Name, names.AttemptLabel: "0", names.ControllerUIDLabel: "job-0"},
					OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
					Finalizers:      []string{"example.com/other", batchv1.JobTrackingFinalizer}}})
			}
			r := newReconciler(objs...)
			r.APIReader = r.Client
			ctx := context.Background()
			if err := r.deleteAttempt(ctx, tj, job); err != nil {
				t.Fatal(err)
			}
			for i := range tc.pods {
				p := &corev1.Pod{}
				if err := r.Get(ctx, client.ObjectKey{Namespace: "ml", Name: "w-" + strconv.Itoa(i)}, p); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff([]string{"example.com/other"}, p.Finalizers); diff != "" || p.DeletionTimestamp == nil {
					t.Errorf("pod %s: deleted %t, finalizers (-want +got):\n%s", p.Name, p.DeletionTimestamp != nil, diff)
				}
			}
			if err := r.Get(ctx, client.ObjectKeyFromObject(job), &batchv1.Job{}); !apierrors.IsNotFound(err) {
				t.Errorf("the older attempt's Job is still there (%v)", err)
			}
			// Called again (the Job already gone): no error.
			if err := r.deleteAttempt(ctx, tj, job); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHungAttemptIsKilled: the workers of an attempt that ended hung (status.lastFailure is the hang
// detector's) are deleted with a 1 s grace period, also those the garbage collector already deletes with
// their own; those of any other failure keep their own grace period (a trainer may checkpoint on
// SIGTERM, whatever the spec says now), and a pod deleted with one longer than any worker has is
// deleted again with maxWorkerGrace.
func TestHungAttemptIsKilled(t *testing.T) {
	thirty, twoMinutes, month := int64(30), int64(120), int64(30*24*3600)
	for _, tc := range []struct {
		name         string
		lastFailure  string
		onPreemption bool   // the workers' grace is checkpoint.preemptionGraceSeconds (120)
		deleting     *int64 // the pod's grace period when it is already being deleted
		want         []string
	}{
		{name: "hung", lastFailure: "Hang: rank 0 reported no progress for 10m0s", want: []string{"1s"}},
		{name: "hung, already deleted with 30 s", lastFailure: "Hang: rank 0 reported no progress for 10m0s", deleting: &thirty,
			want: []string{"1s"}},
		{name: "a crash", lastFailure: "rank 1 (pod w-1, container trainer) exited with code 137", want: []string{"default"}},
		{name: "a crash, already deleted", lastFailure: "rank 1 exited with code 137", deleting: &thirty, want: nil},
		{name: "a crash, deleted with a month of its own", lastFailure: "rank 1 exited with code 137", deleting: &month,
			want: []string{"3600s"}},
		{name: "checkpoints at preemption, deleted with their grace", lastFailure: "rank 1 exited with code 137",
			onPreemption: true, deleting: &twoMinutes, want: nil},
		{name: "checkpoints at preemption turned off since, deleted with their grace", lastFailure: "rank 1 exited with code 137",
			deleting: &twoMinutes, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "n").Obj()
			if tc.onPreemption {
				tj = tjtest.NewTJ("ml", "n").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "b"}).Obj()
				tj.Spec.Checkpoint.OnPreemption, tj.Spec.Checkpoint.PreemptionGraceSeconds = true, ptr.To[int32](120)
			}
			tj.Status.Attempt, tj.Status.LastFailure = 1, tc.lastFailure
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "w-0", UID: "u0",
				Labels: map[string]string{names.NameLabel: tj.Name, names.AttemptLabel: "0"}}}
			if tc.deleting != nil {
				now := metav1.Now()
				pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds, pod.Finalizers = &now, tc.deleting, []string{"example.com/keep"}
			}
			var got []string
			r := newReconciler(tj)
			r.Client = interceptor.NewClient(fake.NewClientBuilder().WithScheme(r.Scheme).WithObjects(pod).Build(), interceptor.Funcs{
				Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
					o := &client.DeleteOptions{}
					o.ApplyOptions(opts)
					if o.GracePeriodSeconds == nil {
						got = append(got, "default")
					} else {
						got = append(got, strconv.Itoa(int(*o.GracePeriodSeconds))+"s")
					}
					return nil
				}})
			if err := r.stopPods(context.Background(), tj, []corev1.Pod{*pod}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("deletes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStartBlockedByOlderPods: the next attempt waits for an older attempt's pods while anything of them
// may run; a deleted pod that ended, or that no node took, does not hold it, whatever finalizer (a
// tenant's) keeps the pod in the API.
func TestStartBlockedByOlderPods(t *testing.T) {
	deleted := ptr.To(metav1.NewTime(t0.Add(-time.Hour)))
	for _, tc := range []struct {
		name      string
		node      string
		phase     corev1.PodPhase
		deleted   bool
		wantBlock bool
	}{
		{name: "running", node: "n1", phase: corev1.PodRunning, wantBlock: true},
		{name: "deleted, still stopping", node: "n1", phase: corev1.PodRunning, deleted: true, wantBlock: true},
		{name: "ended, not deleted yet", node: "n1", phase: corev1.PodFailed, wantBlock: true},
		{name: "deleted and ended, a tenant's finalizer left", node: "n1", phase: corev1.PodFailed, deleted: true},
		{name: "deleted, never scheduled, a tenant's finalizer left", phase: corev1.PodPending, deleted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "n").Obj()
			tj.Status.Attempt = 1
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "n-worker-0-old",
				Labels:          map[string]string{names.NameLabel: tj.Name, names.AttemptLabel: "0", names.ControllerUIDLabel: "job-uid"},
				OwnerReferences: jobOwner(tj.Name), Finalizers: []string{"tenant.example.com/keep"}},
				Spec: corev1.PodSpec{NodeName: tc.node}, Status: corev1.PodStatus{Phase: tc.phase}}
			if tc.deleted {
				p.DeletionTimestamp = deleted
			}
			r := newReconciler(tj, p, node("n1", true, nil))
			r.APIReader = r.Client
			blocked, err := r.startBlocked(context.Background(), tj, &corev1.ConfigMap{})
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]string{true: "waiting for 1 workers of attempt 0 to stop"}[tc.wantBlock]; blocked != want {
				t.Errorf("startBlocked = %q, want %q", blocked, want)
			}
		})
	}
}
