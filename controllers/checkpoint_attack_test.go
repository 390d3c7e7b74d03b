package controllers

import (
	"context"
	"net/http"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestAttackForgedRank0Pod: "a label alone is anybody's" (madeBy), yet the CheckpointController takes rank 0
// by labels alone (rank0Pods: name + completion index; runningRank0 and FinalReport check no owner). Someone
// who may create pods in the namespace but not edit the TrainingJob makes one with the job's name, rank 0
// and attempt labels, no controller-uid label, no owner: it serves /status (or leaves a termination message
// in an init container named checkpoint-agent). The operator then
//   - sends it the job's agent token (PUT /resume-from), which the real agent accepts;
//   - puts the forged checkpoint into status.checkpoint.latest and RESUME_FROM: the job's next attempt
//     resumes from a checkpoint the stranger wrote (torch.load of a stranger's pickle);
//   - says EarlierRunsFound, recommending the stranger's path.
//
// None of it happens, with labels alone or with a controller reference and controller-uid label that name
// a Job UID of the pod's own making, whether the report names another store or a checkpoint in the run's
// own directory.
func TestAttackForgedRank0Pod(t *testing.T) {
	const own = "s3://b/ml/a/uid-1/checkpoint-epoch-"
	key := builders.SecretKey(strings.Repeat("k", 32))
	// made-up: a controller reference and controller-uid label naming a Job UID of the pod's own making.
	for _, owner := range []string{"", "made-up"} {
		for _, evil := range []string{"s3://evil/anything/checkpoint-epoch-999", own + "999"} {
			report := agentapi.Status{Latest: evil, LatestEpoch: 999, Count: 1, Time: t0.Time,
				EarlierRuns: []agentapi.EarlierRun{{Latest: "s3://evil/resume-me/checkpoint-epoch-1000"}}}
			for _, tc := range []struct {
				name  string
				forge func(p *corev1.Pod)
			}{
				{name: "running, serving /status", forge: func(p *corev1.Pod) { p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.6.6.6" }},
				{name: "ended, its termination message as the final report", forge: func(p *corev1.Pod) {
					p.Status.Phase = corev1.PodFailed
					p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: names.AgentContainerName, State: corev1.ContainerState{
						Terminated: &corev1.ContainerStateTerminated{Message: `{"latest":"` + evil + `","latestEpoch":999,"count":1,` +
							`"time":"2026-01-01T00:00:00Z","earlierRuns":[{"latest":"s3://evil/resume-me/checkpoint-epoch-1000"}]}`,
							FinishedAt: t0}}}}
				}},
			} {
				t.Run(tc.name+" "+evil+" owner "+owner, func(t *testing.T) {
					tj := tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "b"}).Obj()
					tj.UID = "uid-1"
					tj.Status.State, tj.Status.Attempt, tj.Status.RunID = mlv1.StateRunning, 0, "uid-1"
					tj.Status.Checkpoint = &mlv1.CheckpointStatus{Latest: own + "4", LatestEpoch: 4}
					cm, _ := builders.ConfigMap(tj, builders.Options{})
					cm.Annotations = map[string]string{names.ResumeAttemptAnnotation: "0"}
					cm.Data[names.ResumeFromKey] = own + "4"
					job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: names.JobName(tj), UID: "job-uid"}}
					// The real rank 0, made by the Job, still pending (scheduling, pulling its image).
					real := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "a-worker-0-0",
						Labels: map[string]string{names.NameLabel: "a", names.RankLabel: "0", names.AttemptLabel: "0",
							names.ControllerUIDLabel: "job-uid"},
						OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: "job-uid",
							Controller: ptr.To(true)}}},
						Status: corev1.PodStatus{Phase: corev1.PodPending}}
					forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "zz-not-yours",
						Labels: map[string]string{names.NameLabel: "a", names.RankLabel: "0", names.AttemptLabel: "0"}}}
					if owner != "" {
						forged.Labels[names.ControllerUIDLabel] = owner
						forged.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name,
							UID: types.UID(owner), Controller: ptr.To(true)}}
					}
					tc.forge(forged)
					c := fake.NewClientBuilder().WithScheme(NewScheme()).WithObjects(tj, cm, job, real, forged).
						WithStatusSubresource(&mlv1.TrainingJob{}).Build()
					agent := newFakeAgent("", report) // the stranger's server: takes any PUT, records its Authorization
					rec := events.NewFakeRecorder(10)
					r := &CheckpointReconciler{Client: c, APIReader: c, Recorder: rec, Clock: clocktesting.NewFakeClock(t0.Time),
						Agent: &agentapi.Client{HTTP: &http.Client{Transport: agent}}, TokenKey: key}
					req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ml", Name: "a"}}
					if _, err := r.Reconcile(context.Background(), req); err != nil {
						t.Fatal(err)
					}
					token := builders.AgentToken(tj, builders.Options{AgentTokenKey: key})
					for _, a := range agent.auth {
						if a == "Bearer "+token {
							t.Errorf("the job's agent token was sent to a pod nobody's Job made")
						}
					}
					got := &mlv1.TrainingJob{}
					_ = c.Get(context.Background(), req.NamespacedName, got)
					gotCM := &corev1.ConfigMap{}
					_ = c.Get(context.Background(), client.ObjectKeyFromObject(cm), gotCM)
					if got.Status.Checkpoint.Latest == evil || gotCM.Data[names.ResumeFromKey] == evil {
						t.Errorf("a forged rank 0 moved status.checkpoint.latest to %q, RESUME_FROM to %q", got.Status.Checkpoint.Latest,
							gotCM.Data[names.ResumeFromKey])
					}
					close(rec.Events)
					for e := range rec.Events {
						if strings.Contains(e, "EarlierRunsFound") {
							t.Errorf("event from a forged report: %s", e)
						}
					}
				})
			}
		}
	}
}

// TestFinalsByLabelsAlone: the CheckpointController's pod watch (recordingFinals) keeps no final report of
// a rank 0 pod by its labels alone: a hand-made pod's init container named checkpoint-agent leaves a
// termination message naming another store, and the next reconcile does not apply it.
func TestFinalsByLabelsAlone(t *testing.T) {
	const evil = "s3://evil/anything/checkpoint-epoch-999"
	tj := tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "b"}).Obj()
	tj.UID = "uid-1"
	tj.Status.State, tj.Status.Attempt, tj.Status.RunID = mlv1.StateRunning, 0, "uid-1"
	tj.Status.Checkpoint = &mlv1.CheckpointStatus{Latest: "s3://b/ml/a/uid-1/checkpoint-epoch-4", LatestEpoch: 4}
	cm, _ := builders.ConfigMap(tj, builders.Options{})
	cm.Annotations = map[string]string{names.ResumeAttemptAnnotation: "0"}
	cm.Data[names.ResumeFromKey] = tj.Status.Checkpoint.Latest
	forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "zz-not-yours",
		Labels: map[string]string{names.NameLabel: "a", names.RankLabel: "0", names.AttemptLabel: "0"}},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, InitContainerStatuses: []corev1.ContainerStatus{{Name: names.AgentContainerName,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: `{"latest":"` + evil + `","latestEpoch":999,` +
				`"count":1,"time":"2026-01-01T00:00:00Z"}`, FinishedAt: t0}}}}}}
	c := fake.NewClientBuilder().WithScheme(NewScheme()).WithObjects(tj, cm).WithStatusSubresource(&mlv1.TrainingJob{}).Build()
	r := &CheckpointReconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(10), Clock: clocktesting.NewFakeClock(t0.Time),
		Agent:    &agentapi.Client{HTTP: &http.Client{Transport: newFakeAgent("", agentapi.Status{})}},
		TokenKey: builders.SecretKey(strings.Repeat("k", 32))}
	// The watch sees the pod's end (it is deleted since: the cache no longer lists it).
	r.recordingFinals(handler.Funcs{}).Delete(context.Background(), event.DeleteEvent{Object: forged}, nil)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ml", Name: "a"}}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got := &mlv1.TrainingJob{}
	_ = c.Get(context.Background(), req.NamespacedName, got)
	gotCM := &corev1.ConfigMap{}
	_ = c.Get(context.Background(), client.ObjectKeyFromObject(cm), gotCM)
	t.Logf("status.checkpoint.latest %q, RESUME_FROM %q", got.Status.Checkpoint.Latest, gotCM.Data[names.ResumeFromKey])
	if got.Status.Checkpoint.Latest == evil || gotCM.Data[names.ResumeFromKey] == evil {
		t.Errorf("a labels-only pod's termination message (via the watch's finals) moved status.checkpoint.latest to %q, RESUME_FROM to %q",
			got.Status.Checkpoint.Latest, gotCM.Data[names.ResumeFromKey])
	}
}
