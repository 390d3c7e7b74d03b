package controllers

import (
	"context"
	"net/http"
	"strconv"
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
					withFinalReport(p, `{"latest":"`+evil+`","latestEpoch":999,"count":1,`+
						`"time":"2026-01-01T00:00:00Z","earlierRuns":[{"latest":"s3://evil/resume-me/checkpoint-epoch-1000"}]}`)
				}},
			} {
				t.Run(tc.name+" "+evil+" owner "+owner, func(t *testing.T) {
					forged := rank0Pod("zz-not-yours", "0", owner)
					tc.forge(forged)
					// The real rank 0, made by the Job, still pending (scheduling, pulling its image).
					s := newRank0Scene(t, s3Storage, 0, own+"4", report, forged, rank0Pod("a-worker-0-0", "0", "job-uid"))
					s.reconcile(t, 1)
					token := builders.AgentToken(s.tj, builders.Options{AgentTokenKey: s.r.TokenKey})
					for _, a := range s.agent.auth {
						if a == "Bearer "+token {
							t.Errorf("the job's agent token was sent to a pod nobody's Job made")
						}
					}
					if latest, resumeFrom := s.resumeFrom(t); latest == evil || resumeFrom == evil {
						t.Errorf("a forged rank 0 moved status.checkpoint.latest to %q, RESUME_FROM to %q", latest, resumeFrom)
					}
					close(s.rec.Events)
					for e := range s.rec.Events {
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
	forged := withFinalReport(rank0Pod("zz-not-yours", "0", ""), `{"latest":"`+evil+`","latestEpoch":999,`+
		`"count":1,"time":"2026-01-01T00:00:00Z"}`)
	s := newRank0Scene(t, s3Storage, 0, "s3://b/ml/a/uid-1/checkpoint-epoch-4", agentapi.Status{})
	// The watch sees the pod's end (it is deleted since: the cache no longer lists it).
	s.r.recordingFinals(handler.Funcs{}).Delete(context.Background(), event.DeleteEvent{Object: forged}, nil)
	s.reconcile(t, 1)
	latest, resumeFrom := s.resumeFrom(t)
	t.Logf("status.checkpoint.latest %q, RESUME_FROM %q", latest, resumeFrom)
	if latest == evil || resumeFrom == evil {
		t.Errorf("a labels-only pod's termination message (via the watch's finals) moved status.checkpoint.latest to %q, RESUME_FROM to %q",
			latest, resumeFrom)
	}
}

// s3Storage is the forged rank 0 tests' checkpoint storage.
var s3Storage = &mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "b"}

// rank0Scene is the CheckpointController over job ml/a (UID and run uid-1), Running at attempt, whose
// status and RESUME_FROM (settled for the attempt) name its checkpoint own, with its Job (UID job-uid) and
// more objects (the real rank 0, a forged one); every agent it reaches answers report.
type rank0Scene struct {
	c     client.Client
	r     *CheckpointReconciler
	agent *fakeAgent
	rec   *events.FakeRecorder
	tj    *mlv1.TrainingJob
	cm    *corev1.ConfigMap
}

func newRank0Scene(t *testing.T, storage *mlv1.CheckpointStorage, attempt int32, own string, report agentapi.Status,
	objs ...client.Object) *rank0Scene {
	t.Helper()
	tj := tjtest.NewTJ("ml", "a").Checkpoints(storage.DeepCopy()).Obj()
	tj.UID = "uid-1"
	tj.Status.State, tj.Status.Attempt, tj.Status.RunID = mlv1.StateRunning, attempt, "uid-1"
	epoch, _ := agentapi.EpochOf(own)
	tj.Status.Checkpoint = &mlv1.CheckpointStatus{Latest: own, LatestEpoch: int32(epoch)}
	cm, err := builders.ConfigMap(tj, builders.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Annotations = map[string]string{names.ResumeAttemptAnnotation: strconv.Itoa(int(attempt))}
	cm.Data[names.ResumeFromKey] = own
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: names.JobName(tj), UID: "job-uid"}}
	c := fake.NewClientBuilder().WithScheme(NewScheme()).WithObjects(append([]client.Object{tj, cm, job}, objs...)...).
		WithStatusSubresource(&mlv1.TrainingJob{}).Build()
	agent := newFakeAgent("", report) // takes any PUT, records its Authorization
	rec := events.NewFakeRecorder(10)
	r := &CheckpointReconciler{Client: c, APIReader: c, Recorder: rec, Clock: clocktesting.NewFakeClock(t0.Time),
		Agent: &agentapi.Client{HTTP: &http.Client{Transport: agent}}, TokenKey: builders.SecretKey(strings.Repeat("k", 32))}
	return &rank0Scene{c: c, r: r, agent: agent, rec: rec, tj: tj, cm: cm}
}

// reconcile runs the CheckpointController n times on the job.
func (s *rank0Scene) reconcile(t *testing.T, n int) {
	t.Helper()
	for range n {
		if _, err := s.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s.tj)}); err != nil {
			t.Fatal(err)
		}
	}
}

// resumeFrom returns the job's status.checkpoint.latest and its ConfigMap's RESUME_FROM as stored.
func (s *rank0Scene) resumeFrom(t *testing.T) (latest, resumeFrom string) {
	t.Helper()
	got, cm := &mlv1.TrainingJob{}, &corev1.ConfigMap{}
	if err := s.c.Get(context.Background(), client.ObjectKeyFromObject(s.tj), got); err != nil {
		t.Fatal(err)
	}
	if err := s.c.Get(context.Background(), client.ObjectKeyFromObject(s.cm), cm); err != nil {
		t.Fatal(err)
	}
	if got.Status.Checkpoint != nil {
		latest = got.Status.Checkpoint.Latest
	}
	return latest, cm.Data[names.ResumeFromKey]
}

// rank0Pod returns a pending rank 0 pod of job ml/a labelled attempt; with jobUID, its controller
// reference and controller-uid label name that Job UID (job-uid is the scene's Job), else labels alone.
func rank0Pod(name, attempt, jobUID string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name,
		Labels: map[string]string{names.NameLabel: "a", names.RankLabel: "0", names.AttemptLabel: attempt}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
	if jobUID != "" {
		p.Labels[names.ControllerUIDLabel] = jobUID
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: names.JobNameOf("a"),
			UID: types.UID(jobUID), Controller: ptr.To(true)}}
	}
	return p
}

// withFinalReport ends p with its checkpoint agent's termination message report (its final report).
func withFinalReport(p *corev1.Pod, report string) *corev1.Pod {
	p.Status.Phase = corev1.PodFailed
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: names.AgentContainerName, State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{Message: report, FinishedAt: t0}}}}
	return p
}
