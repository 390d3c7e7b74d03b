package controllers

import (
	"context"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestDeleteAttempt: an older attempt's Job is deleted first (the Job controller then neither replaces
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
					Labels:     map[string]string{names.NameLabel: tj.Name, names.AttemptLabel: "0"},
					Finalizers: []string{"example.com/other", batchv1.JobTrackingFinalizer}}})
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
