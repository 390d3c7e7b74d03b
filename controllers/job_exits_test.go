package controllers

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/yaml"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// workerPod returns a pod of job "g"'s Job in namespace ml, of the given attempt, whose trainer ended
// with code (0: still running).
func workerPod(name string, attempt string, code int32) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID(name + "-" + attempt),
		Labels:          map[string]string{names.NameLabel: "g", names.AttemptLabel: attempt, names.ControllerUIDLabel: "job-uid"},
		OwnerReferences: jobOwner("g")}}
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
		{name: "a job of the same name submitted again: its Job's attempt 0 replaces the old one's attempt 3",
			seen: []*corev1.Pod{workerPod("w-0-old", "3", 1), func() *corev1.Pod {
				p := workerPod("w-1", "0", 137)
				p.OwnerReferences[0].UID, p.Labels[names.ControllerUIDLabel] = "new-job-uid", "new-job-uid"
				return p
			}()}, attempt: 0, present: nil, wantGone: []string{"w-1"}},
		{name: "the job's labels without its Job (kubectl debug --copy-to)", seen: []*corev1.Pod{func() *corev1.Pod {
			p := workerPod("w-1-debug", "0", 1)
			p.OwnerReferences = nil
			return p
		}()}, attempt: 0, present: nil, wantGone: nil},
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

// TestExitMemoryIsBounded: the memory keeps exitsPerRank pods of a rank and maxKeptExits of an attempt,
// however many failed pods of the Job's name a namespace holds.
func TestExitMemoryIsBounded(t *testing.T) {
	job := types.NamespacedName{Namespace: "ml", Name: "g"}
	for _, tc := range []struct {
		name  string
		pods  int
		ranks int
		want  int
	}{
		{name: "one rank's replacements", pods: 10, ranks: 1, want: exitsPerRank},
		{name: "every rank once", pods: maxWorkers, ranks: maxWorkers, want: maxWorkers},
		{name: "forged ranks", pods: 3 * maxKeptExits, ranks: 3 * maxKeptExits, want: maxKeptExits},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m memory
			for i := range tc.pods {
				p := workerPod(fmt.Sprintf("w-%d", i), "0", 1)
				p.Labels[names.RankLabel] = fmt.Sprint(i % tc.ranks)
				m.recordExit(p)
			}
			if got := len(m.goneExits(job, 0, nil)); got != tc.want {
				t.Errorf("%d pods kept, want %d", got, tc.want)
			}
		})
	}
}

// TestRecordingExits: the pod watch's update and delete events reach the memory and the wrapped handler;
// the memory keeps only the pods the job's current Job made (a pod naming it with another UID, or of an
// earlier Job of the name, passes on its event and takes no room).
func TestRecordingExits(t *testing.T) {
	tj := tjtest.NewTJ("ml", "g").Obj()
	r := newReconciler(tj, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: names.JobName(tj), UID: "job-uid"}})
	enqueued := 0
	next := handler.Funcs{
		UpdateFunc: func(context.Context, event.UpdateEvent, workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueued++
		},
		DeleteFunc: func(context.Context, event.DeleteEvent, workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueued++
		},
	}
	h := r.recordingExits(next)
	forged := workerPod("w-1-forged", "0", 1)
	forged.OwnerReferences[0].UID, forged.Labels[names.ControllerUIDLabel] = "forged", "forged"
	h.Update(context.Background(), event.UpdateEvent{ObjectOld: workerPod("w-1", "0", 0), ObjectNew: workerPod("w-1", "0", 137)}, nil)
	h.Delete(context.Background(), event.DeleteEvent{Object: workerPod("w-2", "0", 143)}, nil)
	h.Delete(context.Background(), event.DeleteEvent{Object: forged}, nil)
	var kept []string
	for _, p := range r.memory.goneExits(types.NamespacedName{Namespace: "ml", Name: "g"}, 0, nil) {
		kept = append(kept, p.Name)
	}
	sort.Strings(kept)
	if diff := cmp.Diff([]string{"w-1", "w-2"}, kept); diff != "" || enqueued != 3 {
		t.Errorf("%d events passed on, want 3; pods kept (-want +got):\n%s", enqueued, diff)
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
		{name: "made by hand", pod: mk(""), job: job, want: true},
		{name: "the Job's label, no owner", pod: func() corev1.Pod {
			p := mk("job-uid")
			p.OwnerReferences = nil
			return p
		}(), job: job, want: true},
		{name: "no Job yet", pod: mk("old-uid"), want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := notOf(tc.job)(tc.pod); got != tc.want {
				t.Errorf("notOf = %t, want %t", got, tc.want)
			}
		})
	}
}

// ofTheJob makes p a pod of tj's Job as Kubernetes' Job controller makes one: the Job, which r created,
// as its controller owner and the Job's controller-uid label. Pods without them are a tenant's.
func ofTheJob(t *testing.T, r *JobReconciler, tj *mlv1.TrainingJob, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	job := &batchv1.Job{}
	if err := r.Get(context.Background(), types.NamespacedName{Namespace: tj.Namespace, Name: names.JobName(tj)}, job); err != nil {
		t.Fatalf("the Job of %s: %v", tj.Name, err)
	}
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[names.ControllerUIDLabel] = string(job.UID)
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID,
		Controller: ptr.To(true)}}
	return p
}

// TestTenantPodDoesNotFailTheJob: a pod a tenant made by hand with the job's name, attempt and rank labels,
// whose trainer exited 1, neither fails nor restarts a healthy run, and no such pod is deleted: only the
// Job's pods decide.
func TestTenantPodDoesNotFailTheJob(t *testing.T) {
	ctx := context.Background()
	tj := tjtest.NewTJ("ml", "f").Workers(2).Obj()
	tj.UID = "uid-f"
	r := newReconciler(tj)
	key := client.ObjectKeyFromObject(tj)
	reconcileN(t, r, key, 1)
	running := corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: names.ContainerName, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	for i := range 2 {
		l := names.AttemptLabels(tj)
		l[names.RankLabel] = fmt.Sprint(i)
		p := ofTheJob(t, r, tj, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: fmt.Sprintf("f-worker-%d", i), Labels: l},
			Status: running})
		if err := r.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	reconcileN(t, r, key, 1)
	l := names.AttemptLabels(tj)
	l[names.RankLabel] = "1"
	forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "f-worker-1-forged", Labels: l},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: names.ContainerName,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "forged"}}}}}}
	older := forged.DeepCopy()
	older.Name, older.Labels = "f-worker-0-older", names.AttemptLabels(tj)
	older.Labels[names.AttemptLabel], older.Status = "7", running
	for _, p := range []*corev1.Pod{forged, older} {
		if err := r.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	reconcileN(t, r, key, 3)
	for _, p := range []*corev1.Pod{forged, older} {
		if err := r.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil || p.DeletionTimestamp != nil {
			t.Errorf("the tenant's pod %s was deleted (%v): the operator deletes only its Jobs' pods", p.Name, err)
		}
	}
	got := &mlv1.TrainingJob{}
	if err := r.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	type seen struct {
		State         mlv1.State
		FailureReason string
		Attempt       int32
		Failed        int32
	}
	if diff := cmp.Diff(seen{State: mlv1.StateRunning},
		seen{got.Status.State, got.Status.FailureReason, got.Status.Attempt, got.Status.Workers.Failed}); diff != "" {
		t.Errorf("the healthy run after a tenant's failed pod (-want +got):\n%s", diff)
	}
}

// TestMaxWorkersIsTheCRDs: maxWorkers is the CRD's maximum of spec.numWorkers.
func TestMaxWorkersIsTheCRDs(t *testing.T) {
	data, err := os.ReadFile("../deploy/crd/ml.example.com_trainingjobs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		t.Fatal(err)
	}
	max := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["numWorkers"].Maximum
	if max == nil || int(*max) != maxWorkers {
		t.Errorf("spec.numWorkers' maximum is %v, maxWorkers %d", max, maxWorkers)
	}
}

// TestKilledRankGoneBeforeTheVerdict: when a killed rank's pod is gone before the JobController reads the
// failed attempt (Kubernetes' Job controller deleted it), its remembered exit still decides: the kill is
// retryable, so the peer's exit 1 that followed does not fail the run as a non-retryable error. A tenant's
// pod copying the Job's UID with the attempt label 99, seen before or after the kill, is not taken for a
// newer attempt that drops it.
func TestKilledRankGoneBeforeTheVerdict(t *testing.T) {
	for _, forged := range []string{"never", "before the kill", "after the kill"} {
		t.Run("forged "+forged, func(t *testing.T) {
			ctx := context.Background()
			tj := tjtest.NewTJ("ml", "k").Workers(2).BackoffLimit(3, mlv1.RestartGang).Obj()
			tj.UID = "uid-k"
			r := newReconciler(tj)
			key := client.ObjectKeyFromObject(tj)
			reconcileN(t, r, key, 1)
			job := &batchv1.Job{}
			if err := r.Get(ctx, types.NamespacedName{Namespace: "ml", Name: names.JobName(tj)}, job); err != nil {
				t.Fatal(err)
			}
			ended := func(rank string, code int32, at time.Time) *corev1.Pod {
				l := names.AttemptLabels(tj)
				l[names.RankLabel] = rank
				l["team.example.com/owner"] = "not kept"
				return ofTheJob(t, r, tj, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "k-worker-" + rank,
					UID: types.UID("uid-" + rank), Labels: l},
					Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: names.ContainerName,
						State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: metav1.NewTime(at)}}}}}})
			}
			now := r.Clock.Now()
			tenant := forgedRunning(t, r, tj, "tenant-pod", "99", "0")
			if forged == "before the kill" {
				watchSees(r, tenant)
			}
			watchSees(r, ended("1", 137, now.Add(-20*time.Second))) // seen by the watch, deleted since
			if forged == "after the kill" {
				watchSees(r, tenant)
			}
			if err := r.Create(ctx, ended("0", 1, now.Add(-10*time.Second))); err != nil {
				t.Fatal(err)
			}
			job.Status.Conditions = append(job.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue,
				Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: metav1.NewTime(now)})
			if err := r.Status().Update(ctx, job); err != nil {
				t.Fatal(err)
			}
			obs := derive.Observed{Job: job}
			if err := r.observePods(ctx, tj, &obs); err != nil {
				t.Fatal(err)
			}
			var gone []string
			for _, p := range obs.Gone {
				gone = append(gone, p.Name+" "+p.Labels["team.example.com/owner"])
			}
			if diff := cmp.Diff([]string{"k-worker-1 "}, gone); diff != "" {
				t.Errorf("the gone pods the verdict reads (-want +got):\n%s", diff)
			}
			reconcileN(t, r, key, 2)
			got := &mlv1.TrainingJob{}
			if err := r.Get(ctx, key, got); err != nil {
				t.Fatal(err)
			}
			if got.Status.State == mlv1.StateFailed || got.Status.RestartCount != 1 || !strings.Contains(got.Status.LastFailure, "137") {
				t.Errorf("after a killed rank and its peer's exit 1: state %s (%s), restarts %d, last failure %q; want a restart for the kill",
					got.Status.State, got.Status.FailureReason, got.Status.RestartCount, got.Status.LastFailure)
			}
		})
	}
}

// kubeletPod returns a failed worker pod as a kubelet reports it: images, IDs, addresses, resources, every
// condition, and the kubelet's largest termination messages (4 KiB a container, 12 KiB a pod) on
// containers that failed (the trainer, its traceback ending in the CUDA error) and on ones that did not.
func kubeletPod(code int32, disrupted, forced bool) *corev1.Pod {
	p := workerPod("w-1", "0", code)
	p.Labels[names.RankLabel] = "1"
	p.Labels["team.example.com/cost-center"] = strings.Repeat("c", 63)
	p.Spec.NodeName = "node-7"
	p.Status.Phase, p.Status.HostIP, p.Status.PodIP = corev1.PodFailed, "10.0.0.7", "10.244.7.12"
	p.Status.PodIPs, p.Status.HostIPs = []corev1.PodIP{{IP: "10.244.7.12"}}, []corev1.HostIP{{IP: "10.0.0.7"}}
	p.Status.QOSClass, p.Status.StartTime = corev1.PodQOSBurstable, ptr.To(metav1.Now())
	for _, c := range []corev1.PodConditionType{"PodReadyToStartContainers", corev1.PodInitialized, corev1.PodReady,
		corev1.ContainersReady, corev1.PodScheduled} {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: c, Status: corev1.ConditionFalse,
			Reason: "PodFailed", Message: strings.Repeat("m", 256), LastTransitionTime: metav1.Now()})
	}
	if disrupted {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget,
			Status: corev1.ConditionTrue, Reason: "PreemptionByScheduler", Message: "preempted by ml/urgent"})
	}
	full := func(name string, code int32, msg string) corev1.ContainerStatus {
		cs := corev1.ContainerStatus{Name: name, Image: "registry.example.com/team/trainer:" + strings.Repeat("v", 100),
			ImageID: "registry.example.com/team/trainer@sha256:" + strings.Repeat("a", 64), ContainerID: "containerd://" + strings.Repeat("b", 64),
			RestartCount: 2, User: &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{UID: 1000, GID: 1000, SupplementalGroups: []int64{1000}}},
			AllocatedResources: corev1.ResourceList{}, VolumeMounts: []corev1.VolumeMountStatus{{Name: "checkpoints", MountPath: "/checkpoints"}}}
		if forced {
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Now()}
			return cs
		}
		cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error", Message: msg, ContainerID: cs.ContainerID,
			StartedAt: metav1.NewTime(time.Unix(1000, 0)), FinishedAt: metav1.NewTime(time.Unix(2000, 0))}
		cs.LastTerminationState = cs.State
		return cs
	}
	traceback := strings.Repeat("  File \"train.py\", line 12, in step\n", 110) + "torch.OutOfMemoryError: CUDA out of memory\n"
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{full(names.InputsContainerName, 0, strings.Repeat("fetched\n", 512))}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{full(names.ContainerName, code, text4K(traceback)),
		full(names.AgentContainerName, 0, strings.Repeat("uploaded\n", 455))}
	if forced {
		forceDeleted(p)
	}
	return p
}

// withSidecars puts n sidecars (native: init containers that run on) with long image names before p's
// containers, each ended with code 0 or still running.
func withSidecars(p *corev1.Pod, n int) *corev1.Pod {
	var sidecars []corev1.ContainerStatus
	for i := range n {
		cs := corev1.ContainerStatus{Name: fmt.Sprintf("sidecar-%03d-%s", i, strings.Repeat("s", 40)),
			Image: "registry.example.com/" + strings.Repeat("i", 200), ImageID: strings.Repeat("d", 230)}
		if i%2 == 0 {
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Now()}
		} else {
			cs.State.Terminated = &corev1.ContainerStateTerminated{Reason: "Completed", Message: strings.Repeat("ok\n", 20)}
		}
		sidecars = append(sidecars, cs)
	}
	p.Status.InitContainerStatuses = append(sidecars, p.Status.InitContainerStatuses...)
	p.Status.ContainerStatuses = append(append([]corev1.ContainerStatus{}, sidecars...), p.Status.ContainerStatuses...)
	return p
}

// text4K returns the last 4 KiB of s, as the kubelet cuts a termination message.
func text4K(s string) string { return s[max(0, len(s)-4096):] }

// TestKeptPodIsWhatTheVerdictReads: the memory keeps under 1 KiB plus the last 2 KiB of each failed end (this
// run's and the last) of a pod the kubelet reports at its largest (about 28 KiB), at most keptContainers
// states of a template's many sidecars, and the verdict on the kept copy of a gone pod is the one on
// the pod itself: the exit, its hint and last lines, a disruption, a deletion while running.
func TestKeptPodIsWhatTheVerdictReads(t *testing.T) {
	tj := tjtest.NewTJ("ml", "g").Workers(2).BackoffLimit(3, mlv1.RestartGang).Obj()
	tj.Status.State = mlv1.StateRunning
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: names.JobName(tj), UID: "job-uid"},
		Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue,
			Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: metav1.NewTime(time.Unix(1, 0))}}}}
	for _, tc := range []struct {
		name              string
		pod               *corev1.Pod
		wantFull, wantMax int
	}{
		{name: "OOM on the GPU", pod: kubeletPod(137, false, false), wantFull: 24 << 10, wantMax: 5 << 10},
		{name: "error exit", pod: kubeletPod(1, false, false), wantFull: 24 << 10, wantMax: 5 << 10},
		{name: "disrupted", pod: kubeletPod(143, true, false), wantFull: 24 << 10, wantMax: 5 << 10},
		{name: "deleted at once while running", pod: kubeletPod(0, false, true), wantFull: 2 << 10, wantMax: 1 << 10},
		{name: "200 sidecars, the trainer last", pod: withSidecars(kubeletPod(137, false, false), 200), wantFull: 100 << 10, wantMax: 6 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept := keptPod(tc.pod)
			t.Logf("%d bytes, kept %d", tc.pod.Size(), kept.Size())
			if full, got := tc.pod.Size(), kept.Size(); full < tc.wantFull || got > tc.wantMax {
				t.Errorf("the pod is %d bytes (want at least %d), its kept copy %d (want at most %d)", full, tc.wantFull, got, tc.wantMax)
			}
			verdict := func(p corev1.Pod) mlv1.TrainingJobStatus {
				obs := derive.Observed{Job: job, Gone: []corev1.Pod{p}}
				if derive.ForceDeleted(&p) {
					obs.Gone, obs.ForceDeleted = nil, []corev1.Pod{p}
				}
				return derive.Status(tj, obs, metav1.NewTime(time.Unix(100, 0)))
			}
			want, got := verdict(*tc.pod), verdict(kept)
			if want.LastFailure == "" && want.FailureReason == "" {
				t.Fatalf("no failure decided on the pod itself: %+v", want)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("the verdict on the kept copy (-on the pod +on the copy):\n%s", diff)
			}
		})
	}
}

// watchSees delivers p to the JobReconciler's pod watch as an update (recordingExits reads the Job and
// the TrainingJob from the client before the memory keeps p).
func watchSees(r *JobReconciler, p *corev1.Pod) {
	h := r.recordingExits(handler.Funcs{})
	h.Update(context.Background(), event.UpdateEvent{ObjectOld: p, ObjectNew: p}, nil)
}

// forgedRunning returns a tenant's pod copying the real Job's owner reference and controller-uid label
// (both readable by the tenant), with the given attempt and rank labels: one container exited 1, a
// second still runs, so the pod is Running (Kubernetes' Job controller counts no failure).
func forgedRunning(t *testing.T, r *JobReconciler, tj *mlv1.TrainingJob, name, attempt, rank string) *corev1.Pod {
	l := names.AttemptLabels(tj)
	l[names.AttemptLabel], l[names.RankLabel] = attempt, rank
	return ofTheJob(t, r, tj, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: tj.Namespace, Name: name,
		UID: types.UID("uid-" + name), Labels: l},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: names.ContainerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}},
			{Name: "sidecar", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}})
}
