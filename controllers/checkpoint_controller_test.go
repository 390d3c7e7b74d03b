package controllers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"

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

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestResumeFromHasOneWriter: the CheckpointController sets RESUME_FROM when the ConfigMap lacks it,
// only ever moves it forward, and settles it for a new attempt once the old attempt's rank 0 has
// stopped, taking its agent's final report into account.
func TestResumeFromHasOneWriter(t *testing.T) {
	const uri = "s3://b/ml/a/checkpoint-epoch-"
	report := `{"latest":"` + uri + `7","latestEpoch":7,"count":2,"sizeBytes":10,"time":"2026-01-01T00:00:00Z"}`
	rank0 := func(attempt string, phase corev1.PodPhase, final string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "a-worker-0-" + attempt, OwnerReferences: jobOwner("a"),
			Labels: map[string]string{names.NameLabel: "a", names.RankLabel: "0", names.AttemptLabel: attempt,
				names.ControllerUIDLabel: "job-uid"}}}
		p.Status.Phase = phase
		if final != "" {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: names.AgentContainerName,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: final, FinishedAt: t0}}}}
		}
		return p
	}
	inJob := func(p *corev1.Pod, deleted bool) *corev1.Pod {
		p.Labels[names.ControllerUIDLabel] = "job-uid"
		if deleted {
			p.DeletionTimestamp, p.Finalizers = &t0, []string{"test"}
		}
		return p
	}
	cases := []struct {
		name        string
		attempt     int32
		resumeFrom  *string // the ConfigMap's value before; nil: no key
		pod         *corev1.Pod
		inPlace     bool // the workers' Job restarts in place (names.InPlaceAnnotation), its UID "job-uid"
		restarting  bool // the Restarting condition turned True now
		want        string
		wantSettled string
	}{
		{name: "first: from status.checkpoint", attempt: 0, resumeFrom: nil, pod: nil,
			want: uri + "4", wantSettled: "0"},
		{name: "never moved back by a late status", attempt: 0, resumeFrom: ptr.To(uri + "6"), pod: nil,
			want: uri + "6", wantSettled: "0"},
		{name: "a new attempt waits for the old rank 0", attempt: 1, resumeFrom: ptr.To(uri + "4"), pod: rank0("0", corev1.PodRunning, ""),
			want: uri + "4", wantSettled: "0"},
		{name: "then takes its final report", attempt: 1, resumeFrom: ptr.To(uri + "4"), pod: rank0("0", corev1.PodFailed, report),
			want: uri + "7", wantSettled: "1"},
		{name: "or, the pod gone, what it last reported", attempt: 1, resumeFrom: ptr.To(uri + "4"), pod: nil,
			want: uri + "4", wantSettled: "1"},
		{name: "a pod restarting in place is not waited for", attempt: 1, resumeFrom: ptr.To(uri + "4"),
			pod: inJob(rank0("0", corev1.PodRunning, ""), false), inPlace: true, want: uri + "4", wantSettled: "1"},
		{name: "but one being deleted is", attempt: 1, resumeFrom: ptr.To(uri + "4"),
			pod: inJob(rank0("0", corev1.PodRunning, ""), true), inPlace: true, want: uri + "4", wantSettled: "0"},
		{name: "nor, right after the restart's decision, until its agent reported since", attempt: 1, resumeFrom: ptr.To(uri + "4"),
			pod: inJob(rank0("0", corev1.PodRunning, ""), false), inPlace: true, restarting: true, want: uri + "4", wantSettled: "0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "b"}).Obj()
			tj.Status.State, tj.Status.Attempt = mlv1.StateInitializing, tc.attempt
			tj.Status.Checkpoint = &mlv1.CheckpointStatus{Latest: uri + "4", LatestEpoch: 4}
			if tc.restarting {
				tj.Status.Conditions = []metav1.Condition{{Type: mlv1.ConditionRestarting, Status: metav1.ConditionTrue, Reason: "Restarting",
					LastTransitionTime: t0}}
			}
			cm, _ := builders.ConfigMap(tj, builders.Options{})
			cm.Annotations = map[string]string{names.ResumeAttemptAnnotation: "0"}
			if tc.resumeFrom != nil {
				cm.Data[names.ResumeFromKey] = *tc.resumeFrom
			}
			objs := []client.Object{tj, cm}
			if tc.pod != nil {
				objs = append(objs, tc.pod)
			}
			if tc.inPlace {
				objs = append(objs, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: names.JobName(tj), UID: "job-uid",
					Annotations: map[string]string{names.InPlaceAnnotation: "true"}}})
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
			type resume struct {
				From, SettledFor string
			}
			want := resume{From: tc.want, SettledFor: tc.wantSettled}
			gotResume := resume{From: got.Data[names.ResumeFromKey], SettledFor: got.Annotations[names.ResumeAttemptAnnotation]}
			if diff := cmp.Diff(want, gotResume); diff != "" {
				t.Errorf("RESUME_FROM, settled for attempt (-want +got):\n%s", diff)
			}
		})
	}
}

// fakeAgent is rank 0's checkpoint agent behind the CheckpointReconciler's HTTP client: the real protocol
// handler (agentapi.Server) with the agent's token, served in process at any address.
type fakeAgent struct {
	handler http.Handler
	auth    []string // the Authorization header of every PUT /resume-from
	acked   []string // what the agent took RESUME_FROM to name
}

func newFakeAgent(token string, report agentapi.Status) *fakeAgent {
	a := &fakeAgent{}
	mux := http.NewServeMux()
	agentapi.Server{Status: func() agentapi.Status { return report }, Acknowledge: func(uri string) { a.acked = append(a.acked, uri) },
		Token: token}.Register(mux)
	a.handler = mux
	return a
}

func (a *fakeAgent) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut {
		a.auth = append(a.auth, r.Header.Get("Authorization"))
	}
	rec := httptest.NewRecorder()
	a.handler.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// TestCheckpointControllerSendsTheAgentsToken: after reading rank 0's agent, the CheckpointController
// tells it what RESUME_FROM names with the token the agent has: the one in rank 0's pod (its agent
// container's AGENT_TOKEN) when the pod as read shows it, so a running pod's token works whatever key
// the operator holds now; else (the manager's cache keeps no pod spec) the job's token derived from the
// operator's key; none to the agent of a Job built before tokens. The agent takes the acknowledgement.
func TestCheckpointControllerSendsTheAgentsToken(t *testing.T) {
	const uri = "s3://b/ml/a/checkpoint-epoch-"
	oldKey, key := builders.SecretKey(strings.Repeat("o", 32)), builders.SecretKey(strings.Repeat("k", 32))
	newTJ := func() *mlv1.TrainingJob {
		tj := tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "b"}).Obj()
		tj.UID = "uid-1"
		tj.Status.State, tj.Status.Attempt = mlv1.StateRunning, 0
		tj.Status.Checkpoint = &mlv1.CheckpointStatus{Latest: uri + "4", LatestEpoch: 4}
		return tj
	}
	tokenOf := func(k builders.SecretKey) string {
		return builders.AgentToken(newTJ(), builders.Options{AgentTokenKey: k})
	}
	// agentEnv: the agent container of rank 0's pod as the API server has it; nil: a pod without spec.
	agentEnv := func(env ...corev1.EnvVar) []corev1.Container {
		return []corev1.Container{{Name: names.AgentContainerName, Env: append([]corev1.EnvVar{{Name: "RANK", Value: "0"}}, env...)}}
	}
	cases := []struct {
		name       string
		podAgent   []corev1.Container // rank 0's init containers as read
		agentToken string             // the token the agent has
		wantAuth   string
		wantAcked  []string // what the agent took
	}{
		{name: "the token in rank 0's pod, built with the key the operator held then",
			podAgent: agentEnv(corev1.EnvVar{Name: agentapi.TokenEnv, Value: tokenOf(oldKey)}), agentToken: tokenOf(oldKey),
			wantAuth: "Bearer " + tokenOf(oldKey), wantAcked: []string{uri + "7"}},
		{name: "the pod reads the job's token Secret: the job's token from the key",
			podAgent: agentEnv(corev1.EnvVar{Name: agentapi.TokenEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "a-tokens"}, Key: names.AgentTokenKey}}}),
			agentToken: tokenOf(key), wantAuth: "Bearer " + tokenOf(key), wantAcked: []string{uri + "7"}},
		{name: "a pod without its spec (the cache's): the job's token from the key",
			agentToken: tokenOf(key), wantAuth: "Bearer " + tokenOf(key), wantAcked: []string{uri + "7"}},
		{name: "a Job built before tokens: none",
			podAgent: agentEnv(), wantAuth: "", wantAcked: []string{uri + "7"}},
		// The key changed since the pod was built (a manager outside a cluster restarted with a random
		// key) and the pod shows no spec: refused, and safe (the agent keeps protecting what it reported).
		{name: "a pod without its spec built with another key: refused, nothing taken",
			agentToken: tokenOf(oldKey), wantAuth: "Bearer " + tokenOf(key)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tj := newTJ()
			cm, _ := builders.ConfigMap(tj, builders.Options{})
			cm.Annotations = map[string]string{names.ResumeAttemptAnnotation: "0"}
			cm.Data[names.ResumeFromKey] = uri + "4"
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "a-worker-0-0", OwnerReferences: jobOwner("a"),
				Labels: map[string]string{names.NameLabel: "a", names.RankLabel: "0", names.AttemptLabel: "0",
					names.ControllerUIDLabel: "job-uid"}},
				Spec: corev1.PodSpec{InitContainers: tc.podAgent}}
			pod.Status.Phase, pod.Status.PodIP = corev1.PodRunning, "10.1.2.3"
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: names.JobName(tj), UID: "job-uid"}}
			c := fake.NewClientBuilder().WithScheme(NewScheme()).WithObjects(tj, cm, pod, job).WithStatusSubresource(&mlv1.TrainingJob{}).Build()
			agent := newFakeAgent(tc.agentToken, agentapi.Status{Latest: uri + "7", LatestEpoch: 7, Count: 2, Time: t0.Time})
			r := &CheckpointReconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(10), Clock: clocktesting.NewFakeClock(t0.Time),
				Agent: &agentapi.Client{HTTP: &http.Client{Transport: agent}}, TokenKey: key}
			req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ml", Name: "a"}}
			if _, err := r.Reconcile(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			type exchange struct {
				Auth  []string
				Acked []string
			}
			want := exchange{Auth: []string{tc.wantAuth}, Acked: tc.wantAcked}
			if diff := cmp.Diff(want, exchange{Auth: agent.auth, Acked: agent.acked}); diff != "" {
				t.Errorf("Authorization sent, RESUME_FROM the agent took (-want +got):\n%s", diff)
			}
		})
	}
}

// jobOwner is the controller owner reference of a pod of the job name's Job (UID "job-uid", its pods'
// ControllerUIDLabel).
func jobOwner(name string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: names.JobName(tjtest.NewTJ("ml", name).Obj()), UID: "job-uid",
		Controller: ptr.To(true)}}
}
