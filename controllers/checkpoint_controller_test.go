package controllers

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/builders"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestResumeFromHasOneWriter: the CheckpointController sets RESUME_FROM when the ConfigMap lacks it,
// only ever moves it forward, and settles it for a new attempt once the old attempt's rank 0 has
// stopped, taking its agent's final report into account.
func TestResumeFromHasOneWriter(t *testing.T) {
	const uri = "s3://b/ml/a/checkpoint-epoch-"
	report := `{"latest":"` + uri + `7","latestEpoch":7,"count":2,"sizeBytes":10,"time":"2026-01-01T00:00:00Z"}`
	rank0 := func(attempt string, phase corev1.PodPhase, final string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "a-worker-0-" + attempt,
			Labels: map[string]string{names.NameLabel: "a", names.RankLabel: "0", names.AttemptLabel: attempt}}}
		p.Status.Phase = phase
		if final != "" {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: names.AgentContainerName,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: final, FinishedAt: t0}}}}
		}
		return p
	}
	cases := []struct {
		name        string
		attempt     int32
		resumeFrom  *string // the ConfigMap's value before; nil: no key
		pod         *corev1.Pod
		want        string
		wantSettled string
	}{
		{"first: from status.checkpoint", 0, nil, nil, uri + "4", "0"},
		{"never moved back by a late status", 0, ptr.To(uri + "6"), nil, uri + "6", "0"},
		{"a new attempt waits for the old rank 0", 1, ptr.To(uri + "4"), rank0("0", corev1.PodRunning, ""), uri + "4", "0"},
		{"then takes its final report", 1, ptr.To(uri + "4"), rank0("0", corev1.PodFailed, report), uri + "7", "1"},
		{"or, the pod gone, what it last reported", 1, ptr.To(uri + "4"), nil, uri + "4", "1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "b"}).Obj()
			tj.Status.State, tj.Status.Attempt = mlv1.StateInitializing, tc.attempt
			tj.Status.Checkpoint = &mlv1.CheckpointStatus{Latest: uri + "4", LatestEpoch: 4}
			cm, _ := builders.ConfigMap(tj)
			cm.Annotations = map[string]string{names.ResumeAttemptAnnotation: "0"}
			if tc.resumeFrom != nil {
				cm.Data[names.ResumeFromKey] = *tc.resumeFrom
			}
			objs := []client.Object{tj, cm}
			if tc.pod != nil {
				objs = append(objs, tc.pod)
			}
			c := fake.NewClientBuilder().WithScheme(NewScheme()).WithObjects(objs...).WithStatusSubresource(&mlv1.TrainingJob{}).Build()
			r := &CheckpointReconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(10), Clock: clocktesting.NewFakeClock(t0.Time)}
			key := types.NamespacedName{Namespace: "ml", Name: "a"}
			if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: key}); err != nil {
				t.Fatal(err)
			}
			got := &corev1.ConfigMap{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(cm), got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{tc.want, tc.wantSettled}, []string{got.Data[names.ResumeFromKey], got.Annotations[names.ResumeAttemptAnnotation]}); diff != "" {
				t.Errorf("RESUME_FROM, settled for attempt (-want +got):\n%s", diff)
			}
		})
	}
}
