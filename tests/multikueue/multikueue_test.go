//go:build multikueue

// Package multikueue runs TrainingJobs through Kueue's MultiKueue: three local stacks (a manager and two
// worker clusters, each its own etcd, kube-apiserver, kube-controller-manager, scheduler, process node,
// the real Kueue manager and this operator), the manager's Kueue dispatching to the workers through its
// generic adapter for external frameworks. make test-multikueue runs it; make test its short part.
package multikueue

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/storetest"
	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/node"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

var (
	mk  *local.MultiKueue
	ctx = context.Background()
)

// workerLost is the manager Kueue's workerLostTimeout.
const workerLost = 20 * time.Second

func TestMain(m *testing.M) {
	kueueAssets, err := testenv.KueueAssets()
	if err != nil {
		fmt.Fprintln(os.Stderr, "multikueue:", err)
		os.Exit(1)
	}
	os.Exit(stacktest.MainOf(m, "multikueue", func(o *local.Options, bin string) {
		o.Nodes, o.Kueue, o.ManagerBinary, o.LogLevel = 1, kueueAssets, filepath.Join(bin, "manager"), "1"
	}, func(o local.Options) (func() error, error) {
		var err error
		if mk, err = local.UpMultiKueue(ctx, o, 2, workerLost); err != nil {
			return nil, err
		}
		return mk.Down, nil
	}))
}

const workerCPU = "500m"

// setup makes a namespace on every cluster and queue "lq" in it: each worker's quota fits perWorker
// workers, the manager's all of them.
func setup(t *testing.T, perWorker int64) string {
	t.Helper()
	ns := fmt.Sprintf("mk-%x", time.Now().UnixNano()&0xffffffff)
	q := resource.MustParse(workerCPU)
	q.Mul(perWorker)
	quotas := map[string]resource.Quantity{}
	for _, w := range mk.WorkerNames {
		quotas[w] = q
	}
	if err := mk.Queue(ctx, ns, "cq-"+ns, "lq", quotas); err != nil {
		t.Fatal(err)
	}
	return ns
}

// dispatchedJob is a TrainingJob for MultiKueue: queued in "lq", managed by MultiKueue, workerCPU a worker.
func dispatchedJob(ns, name string, workers, epochs int32, args ...string) *tjtest.TJ {
	return tjtest.NewTJ(ns, name).Workers(workers).GPUs(0).Epochs(epochs).Queue("lq").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Image = "example-trainer:local"
		tj.Spec.Command = []string{"trainer"}
		tj.Spec.Args = append([]string{"--samples=4096", "--features=8", "--rendezvous-timeout=1m"}, args...)
		tj.Spec.Hyperparameters.LearningRate = ptr.To(0.2)
		tj.Spec.Resources = &mlv1.Resources{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(workerCPU)}}
		tj.Spec.ManagedBy = ptr.To(names.MultiKueueController)
	})
}

func get(t *testing.T, s *local.Stack, ns, name string) (*mlv1.TrainingJob, bool) {
	t.Helper()
	tj := &mlv1.TrainingJob{}
	err := s.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tj)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return tj, true
}

// runsOn returns the worker clusters holding a copy of the job.
func runsOn(t *testing.T, ns, name string) []string {
	t.Helper()
	var on []string
	for _, w := range mk.WorkerNames {
		if _, ok := get(t, mk.Workers[w], ns, name); ok {
			on = append(on, w)
		}
	}
	return on
}

// waitRunsOn waits until exactly one worker holds a copy of the job and returns it.
func waitRunsOn(t *testing.T, ns, name string, timeout time.Duration) string {
	t.Helper()
	var on []string
	stacktest.Eventually(t, timeout, name+" dispatched to one worker", func() error {
		if on = runsOn(t, ns, name); len(on) != 1 {
			return fmt.Errorf("copies on %v", on)
		}
		return nil
	})
	return on[0]
}

func waitState(t *testing.T, s *local.Stack, ns, name string, want mlv1.State, timeout time.Duration) *mlv1.TrainingJob {
	t.Helper()
	var tj *mlv1.TrainingJob
	stacktest.Eventually(t, timeout, fmt.Sprintf("%s %s", name, want), func() error {
		var ok bool
		if tj, ok = get(t, s, ns, name); !ok || tj.Status.State != want {
			return fmt.Errorf("found %v, status %+v", ok, tj)
		}
		return nil
	})
	return tj
}

// workloads returns the Workloads of the job on a cluster: their names and whether the job controls each.
func workloads(t *testing.T, s *local.Stack, tj *mlv1.TrainingJob) map[string]bool {
	t.Helper()
	var list kueue.WorkloadList
	if err := s.Client.List(ctx, &list, client.InNamespace(tj.Namespace)); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, wl := range list.Items {
		if wl.Labels[names.NameLabel] == tj.Name || metav1.IsControlledBy(&wl, tj) {
			out[wl.Name] = metav1.IsControlledBy(&wl, tj)
		}
	}
	return out
}

// TestDispatchedAndMirrored: a job submitted to the manager runs on one worker, which holds one Workload
// for it (MultiKueue's, adopted by the copy); the manager shows the worker's status (Completed, progress,
// goodput) and has no Job, ConfigMap or pod of it.
func TestDispatchedAndMirrored(t *testing.T) {
	ns := setup(t, 2)
	tj := dispatchedJob(ns, "far", 2, 6, "--epoch-delay=200ms").Obj()
	stacktest.Create(t, mk.Manager.Client, tj)
	w := waitRunsOn(t, ns, "far", 2*time.Minute)
	running := waitState(t, mk.Workers[w], ns, "far", mlv1.StateRunning, 2*time.Minute)
	owned := workloads(t, mk.Workers[w], running) // MultiKueue removes it once the manager's Workload is finished
	remote := waitState(t, mk.Workers[w], ns, "far", mlv1.StateCompleted, 3*time.Minute)
	// The StatusController writes the final progress after the JobController's Completed: the manager
	// shows it once the worker wrote it.
	var mgr *mlv1.TrainingJob
	stacktest.Eventually(t, time.Minute, "far Completed at 100% on the manager", func() error {
		var ok bool
		if mgr, ok = get(t, mk.Manager, ns, "far"); !ok || mgr.Status.State != mlv1.StateCompleted || mgr.Status.Progress != "100%" {
			return fmt.Errorf("found %v, status %+v", ok, mgr)
		}
		return nil
	})

	type shown struct {
		State         mlv1.State
		Progress      string
		CurrentEpoch  int32
		Goodput       bool
		RunID         string
		ClusterName   string
		RestartCount  int32
		WorkloadOwned map[string]bool
	}
	wantWL := map[string]bool{builders.PrebuiltWorkload(remote): true}
	got := shown{State: mgr.Status.State, Progress: mgr.Status.Progress, CurrentEpoch: mgr.Status.CurrentEpoch,
		Goodput: mgr.Status.Goodput != nil && mgr.Status.Goodput.ProductiveSeconds > 0, RunID: mgr.Status.RunID,
		ClusterName: mgr.Status.ClusterName, RestartCount: mgr.Status.RestartCount, WorkloadOwned: owned}
	want := shown{State: mlv1.StateCompleted, Progress: "100%", CurrentEpoch: 6, Goodput: true,
		RunID: remote.Status.RunID, ClusterName: w, WorkloadOwned: wantWL}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the manager's status and the worker's Workloads (-want +got):\n%s", diff)
	}
	var jobs batchv1.JobList
	var cms corev1.ConfigMapList
	var pods corev1.PodList
	for _, l := range []client.ObjectList{&jobs, &cms, &pods} {
		if err := mk.Manager.Client.List(ctx, l, client.InNamespace(ns), client.MatchingLabels{names.NameLabel: "far"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(jobs.Items) + len(cms.Items) + len(pods.Items); n != 0 {
		t.Errorf("the manager holds %d Jobs, ConfigMaps or pods of the dispatched job, want none", n)
	}
}

// TestOneJobPerWorker: two jobs whose quota fits only one per worker run one on each.
func TestOneJobPerWorker(t *testing.T) {
	ns := setup(t, 2)
	stacktest.Create(t, mk.Manager.Client, dispatchedJob(ns, "a", 2, 30, "--epoch-delay=200ms").Obj(),
		dispatchedJob(ns, "b", 2, 30, "--epoch-delay=200ms").Obj())
	a, b := waitRunsOn(t, ns, "a", 2*time.Minute), waitRunsOn(t, ns, "b", 2*time.Minute)
	if a == b {
		t.Errorf("both jobs on %s, whose quota fits one", a)
	}
	for _, name := range []string{"a", "b"} {
		waitState(t, mk.Manager, ns, name, mlv1.StateCompleted, 3*time.Minute)
	}
}

// TestDeleteRemovesTheCopy: deleting the manager's job removes the worker's copy and its pods.
func TestDeleteRemovesTheCopy(t *testing.T) {
	ns := setup(t, 2)
	tj := dispatchedJob(ns, "gone", 2, 200, "--epoch-delay=200ms").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Scheduling = nil // queued by Kueue's label instead
	}).Label(names.QueueLabel, "lq").Obj()
	stacktest.Create(t, mk.Manager.Client, tj)
	w := waitRunsOn(t, ns, "gone", 2*time.Minute)
	waitState(t, mk.Workers[w], ns, "gone", mlv1.StateRunning, 2*time.Minute)
	if err := mk.Manager.Client.Delete(ctx, tj); err != nil {
		t.Fatal(err)
	}
	stacktest.Eventually(t, 2*time.Minute, "the copy and its pods gone", func() error {
		var pods corev1.PodList
		if err := mk.Workers[w].Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{names.NameLabel: "gone"}); err != nil {
			return err
		}
		if _, ok := get(t, mk.Workers[w], ns, "gone"); ok || len(pods.Items) > 0 {
			return fmt.Errorf("copy there %v, %d pods", ok, len(pods.Items))
		}
		return nil
	})
}

// TestLostWorkerResumes: the worker cluster running a job is lost (its node and, for longer than Kueue's
// workerLostTimeout, its API server); MultiKueue dispatches the job to the other worker, whose copy has the same run ID and
// resumes from the newest checkpoint in the shared S3 bucket: its first epoch is past the epochs that
// checkpoint holds, and the manager shows it Completed with its restart count 0.
func TestLostWorkerResumes(t *testing.T) {
	ns := setup(t, 2)
	gw, _ := startS3(t, "mk-ckpt")
	for _, s := range mk.Clusters() {
		stacktest.Create(t, s.Client, s3Keys(ns))
	}
	tj := dispatchedJob(ns, "lost", 2, 80, "--epoch-delay=300ms").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Frequency: ptr.To[int32](1), Retention: ptr.To[int32](3),
			Storage: &mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "mk-ckpt", Prefix: "runs", Endpoint: gw.Endpoint,
				SecretRef: &corev1.LocalObjectReference{Name: "s3-keys"}}}
	}).Obj()
	stacktest.Create(t, mk.Manager.Client, tj)
	first := waitRunsOn(t, ns, "lost", 2*time.Minute)
	var saved int
	stacktest.Eventually(t, 2*time.Minute, "a checkpoint past epoch 3 on "+first, func() error {
		c, _ := get(t, mk.Workers[first], ns, "lost")
		if c == nil || c.Status.Checkpoint == nil || c.Status.Checkpoint.LatestEpoch < 3 {
			return fmt.Errorf("checkpoints %+v", c)
		}
		saved = int(c.Status.Checkpoint.LatestEpoch)
		return nil
	})
	firstCopy, _ := get(t, mk.Workers[first], ns, "lost")
	lostAt := time.Now()
	// The whole cluster goes: its node (the pods with it: otherwise they train on into the same run
	// directory, docs/kueue.md) and its API server.
	if err := mk.Workers[first].PartitionNode("process-node-0"); err != nil {
		t.Fatal(err)
	}
	down := make(chan error, 1)
	go func() { down <- mk.Workers[first].Cluster.RestartAPIServer(workerLost + 40*time.Second) }()
	t.Cleanup(func() { <-down })
	var second string
	stacktest.Eventually(t, 3*time.Minute, "the job dispatched to the other worker", func() error {
		for _, w := range mk.WorkerNames {
			if w == first {
				continue
			}
			if _, ok := get(t, mk.Workers[w], ns, "lost"); ok {
				second = w
				return nil
			}
		}
		return fmt.Errorf("no copy on another worker than %s", first)
	})
	redispatched := time.Since(lostAt)
	secondCopy := waitState(t, mk.Workers[second], ns, "lost", mlv1.StateRunning, 2*time.Minute)
	if secondCopy.Status.RunID != firstCopy.Status.RunID {
		t.Errorf("run ID on %s %q, on %s %q: want the same run", second, secondCopy.Status.RunID, first, firstCopy.Status.RunID)
	}
	done := waitState(t, mk.Manager, ns, "lost", mlv1.StateCompleted, 4*time.Minute)
	log := node.AllLogs(mk.Workers[second].DataRoot, ns, "lost-worker-0-*", names.ContainerName)
	resumed := regexp.MustCompile(`(?m)^resuming from \S+ \(epoch (\d+),`).FindStringSubmatch(log)
	if resumed == nil {
		t.Fatalf("rank 0 on %s did not resume from a checkpoint; its log:\n%s", second, log)
	}
	if e, _ := strconv.Atoi(resumed[1]); e < saved {
		t.Errorf("resumed from epoch %d on %s, older than the checkpoint of epoch %d seen on %s", e, second, saved, first)
	}
	if done.Status.RestartCount != 0 {
		t.Errorf("restart count %d on the manager, want 0: the lost cluster is not the job's failure", done.Status.RestartCount)
	}
	if g := done.Status.Goodput; g == nil || g.BadputSeconds.Queued < redispatched.Seconds()/2 {
		t.Errorf("goodput %+v: want the time before the copy on %s existed (%s) counted", g, second, redispatched)
	}
	t.Logf("lost %s at %s; copy on %s after %s; resumed from %s (saved epoch %d on %s)", first, lostAt.Format(time.TimeOnly), second,
		redispatched.Round(time.Second), resumed[0], saved, first)
}

// startS3 runs versitygw (hack/objstore.sh; $VERSITYGW) with a bucket, until the test ends.
func startS3(t *testing.T, bucket string) (*storetest.VersityGW, *checkpoint.S3Store) {
	t.Helper()
	gw := storetest.NewVersityGW(t, "mk-access", "mk-secret-key")
	return gw, gw.Bucket(bucket)
}

func s3Keys(ns string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-keys", Namespace: ns},
		StringData: map[string]string{checkpoint.SecretS3AccessKey: "mk-access", checkpoint.SecretS3SecretKey: "mk-secret-key"}}
}

// TestManagedByDefaulted: a job created in a LocalQueue whose ClusterQueue dispatches through MultiKueue
// gets spec.managedBy kueue.x-k8s.io/multikueue at admission (the QueueController's ConfigMap, read by the
// admission policy); one in a queue of a worker (no MultiKueue check) or naming its own managedBy keeps
// what it wrote, and an update of a created job changes nothing.
func TestManagedByDefaulted(t *testing.T) {
	ns := setup(t, 2)
	stacktest.Eventually(t, time.Minute, "the manager's ConfigMap lists lq", func() error {
		cm := &corev1.ConfigMap{}
		key := client.ObjectKey{Namespace: controllers.DefaultNamespace, Name: names.MultiKueueQueuesConfigMap}
		if err := mk.Manager.Client.Get(ctx, key, cm); err != nil {
			return err
		}
		if _, ok := cm.Data[ns+".lq"]; !ok {
			return fmt.Errorf("data %v", cm.Data)
		}
		return nil
	})
	unset := func(name string) *mlv1.TrainingJob {
		return dispatchedJob(ns, name, 1, 2).With(func(tj *mlv1.TrainingJob) { tj.Spec.ManagedBy = nil }).Obj()
	}
	own := unset("own")
	own.Spec.ManagedBy = ptr.To(names.ControllerName)
	onManager, onWorker := unset("defaulted"), unset("local")
	stacktest.Create(t, mk.Manager.Client, onManager, own)
	stacktest.Create(t, mk.Workers[mk.WorkerNames[0]].Client, onWorker)
	type managed struct{ Defaulted, Own, OnWorker string }
	got := managed{ptr.Deref(onManager.Spec.ManagedBy, ""), ptr.Deref(own.Spec.ManagedBy, ""), ptr.Deref(onWorker.Spec.ManagedBy, "")}
	if diff := cmp.Diff(managed{Defaulted: names.MultiKueueController, Own: names.ControllerName}, got); diff != "" {
		t.Errorf("spec.managedBy as created (-want +got):\n%s", diff)
	}
	before := onWorker.DeepCopy()
	onWorker.Labels = map[string]string{"touched": "yes"}
	if err := mk.Workers[mk.WorkerNames[0]].Client.Patch(ctx, onWorker, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	if onWorker.Spec.ManagedBy != nil {
		t.Errorf("an update set managedBy %q", *onWorker.Spec.ManagedBy)
	}
}

// workerJob is a job created on a worker cluster itself (no MultiKueue), queued in lq unless queue is "".
func workerJob(ns, name, queue string, epochs int32) *mlv1.TrainingJob {
	return dispatchedJob(ns, name, 1, epochs, "--epoch-delay=200ms").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.ManagedBy, tj.Spec.Scheduling = nil, nil
		if queue != "" {
			tj.Spec.Scheduling = &mlv1.SchedulingSpec{QueueName: queue}
		}
	}).Obj()
}

// TestForeignWorkloadIsNeverFinished: on a worker, a tenant whose job has finished names a running job's
// Workload as its prebuilt Workload, origin label included (what MultiKueue writes on its copies): the
// running job's Workload stays unfinished, its finalizer kept, so Kueue keeps charging its quota.
func TestForeignWorkloadIsNeverFinished(t *testing.T) {
	ns := setup(t, 2)
	w := mk.Workers[mk.WorkerNames[0]]
	victim, done := workerJob(ns, "victim", "lq", 200), workerJob(ns, "done", "", 2)
	stacktest.Create(t, w.Client, victim, done)
	waitState(t, w, ns, "victim", mlv1.StateRunning, 2*time.Minute)
	waitState(t, w, ns, "done", mlv1.StateCompleted, 2*time.Minute)
	owned := workloads(t, w, victim)
	if len(owned) != 1 {
		t.Fatalf("the victim's Workloads %v, want one", owned)
	}
	var name string
	for n := range owned {
		name = n
	}
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"manager"},"annotations":{%q:%q}}}`,
		names.MultiKueueOriginLabel, names.PrebuiltWorkloadKey, name)
	if err := w.Client.Patch(ctx, done, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	// The patch is reconciled within the watch's delivery; 5 s bounds the look, it measures nothing.
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		got := &kueue.Workload{}
		if err := w.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, got); err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, kueue.WorkloadFinished); c != nil || len(got.Finalizers) == 0 {
			t.Fatalf("the victim's Workload was finished by another job: Finished %+v, finalizers %v", c, got.Finalizers)
		}
	}
}

// TestForgedDispatchedRunID: a job created on a worker with a dispatched copy's keys but no Workload made
// for it waits and never runs under that run; once the keys go it runs under a run ID of its own, its UID.
func TestForgedDispatchedRunID(t *testing.T) {
	ns := setup(t, 2)
	w := mk.Workers[mk.WorkerNames[0]]
	forged := workerJob(ns, "train", "", 2)
	forged.Labels = map[string]string{names.MultiKueueOriginLabel: "manager"}
	forged.Annotations = map[string]string{names.PrebuiltWorkloadKey: "trainingjob-train-0badf00d"}
	stacktest.Create(t, w.Client, forged)
	waitState(t, w, ns, "train", mlv1.StateSuspended, time.Minute) // waiting for MultiKueue's Workload
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:null},"annotations":{%q:null}}}`,
		names.MultiKueueOriginLabel, names.PrebuiltWorkloadKey)
	if err := w.Client.Patch(ctx, forged, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	got := waitState(t, w, ns, "train", mlv1.StateCompleted, 2*time.Minute)
	if got.Status.RunID != string(got.UID) {
		t.Errorf("run ID %q, want its UID %s: not the forged copy's run", got.Status.RunID, got.UID)
	}
}
