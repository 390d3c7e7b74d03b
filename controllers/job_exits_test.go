package controllers

import (
	"context"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

// workerPod returns a pod of job "g" in namespace ml, of the given attempt, whose trainer ended with code (0:
// still running).
func workerPod(name string, attempt string, code int32) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID(name + "-" + attempt),
		Labels: map[string]string{names.NameLabel: "g", names.AttemptLabel: attempt}}}
	cs := corev1.ContainerStatus{Name: names.ContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	if code != 0 {
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	return p
}

// forceDeleted marks p as deleted with no grace period.
func forceDeleted(p *corev1.Pod) *corev1.Pod {
	now, grace := metav1.Now(), int64(0)
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, &grace
	return p
}

// TestExitMemory: which pods the memory gives back as gone, after which events.
func TestExitMemory(t *testing.T) {
	job := types.NamespacedName{Namespace: "ml", Name: "g"}
	cases := []struct {
		name       string
		seen       []*corev1.Pod
		attempt    int32
		present    []corev1.Pod
		wantGone   []string
		wantForced []string // name:state as seen at the deletion
	}{
		{name: "a killed rank deleted since", seen: []*corev1.Pod{workerPod("w-1", "0", 137)}, attempt: 0,
			present: []corev1.Pod{*workerPod("w-0", "0", 1)}, wantGone: []string{"w-1"}},
		{name: "still listed: not gone", seen: []*corev1.Pod{workerPod("w-1", "0", 137)}, attempt: 0,
			present: []corev1.Pod{*workerPod("w-1", "0", 137)}, wantGone: nil},
		{name: "a running or succeeded pod is not kept", seen: []*corev1.Pod{workerPod("w-1", "0", 0)}, attempt: 0,
			present: nil, wantGone: nil},
		{name: "a running rank deleted at once (kubectl delete --force) is kept as then, killed since",
			seen:    []*corev1.Pod{forceDeleted(workerPod("w-1", "0", 0)), forceDeleted(workerPod("w-1", "0", 137))},
			attempt: 0, present: nil, wantGone: []string{"w-1"}, wantForced: []string{"w-1:running"}},
		{name: "the kubelet's last delete of a pod that ended is no forced deletion",
			seen: []*corev1.Pod{forceDeleted(workerPod("w-1", "0", 143))}, attempt: 0, present: nil, wantGone: []string{"w-1"}},
		{name: "another attempt's pod is not the current attempt's", seen: []*corev1.Pod{workerPod("w-1", "0", 137)}, attempt: 1,
			present: nil, wantGone: nil},
		{name: "a newer attempt replaces the older", seen: []*corev1.Pod{workerPod("w-1", "0", 137), workerPod("w-0", "1", 137)}, attempt: 1,
			present: nil, wantGone: []string{"w-0"}},
		{name: "an older attempt's late event is ignored", seen: []*corev1.Pod{workerPod("w-0", "1", 137), workerPod("w-1", "0", 137)},
			attempt: 1, present: nil, wantGone: []string{"w-0"}},
		{name: "a pod of no TrainingJob", seen: []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "x"}}}, attempt: 0,
			present: nil, wantGone: nil},
	}
	for _, tc := range cases {
		var m memory
		for _, p := range tc.seen {
			m.recordExit(p)
		}
		var got []string
		for _, p := range m.goneExits(job, tc.attempt, tc.present) {
			got = append(got, p.Name)
		}
		sort.Strings(got)
		if diff := cmp.Diff(tc.wantGone, got); diff != "" {
			t.Errorf("%s: gone (-want +got):\n%s", tc.name, diff)
		}
		var forced []string
		for _, p := range m.forcedWhileRunning(job, tc.attempt) {
			state := "ended"
			if derive.RunningWhenDeleted(&p) {
				state = "running"
			}
			forced = append(forced, p.Name+":"+state)
		}
		if diff := cmp.Diff(tc.wantForced, forced); diff != "" {
			t.Errorf("%s: deleted at once while running (-want +got):\n%s", tc.name, diff)
		}
		m.forget(job)
		if left := m.goneExits(job, tc.attempt, nil); len(left) != 0 {
			t.Errorf("%s: %d pods kept after forget", tc.name, len(left))
		}
	}
}

// TestRecordingExits: the pod watch's update and delete events reach the memory and the wrapped handler.
func TestRecordingExits(t *testing.T) {
	var m memory
	enqueued := 0
	next := handler.Funcs{
		UpdateFunc: func(context.Context, event.UpdateEvent, workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueued++
		},
		DeleteFunc: func(context.Context, event.DeleteEvent, workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueued++
		},
	}
	h := m.recordingExits(next)
	h.Update(context.Background(), event.UpdateEvent{ObjectOld: workerPod("w-1", "0", 0), ObjectNew: workerPod("w-1", "0", 137)}, nil)
	h.Delete(context.Background(), event.DeleteEvent{Object: workerPod("w-2", "0", 143)}, nil)
	gone := m.goneExits(types.NamespacedName{Namespace: "ml", Name: "g"}, 0, nil)
	if len(gone) != 2 || enqueued != 2 {
		t.Errorf("%d pods kept, %d events passed on; want 2 and 2", len(gone), enqueued)
	}
}

// TestNotOf: the remembered ends of pods another Job made (the one Kueue replaced at a resumption, in the
// same attempt) are not the current Job's; pods made by hand carry no Job's UID and are kept.
func TestNotOf(t *testing.T) {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{UID: "job-uid"}}
	mk := func(uid string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}}}
		if uid != "" {
			p.Labels[names.ControllerUIDLabel] = uid
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "Job", UID: types.UID(uid), Controller: ptr.To(true)}}
		}
		return p
	}
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		job  *batchv1.Job
		want bool
	}{
		{name: "the Job's", pod: mk("job-uid"), job: job, want: false},
		{name: "another Job's", pod: mk("old-uid"), job: job, want: true},
		{name: "made by hand", pod: mk(""), job: job, want: false},
		{name: "no Job yet", pod: mk("old-uid"), want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := notOf(tc.job)(tc.pod); got != tc.want {
				t.Errorf("notOf = %t, want %t", got, tc.want)
			}
		})
	}
}
