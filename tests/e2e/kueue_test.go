package e2e

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/node"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// The real Kueue manager (hack/kueue.sh) admits the TrainingJobs of these tests: TrainingJob is its
// external framework, and the operator keeps one Workload per job (docs/kueue.md).

// workerCPU is what each queued worker requests: a ClusterQueue's quota of n workers is n times it.
const workerCPU = "500m"

// kueueSetup creates a ResourceFlavor (the given one, else a plain one), a ClusterQueue for ns alone with
// a CPU quota of workers workers, preempting lower priorities within it, and the LocalQueue "lq" in ns.
func kueueSetup(t *testing.T, ns string, workers int64, flavor *kueue.ResourceFlavor) {
	t.Helper()
	if flavor == nil {
		flavor = &kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "rf-" + ns}}
	}
	quota := resource.MustParse(workerCPU)
	quota.Mul(workers)
	cq := &kueue.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: "cq-" + ns},
		Spec: kueue.ClusterQueueSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			Preemption:        &kueue.ClusterQueuePreemption{WithinClusterQueue: kueue.PreemptionPolicyLowerPriority},
			ResourceGroups: []kueue.ResourceGroup{{CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
				Flavors: []kueue.FlavorQuotas{{Name: kueue.ResourceFlavorReference(flavor.Name),
					Resources: []kueue.ResourceQuota{{Name: corev1.ResourceCPU, NominalQuota: quota}}}}}},
		},
	}
	lq := &kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lq"},
		Spec: kueue.LocalQueueSpec{ClusterQueue: kueue.ClusterQueueReference(cq.Name)}}
	createClusterScoped(t, flavor, cq)
	create(t, lq)
}

// createClusterScoped creates cluster-scoped objects and deletes them when the test ends.
func createClusterScoped(t *testing.T, objs ...client.Object) {
	t.Helper()
	create(t, objs...)
	t.Cleanup(func() {
		for _, o := range objs {
			_ = stack.Client.Delete(context.Background(), o) // the stack goes at the end anyway
		}
	})
}

// queuedJob returns a trainerJob of workerCPU per worker queued in "lq".
func queuedJob(ns, name string, workers, epochs int32, args ...string) *tjtest.TJ {
	return trainerJob(ns, name, workers, epochs, args...).Queue("lq").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Resources = &mlv1.Resources{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(workerCPU)}}
	})
}

// workloads returns the Kueue Workloads in ns.
func workloads(t *testing.T, ns string) []kueue.Workload {
	t.Helper()
	list := &kueue.WorkloadList{}
	if err := stack.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// workloadOf returns the TrainingJob's Workload.
func workloadOf(t *testing.T, ns, name string) *kueue.Workload {
	t.Helper()
	for _, wl := range workloads(t, ns) {
		if owner := metav1.GetControllerOf(&wl); owner != nil && owner.Kind == "TrainingJob" && owner.Name == name {
			return &wl
		}
	}
	t.Fatalf("no Workload owned by TrainingJob %s/%s", ns, name)
	return nil
}

// timeline records, every 100 ms, each TrainingJob of ns's changes of state and reason, with when they
// were seen, until the test ends.
type timeline struct {
	mu      sync.Mutex
	changes map[string][]change
}

type change struct {
	at     time.Time
	state  mlv1.State
	reason string
}

func watchTimeline(t *testing.T, ns string) *timeline {
	tl := &timeline{changes: map[string][]change{}}
	c, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for c.Err() == nil {
			list := &mlv1.TrainingJobList{}
			if err := stack.Client.List(c, list, client.InNamespace(ns)); err == nil {
				tl.record(list.Items, time.Now())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return tl
}

func (tl *timeline) record(jobs []mlv1.TrainingJob, now time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, tj := range jobs {
		ch, seen := change{at: now, state: tj.Status.State, reason: reasonOf(&tj)}, tl.changes[tj.Name]
		if len(seen) == 0 || seen[len(seen)-1].state != ch.state || seen[len(seen)-1].reason != ch.reason {
			tl.changes[tj.Name] = append(seen, ch)
		}
	}
}

// reasonOf returns the reason of the condition of the job's state.
func reasonOf(tj *mlv1.TrainingJob) string {
	if c := meta.FindStatusCondition(tj.Status.Conditions, string(tj.Status.State)); c != nil {
		return c.Reason
	}
	return ""
}

// String lists the changes in order.
func (tl *timeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var lines []string
	for name, chs := range tl.changes {
		for _, ch := range chs {
			lines = append(lines, fmt.Sprintf("%s %s %s %s", ch.at.Format("15:04:05.000"), name, ch.state, ch.reason))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// started returns when the job was first seen starting its workers (Initializing, or Running when that was
// too short to be seen) after the time given.
func (tl *timeline) started(name string, after time.Time) time.Time {
	if at := tl.at(name, mlv1.StateInitializing, "", after); !at.IsZero() {
		return at
	}
	return tl.at(name, mlv1.StateRunning, "", after)
}

// at returns when the job was first seen in state (and reason, when not "") after the time given; the zero
// time when never.
func (tl *timeline) at(name string, state mlv1.State, reason string, after time.Time) time.Time {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, ch := range tl.changes[name] {
		if ch.state == state && (reason == "" || ch.reason == reason) && ch.at.After(after) {
			return ch.at
		}
	}
	return time.Time{}
}

// TestKueueQuotaQueuesJobs: a ClusterQueue with quota for 4 workers and three 2-worker TrainingJobs (one
// queued the Kueue way, by its label): two run, the third waits Suspended/Queued in Kueue's words and runs
// once one of them finishes. Each TrainingJob has one Workload, and no Job is charged: Kueue made no
// Workload of its own.
func TestKueueQuotaQueuesJobs(t *testing.T) {
	ns := newNamespace(t)
	kueueSetup(t, ns, 4, nil)
	tl := watchTimeline(t, ns)
	create(t, queuedJob(ns, "a", 2, 16, "--epoch-delay=500ms").Obj())
	create(t, queuedJob(ns, "b", 2, 20, "--epoch-delay=500ms").Obj())
	runningPIDs(t, ns, "a", 2)
	runningPIDs(t, ns, "b", 2)
	create(t, queuedJob(ns, "c", 2, 6, "--epoch-delay=200ms").Queue("").Label(names.QueueLabel, "lq").Obj())
	eventually(t, time.Minute, "two jobs running, one Suspended/Queued for quota", func() error {
		var running, queued []string
		for _, n := range []string{"a", "b", "c"} {
			tj := getTJ(t, ns, n)
			c := condition(tj, mlv1.ConditionSuspended)
			switch {
			case tj.Status.State == mlv1.StateRunning:
				running = append(running, n)
			case tj.Status.State == mlv1.StateSuspended && c != nil && c.Reason == "Queued" &&
				strings.Contains(c.Message, "insufficient unused quota for cpu"):
				queued = append(queued, n)
			}
		}
		if len(running) != 2 || len(queued) != 1 {
			return fmt.Errorf("running %v, queued for quota %v", running, queued)
		}
		if queued[0] != "c" {
			return fmt.Errorf("%s waits, want c (created once the others ran)", queued[0])
		}
		return nil
	})
	if got := getTJ(t, ns, "c"); len(workerPods(t, ns, "c")) != 0 || got.Status.Workers.Active != 0 {
		t.Errorf("the queued job has workers")
	}
	for _, n := range []string{"a", "b", "c"} {
		waitForState(t, ns, n, mlv1.StateCompleted, 3*time.Minute)
	}
	assertOneWorkloadPerJob(t, ns, "a", "b", "c")
	var zero time.Time
	queued, freed := tl.at("c", mlv1.StateSuspended, "Queued", zero), tl.at("a", mlv1.StateCompleted, "", zero)
	if b := tl.at("b", mlv1.StateCompleted, "", zero); b.Before(freed) {
		freed = b
	}
	started, running := tl.started("c", zero), tl.at("c", mlv1.StateRunning, "", zero)
	if started.Before(freed) {
		t.Errorf("c started at %s, before a or b completed at %s", started.Format(time.StampMilli), freed.Format(time.StampMilli))
	}
	t.Logf("c queued %.1fs; from the first completion to c's workers starting %.2fs, to Running %.2fs",
		started.Sub(queued).Seconds(), started.Sub(freed).Seconds(), running.Sub(freed).Seconds())
	// The Workload is finished, and its finalizer dropped, by the reconcile after the one that wrote Completed.
	eventually(t, 30*time.Second, "every workload finished, with no finalizer", func() error {
		for _, wl := range workloads(t, ns) {
			if !meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished) || len(wl.Finalizers) != 0 {
				return fmt.Errorf("workload %s: Finished %v, finalizers %v; want finished, none", wl.Name, wl.Status.Conditions, wl.Finalizers)
			}
		}
		return nil
	})
}

// assertOneWorkloadPerJob: the namespace holds exactly one Workload per TrainingJob named, each owned by
// it: none of the Jobs got a Workload of its own.
func assertOneWorkloadPerJob(t *testing.T, ns string, jobs ...string) {
	t.Helper()
	var owners []string
	for _, wl := range workloads(t, ns) {
		owner := metav1.GetControllerOf(&wl)
		if owner == nil || owner.Kind != "TrainingJob" {
			t.Errorf("workload %s is not a TrainingJob's (owner %v): a Job was charged", wl.Name, owner)
			continue
		}
		owners = append(owners, owner.Name)
	}
	if len(owners) != len(jobs) {
		t.Errorf("workloads of %v, want one for each of %v", owners, jobs)
	}
}

// TestKueueGangRestartKeepsTheWorkload: an admitted job whose rank dies restarts as a new attempt under the
// same Workload and admission, rank 0's pod restarted in place and rank 1's replaced alone: no requeue, so the
// job waiting behind it in the queue does not take its quota.
func TestKueueGangRestartKeepsTheWorkload(t *testing.T) {
	ns, name := newNamespace(t), "restart"
	kueueSetup(t, ns, 2, nil)
	create(t, queuedJob(ns, name, 2, 30, "--epoch-delay=200ms").Obj())
	pids := runningPIDs(t, ns, name, 2)
	waitPodsReady(t, ns, name, kueue.WorkloadStarted)
	before := workloadOf(t, ns, name)
	reserved := meta.FindStatusCondition(before.Status.Conditions, kueue.WorkloadQuotaReserved)
	create(t, queuedJob(ns, "behind", 2, 3).Obj())
	eventually(t, time.Minute, "the second job queued", func() error {
		if tj := getTJ(t, ns, "behind"); tj.Status.State != mlv1.StateSuspended || reasonOf(tj) != "Queued" {
			return fmt.Errorf("state %s %s", tj.Status.State, reasonOf(tj))
		}
		return nil
	})
	if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "attempt 1 running", func() error {
		if tj := getTJ(t, ns, name); tj.Status.Attempt != 1 || tj.Status.State != mlv1.StateRunning {
			return fmt.Errorf("attempt %d, state %s", tj.Status.Attempt, tj.Status.State)
		}
		return nil
	})
	if tj := getTJ(t, ns, "behind"); tj.Status.State != mlv1.StateSuspended {
		t.Errorf("the job behind took the quota during the restart: %s", tj.Status.State)
	}
	// Rank 1's supervisor was killed, not its trainer: its pod failed and is replaced alone, rank 0's in place.
	assertEvent(t, ns, "Restarting", "attempt 1: 1 worker's pod restarts in place; the Job controller replaces pod restart-worker-1-")
	assertKeptPods(t, getTJ(t, ns, name), 0)
	waitPodsReady(t, ns, name, kueue.WorkloadRecovered)
	after := workloadOf(t, ns, name)
	again := meta.FindStatusCondition(after.Status.Conditions, kueue.WorkloadQuotaReserved)
	if after.UID != before.UID || again == nil || again.Status != metav1.ConditionTrue ||
		!again.LastTransitionTime.Equal(&reserved.LastTransitionTime) {
		t.Errorf("workload %s (QuotaReserved %v) became %s (QuotaReserved %v); want the same, admitted all along",
			before.UID, reserved, after.UID, again)
	}
	if c := meta.FindStatusCondition(after.Status.Conditions, kueue.WorkloadRequeued); c != nil && c.Status == metav1.ConditionTrue {
		t.Errorf("the workload was requeued: %v", c)
	}
	waitForState(t, ns, name, mlv1.StateCompleted, 3*time.Minute)
	waitForState(t, ns, "behind", mlv1.StateCompleted, 2*time.Minute)
	assertOneWorkloadPerJob(t, ns, name, "behind")
}

// waitPodsReady waits for the Workload's PodsReady condition (Kueue's waitForPodsReady, on in the stack)
// to be true with the reason given: Started the first time all workers are ready, Recovered after a restart.
func waitPodsReady(t *testing.T, ns, name, reason string) {
	t.Helper()
	eventually(t, time.Minute, "PodsReady "+reason, func() error {
		wl := workloadOf(t, ns, name)
		c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadPodsReady)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason {
			var mf []string
			for _, m := range wl.ManagedFields {
				mf = append(mf, fmt.Sprintf("%s %s %s %s", m.Manager, m.Operation, m.Subresource, m.FieldsV1))
			}
			tj := getTJ(t, ns, name)
			return fmt.Errorf("PodsReady %+v; job %s attempt %d workers %+v; managed fields:\n%s",
				c, tj.Status.State, tj.Status.Attempt, tj.Status.Workers, strings.Join(mf, "\n"))
		}
		return nil
	})
}

// TestKueueManagedByMultiKueue: a TrainingJob MultiKueue runs on a worker cluster gets only its Workload
// here (MultiKueue's admission check dispatches it), no children and no status; one managed by another
// controller gets nothing at all.
func TestKueueManagedByMultiKueue(t *testing.T) {
	ns := newNamespace(t)
	kueueSetup(t, ns, 4, nil)
	create(t, queuedJob(ns, "remote", 2, 3).With(func(tj *mlv1.TrainingJob) { tj.Spec.ManagedBy = ptr.To("kueue.x-k8s.io/multikueue") }).Obj(),
		queuedJob(ns, "other", 2, 3).With(func(tj *mlv1.TrainingJob) { tj.Spec.ManagedBy = ptr.To("example.com/other") }).Obj(),
		queuedJob(ns, "local", 2, 3).Obj())
	waitForState(t, ns, "local", mlv1.StateCompleted, 2*time.Minute) // by then the operator has seen all three
	assertOneWorkloadPerJob(t, ns, "local", "remote")
	for _, name := range []string{"remote", "other"} {
		tj := getTJ(t, ns, name)
		var jobs batchv1.JobList
		var cms corev1.ConfigMapList
		for _, l := range []client.ObjectList{&jobs, &cms} {
			if err := stack.Client.List(ctx, l, client.InNamespace(ns), client.MatchingLabels{names.NameLabel: name}); err != nil {
				t.Fatal(err)
			}
		}
		type untouched struct {
			State            mlv1.State
			Jobs, ConfigMaps int
		}
		got := untouched{State: tj.Status.State, Jobs: len(jobs.Items), ConfigMaps: len(cms.Items)}
		if diff := cmp.Diff(untouched{}, got); diff != "" {
			t.Errorf("%s: state, Jobs, ConfigMaps: want it left alone (-want +got):\n%s", name, diff)
		}
	}
}

// withPreemptionCheckpoint: checkpoints on the claim only at SIGTERM (the frequency is never reached), so
// what the job resumes from can only be the checkpoint written when it was preempted.
func withPreemptionCheckpoint(tj *mlv1.TrainingJob) {
	withPVCCheckpoints(2)(tj)
	tj.Spec.Checkpoint.Frequency = ptr.To[int32](1000)
	tj.Spec.Checkpoint.OnPreemption = true
}

var preemptionCheckpoint = regexp.MustCompile(`SIGTERM: checkpoint (\S+) written at preemption`)

// TestKueuePreemptionKeepsTheWork: a high-priority job preempts a low one in a full ClusterQueue. The low
// one's rank 0 writes a checkpoint at SIGTERM, the job is Suspended with Kueue's preemption reason, its
// restart budget untouched; once the high one finishes Kueue admits it again and it resumes from that
// checkpoint to Completed.
func TestKueuePreemptionKeepsTheWork(t *testing.T) {
	ns := newNamespace(t)
	kueueSetup(t, ns, 2, nil)
	low, high := &kueue.WorkloadPriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "low-" + ns}, Value: 100},
		&kueue.WorkloadPriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "high-" + ns}, Value: 1000}
	createClusterScoped(t, low, high)
	tl := watchTimeline(t, ns)
	// A rank that loses a peer blocks, as one in an NCCL collective does: the gang's ranks are stopped one
	// after the other, and rank 0 must still be there to get its SIGTERM and write the checkpoint.
	create(t, claim(ns), queuedJob(ns, "low", 2, 40, "--epoch-delay=250ms", "--block-on-peer-loss").
		Label(names.PriorityClassLabel, low.Name).With(withPreemptionCheckpoint).Obj())
	runningPIDs(t, ns, "low", 2)
	eventually(t, time.Minute, "low past epoch 3", func() error {
		if e := getTJ(t, ns, "low").Status.CurrentEpoch; e < 3 {
			return fmt.Errorf("epoch %d", e)
		}
		return nil
	})
	create(t, queuedJob(ns, "high", 2, 4, "--epoch-delay=200ms").Label(names.PriorityClassLabel, high.Name).Obj())
	eventually(t, time.Minute, "low Suspended, Preempted in the ClusterQueue", func() error {
		tj := getTJ(t, ns, "low")
		c := condition(tj, mlv1.ConditionSuspended)
		if tj.Status.State != mlv1.StateSuspended || c == nil || c.Reason != "Preempted" || !strings.HasPrefix(c.Message, "InClusterQueue: ") {
			return fmt.Errorf("state %s, Suspended %+v", tj.Status.State, c)
		}
		return nil
	})
	waitForState(t, ns, "high", mlv1.StateCompleted, 2*time.Minute)
	done := waitForState(t, ns, "low", mlv1.StateCompleted, 3*time.Minute)
	type charged struct {
		Attempt, RestartCount int32
	}
	if diff := cmp.Diff(charged{}, charged{Attempt: done.Status.Attempt, RestartCount: done.Status.RestartCount}); diff != "" {
		t.Errorf("the preemption was charged: attempt, restartCount (-want +got):\n%s\nlast failure: %s", diff, done.Status.LastFailure)
	}
	all := node.AllLogs(stack.DataRoot, ns, "low-worker-0-*", names.ContainerName)
	m := preemptionCheckpoint.FindStringSubmatch(all)
	if m == nil {
		t.Fatalf("rank 0 wrote no checkpoint at SIGTERM:\n%s", all)
	}
	prefix := runDir(t, "checkpoints", ns, "low") + "/"
	if log := rankLog(t, ns, "low", 0); !strings.Contains(log, "resuming from "+m[1]) {
		t.Errorf("rank 0 did not resume from the checkpoint written at preemption %s:\n%s", m[1], log)
	} else {
		assertResumed(t, ns, "low", prefix, 3, 40)
	}
	t.Logf("timeline:\n%s", tl)
	preempted := tl.at("low", mlv1.StateSuspended, "Preempted", time.Time{})
	highDone := tl.at("high", mlv1.StateCompleted, "", preempted)
	resumed, running := tl.started("low", preempted), tl.at("low", mlv1.StateRunning, "", preempted)
	t.Logf("preempted -> high completed %.2fs; high completed -> low's workers starting %.2fs, Running %.2fs; "+
		"preempted -> Running again %.2fs",
		highDone.Sub(preempted).Seconds(), resumed.Sub(highDone).Seconds(), running.Sub(highDone).Seconds(), running.Sub(preempted).Seconds())
}

// TestKueueUserSuspendDeactivatesTheWorkload: suspending an admitted job deactivates its Workload (Kueue
// releases the quota) and resuming queues it again: the operator and Kueue never fight over the Job,
// whose suspend flips at most once (running to stopped) before it is replaced.
func TestKueueUserSuspendDeactivatesTheWorkload(t *testing.T) {
	ns, name := newNamespace(t), "pause"
	kueueSetup(t, ns, 2, nil)
	flips := watchJobSuspend(t, ns)
	create(t, queuedJob(ns, name, 2, 30, "--epoch-delay=200ms").Obj())
	runningPIDs(t, ns, name, 2)
	setSuspend(t, ns, name, true)
	eventually(t, time.Minute, "the Workload inactive and its quota released", func() error {
		wl := workloadOf(t, ns, name)
		if ptr.Deref(wl.Spec.Active, true) || wl.Status.Admission != nil ||
			meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved) {
			return fmt.Errorf("active %v, admission %v", ptr.Deref(wl.Spec.Active, true), wl.Status.Admission)
		}
		return nil
	})
	if tj := waitForState(t, ns, name, mlv1.StateSuspended, time.Minute); reasonOf(tj) != "Suspended" {
		t.Errorf("Suspended reason %q, want Suspended (the user's)", reasonOf(tj))
	}
	setSuspend(t, ns, name, false)
	waitForState(t, ns, name, mlv1.StateCompleted, 3*time.Minute)
	if wl := workloadOf(t, ns, name); !ptr.Deref(wl.Spec.Active, true) {
		t.Errorf("the Workload stayed inactive")
	}
	for uid, seq := range flips.sequences() {
		if len(seq) > 2 || (len(seq) == 2 && (seq[0] || !seq[1])) {
			t.Errorf("Job %s: suspend went %v; want at most one change, false to true", uid, seq)
		}
	}
	if n := len(flips.sequences()); n != 2 {
		t.Errorf("%d Jobs, want 2 (the one stopped, the one after resuming)", n)
	}
}

// suspendWatch records each Job's successive values of spec.suspend, from a watch.
type suspendWatch struct {
	mu  sync.Mutex
	seq map[types.UID][]bool
}

func watchJobSuspend(t *testing.T, ns string) *suspendWatch {
	t.Helper()
	cs, err := kubernetes.NewForConfig(stack.Cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.BatchV1().Jobs(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sw := &suspendWatch{seq: map[types.UID][]bool{}}
	done := make(chan struct{})
	t.Cleanup(func() { w.Stop(); <-done })
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			job, ok := ev.Object.(*batchv1.Job)
			if !ok {
				continue
			}
			sw.mu.Lock()
			s, v := sw.seq[job.UID], ptr.Deref(job.Spec.Suspend, false)
			if len(s) == 0 || s[len(s)-1] != v {
				sw.seq[job.UID] = append(s, v)
			}
			sw.mu.Unlock()
		}
	}()
	return sw
}

func (sw *suspendWatch) sequences() map[types.UID][]bool {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	out := map[types.UID][]bool{}
	for k, v := range sw.seq {
		out[k] = append([]bool(nil), v...)
	}
	return out
}

// blockLabel is the topology level of the TAS test: a "block" per process node.
const blockLabel = "topology.example.com/block"

// TestKueueTopologyAwarePlacement: a Topology of blocks over the two process nodes, a flavor that uses it,
// and a job whose workers require one block (Kueue's pod annotation, in spec.workerPod): Kueue assigns a
// domain, its topology ungater opens each worker's scheduling gate with the node it chose, and every
// worker runs there.
func TestKueueTopologyAwarePlacement(t *testing.T) {
	ns, name := newNamespace(t), "tas"
	nodes := &corev1.NodeList{}
	if err := stack.Client.List(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		patch := client.MergeFrom(n.DeepCopy())
		n.Labels[blockLabel] = fmt.Sprintf("block-%d", i)
		if err := stack.Client.Patch(ctx, n, patch); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for i := range nodes.Items {
			n := &corev1.Node{}
			if stack.Client.Get(context.Background(), client.ObjectKeyFromObject(&nodes.Items[i]), n) == nil {
				patch := client.MergeFrom(n.DeepCopy())
				delete(n.Labels, blockLabel)
				_ = stack.Client.Patch(context.Background(), n, patch) // the stack goes at the end anyway
			}
		}
	})
	topo := &kueue.Topology{ObjectMeta: metav1.ObjectMeta{Name: "topo-" + ns},
		Spec: kueue.TopologySpec{Levels: []kueue.TopologyLevel{{NodeLabel: blockLabel}, {NodeLabel: corev1.LabelHostname}}}}
	createClusterScoped(t, topo)
	flavor := &kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "tas-" + ns},
		Spec: kueue.ResourceFlavorSpec{NodeLabels: map[string]string{node.ProcessNodeLabel: "true"},
			TopologyName: ptr.To(kueue.TopologyReference(topo.Name))}}
	kueueSetup(t, ns, 4, flavor)
	create(t, queuedJob(ns, name, 2, 8, "--epoch-delay=200ms").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{Annotations: map[string]string{names.RequiredTopologyAnnotation: blockLabel}}
	}).Obj())
	runningPIDs(t, ns, name, 2)
	wl := workloadOf(t, ns, name)
	ta := wl.Status.Admission.PodSetAssignments[0].TopologyAssignment
	if ta == nil {
		t.Fatalf("Kueue assigned no topology: %+v", wl.Status.Admission)
	}
	want := map[string]bool{}
	for _, v := range topologyHosts(ta) {
		want[v] = true
	}
	for r, p := range workerPods(t, ns, name) {
		if !want[p.Spec.NodeName] || len(p.Spec.SchedulingGates) != 0 || p.Spec.NodeSelector[corev1.LabelHostname] != p.Spec.NodeName {
			t.Errorf("rank %d on %s (gates %v, nodeSelector %v); Kueue assigned %v",
				r, p.Spec.NodeName, p.Spec.SchedulingGates, p.Spec.NodeSelector, want)
		}
	}
	waitForState(t, ns, name, mlv1.StateCompleted, 2*time.Minute)
}

// topologyHosts returns the host names of the domains of a topology assignment (its last level).
func topologyHosts(ta *kueue.TopologyAssignment) []string {
	var hosts []string
	for _, s := range ta.Slices {
		last := s.ValuesPerLevel[len(s.ValuesPerLevel)-1]
		if last.Universal != nil {
			hosts = append(hosts, *last.Universal)
		}
		if last.Individual != nil {
			for _, root := range last.Individual.Roots {
				hosts = append(hosts, ptr.Deref(last.Individual.Prefix, "")+root+ptr.Deref(last.Individual.Suffix, ""))
			}
		}
	}
	return hosts
}
