package controllers

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// jobController is the controller's name: its field manager, and the controller label of its series.
const jobController = "trainingjob"

// JobReconciler turns a TrainingJob into an Indexed Job (one per attempt), a headless Service, a
// ConfigMap, a checkpoint claim and a PodGroup, and derives the TrainingJob's state from them.
type JobReconciler struct {
	// writes remembers this process's status writes, shared by the four controllers (see statusWrites).
	writes *statusWrites
	client.Client
	// APIReader reads what the cache does not hold: a checkpoint claim's events.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	Options   builders.Options
	// Workers is how many TrainingJobs are reconciled at once (one job is never reconciled twice at once).
	Workers int
	// DetailInterval is how long a change of details only (worker counts, a reason of normal progress) waits
	// to be written, from when it was first seen, for a state change to carry it
	// (monitoring.scrapeIntervalSeconds overrides it, as for progress).
	DetailInterval time.Duration

	// detailsSince is when each job's status was first seen to differ in details only from what is written
	// (pendingDetails by ObjectKey); written or gone, the entry is dropped.
	detailsSince sync.Map
	// exits remembers the non-zero ends of pods the watch delivered, for pods deleted before they are read.
	exits exitMemory
	// schedulableRead holds, by ObjectKey, the schedulable nodes read for a failing attempt
	// (schedulableRead): read once per attempt, not at every reconcile while its verdict waits.
	schedulableRead sync.Map
	// Logs reads the end of a failed trainer's log for the failure's hint; nil leaves it out.
	Logs LogReader
	// checkpointSeconds is what rank 0's trainer reports having spent saving checkpoints in the current
	// attempt (the StatusController reads it: Setup wires it), for goodput; nil reads none.
	checkpointSeconds func(*mlv1.TrainingJob) *float64
	// Control orders the supervisors of a job that restarts in place (job_inplace.go); inPlace finds out
	// whether the cluster can (nil: Options.InPlaceRestart says).
	Control *controlapi.Client
	inPlace *inPlaceSupport
	// notHeld remembers the pods whose supervisor said it held nothing, by job and pod, with the
	// readiness they had (mayBeHeld): asked again only once it changes.
	notHeld podMemo
	// silent remembers the pods whose supervisor left asks unanswered: how many in a row, and when the
	// last was (a pod whose endpoint stalls is asked less and less often).
	silent podMemo
	// ordered remembers the pods ordered into an attempt (a reconcile on a cache that has not shown their
	// label yet does not order a supervisor that is exiting to restart them).
	ordered podMemo
	// labelled remembers the pods and Jobs labelled with an attempt, and when (labelOnce).
	labelled podMemo
	// kueueServed: the cluster served Kueue's Workload API when the controller started, and the
	// controller watches the Workloads it owns.
	kueueServed bool
}

// +kubebuilder:rbac:groups=ml.example.com,resources=trainingjobs,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services;configmaps,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete;deletecollection;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile brings one TrainingJob's children and status in line with its spec. Its steps:
//  1. get the TrainingJob (a deleted one releases what it held: its children go through owner references);
//  2. a job another controller manages (MultiKueue's) only keeps its dispatched Workload;
//  3. wait while the cache has not seen this process's last status write;
//  4. place checkpoints: storage the operator chose and the run ID are recorded (storage the operator chose
//     with the job accepted, before anything is built from it);
//  5. clean up a finished job (cleanPodPolicy, ttlSecondsAfterFinished);
//  6. ensure the children (ConfigMap, Service, claim, PodGroup, the attempt's Job) and observe them;
//  7. derive the status from what was observed and write it, once, when it changed.
func (r *JobReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	tj := &mlv1.TrainingJob{} // 1.
	if found, err := getTrainingJob(ctx, r.Client, req.NamespacedName, tj); err != nil || !found || !tj.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, r.gone(ctx, req.NamespacedName, found, err)
	}
	if !builders.ManagedByOperator(tj) { // 2.
		return reconcile.Result{}, r.ensureDispatchedWorkload(ctx, tj)
	}
	if r.writes.behind(tj) { // 3.
		return reconcile.Result{RequeueAfter: cacheLag}, nil
	}
	old := *tj.Status.DeepCopy()
	tj.Status.CheckpointStorage = builders.StorageChoice(tj, r.Options) // 4.
	tj.Status.RunID = builders.RunID(tj)
	now := metav1.NewTime(r.Clock.Now())
	if old.State == "" && tj.Status.CheckpointStorage != nil {
		return r.write(ctx, tj, old, derive.Status(tj, derive.Observed{}, now), now.Time)
	}
	done, ttl, err := r.cleanupFinished(ctx, tj, now.Time) // 5.
	if done || err != nil {
		return reconcile.Result{}, err
	}
	obs, err := r.ensureChildren(ctx, tj) // 6.
	if rejected(err) && (old.State == "" || old.State == mlv1.StatePending || old.State == mlv1.StateInitializing) {
		// Say why nothing starts (the first attempt or a restart's), and keep retrying with backoff: the
		// cause (a quota, a policy) may go.
		_, werr := r.write(ctx, tj, old, derive.Status(tj, derive.Observed{CreateRejected: apiMessage(err)}, now), now.Time)
		return reconcile.Result{}, errors.Join(err, werr)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	res, err := r.write(ctx, tj, old, derive.Status(tj, obs, now), now.Time) // 7.
	return result(minResult(minResult(res, ttl), r.recheck(tj, obs, now.Time)), err)
}

// gone ends the reconcile of a TrainingJob that could not be read (err), is not found, or is being
// deleted: a job that is gone is forgotten and what it held released.
func (r *JobReconciler) gone(ctx context.Context, key client.ObjectKey, found bool, err error) error {
	if !found {
		r.detailsSince.Delete(key)
		r.schedulableRead.Delete(key)
		r.notHeld.forget(key)
		r.silent.forget(key)
		r.ordered.forget(key)
		r.labelled.forget(key)
		r.exits.forget(key)
		r.writes.forget(key)
	}
	if err != nil {
		return err
	}
	return r.releaseDeleted(ctx, key)
}

// ensureChildren creates or updates the ConfigMap, Service, checkpoint claim, PodGroup and the current
// attempt's Job, and observes the claim, the Job and its pods.
func (r *JobReconciler) ensureChildren(ctx context.Context, tj *mlv1.TrainingJob) (derive.Observed, error) {
	var obs derive.Observed
	var cm *corev1.ConfigMap
	if finished(tj) {
		r.exits.forget(client.ObjectKeyFromObject(tj)) // the verdict is written
	} else {
		var err error
		if cm, err = r.ensureConfigMap(ctx, tj); err != nil {
			return obs, err
		}
		if err := r.ensureRunning(ctx, tj, &obs); err != nil {
			return obs, err
		}
	}
	if err := r.ensureWorkload(ctx, tj, &obs); err != nil {
		return obs, err
	}
	if err := r.ensureJob(ctx, tj, cm, &obs); err != nil {
		return obs, err
	}
	err := r.observePods(ctx, tj, &obs)
	return obs, err
}

// ensureRunning ensures the children of a job that has not finished, besides its ConfigMap, Workload and
// Job: the headless Service, the PodGroup, the checkpoint claim and the input cache.
func (r *JobReconciler) ensureRunning(ctx context.Context, tj *mlv1.TrainingJob, obs *derive.Observed) error {
	for _, ensure := range []func(context.Context, *mlv1.TrainingJob) error{r.ensureService, r.ensurePodGroup} {
		if err := ensure(ctx, tj); err != nil {
			return err
		}
	}
	if err := r.ensureClaim(ctx, tj, obs); err != nil {
		return err
	}
	return r.ensureInputsCache(ctx, tj, obs)
}

// observePods observes the workers' pods: their inputs' fetch, Kueue's quota and readiness, and, while the
// attempt is failing, the exits of pods gone, the failed trainers' logs, the nodes' trouble and the nodes
// the workers could move to.
func (r *JobReconciler) observePods(ctx context.Context, tj *mlv1.TrainingJob, obs *derive.Observed) error {
	var err error
	if obs.Pods, err = r.listPods(ctx, tj, true, obs.Job); err != nil {
		return err
	}
	if err := r.heldExits(ctx, tj, obs); err != nil {
		return err
	}
	obs.InputsProgress = inputsProgress(ctx, tj, obs.Pods)
	if err := r.releaseQuota(ctx, tj, obs); err != nil {
		return err
	}
	if err := r.syncPodsReady(ctx, tj, obs); err != nil {
		return err
	}
	// Before the verdict: where the Job gives none (derive.RestartsInPlace), a rank that is gone decides.
	// Only the current Job's: one Kueue recreated at a resumption keeps the attempt, not the stopped pods.
	key := client.ObjectKeyFromObject(tj)
	obs.Gone = slices.DeleteFunc(r.exits.gone(key, tj.Status.Attempt, obs.Pods), notOf(obs.Job))
	obs.ForceDeleted = slices.DeleteFunc(r.exits.forcedWhileRunning(key, tj.Status.Attempt), notOf(obs.Job))
	// A worker the node lifecycle controller marked not ready may sit on a lost node, its peers blocked on it.
	if marked := slices.DeleteFunc(slices.Clone(obs.Pods), func(p corev1.Pod) bool { return !derive.MarkedNotReady(&p) }); len(marked) > 0 {
		if obs.NodeTrouble, _, err = nodeTrouble(ctx, r.APIReader, marked, r.Clock.Now()); err != nil {
			return err
		}
	}
	if !attemptFailing(tj, *obs) {
		return nil
	}
	obs.Logs = r.failedLogs(ctx, obs.Pods)
	if obs.NodeTrouble, obs.NodeWait, err = nodeTrouble(ctx, r.APIReader, obs.Pods, r.Clock.Now()); err != nil {
		return err
	}
	if obs.Heartbeats, err = heartbeats(ctx, r.APIReader, obs.Pods, obs.NodeTrouble); err != nil {
		return err
	}
	obs.Schedulable, err = r.schedulable(ctx, tj, *obs)
	return err
}

// notOf says whether a pod was made by another Job than job (ofJob).
func notOf(job *batchv1.Job) func(corev1.Pod) bool {
	return func(p corev1.Pod) bool { return !ofJob(job, &p) }
}

// failedLogLines is how much of a failed trainer's log the JobController reads for the failure's hint:
// the 200 lines (at most 16 KiB) above its end, where a traceback's cause is when its termination message
// (2 KiB) holds only the tail.
const failedLogLines = 200

// failedLogs reads the end of the trainer's log of the pods whose exit describes the failure and whose
// termination message shows no cause the operator recognises (derive.HintLogPods). A log that cannot be
// read (the pod gone, its node lost) is left out: the termination message still explains the failure.
func (r *JobReconciler) failedLogs(ctx context.Context, pods []corev1.Pod) map[string]string {
	if r.Logs == nil {
		return nil
	}
	var logs map[string]string
	for _, p := range derive.HintLogPods(pods) {
		text, err := r.Logs.TailLog(ctx, p.Namespace, p.Name, names.ContainerName, failedLogLines)
		if err != nil {
			ctrl.LoggerFrom(ctx).V(1).Info("reading a failed trainer's log", "pod", klog.KObj(p), "error", err.Error())
			continue
		}
		if logs == nil {
			logs = map[string]string{}
		}
		logs[p.Name] = text
	}
	return logs
}

// write writes st as the new status and records the events of what changed. A change of details only
// (what the write budget calls routine: no state, condition status or fault's reason) waits DetailInterval
// from when it was first seen: worker counts move with every pod event, and a state change that follows (all
// workers running, the Job complete) carries them in one write.
func (r *JobReconciler) write(ctx context.Context, tj *mlv1.TrainingJob, old, st mlv1.TrainingJobStatus,
	now time.Time) (reconcile.Result, error) {
	key := client.ObjectKeyFromObject(tj)
	goodput, moved := r.goodput(tj, old, st, now)
	if !moved && routineWrite(jobController, old, st) {
		if wait := r.detailsWait(key, tj, old, st, now); wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
	}
	tj.Status = st
	tj.Status.Goodput = goodput
	written, res, err := applyStatus(ctx, r.Client, r.writes, tj, old, jobController)
	if written {
		r.detailsSince.Delete(key)
		r.recordEvents(ctx, tj, old)
	}
	return res, err
}

// detailsWait returns how long st, which differs from old in details only or not at all, is still to wait
// before it is written. Details that come back to what is written count as pending until they stayed there
// for the interval: a worker that is unready four seconds in five is shown so.
func (r *JobReconciler) detailsWait(key client.ObjectKey, tj *mlv1.TrainingJob, old, st mlv1.TrainingJobStatus,
	now time.Time) time.Duration {
	wait := interval(tj, r.DetailInterval)
	v, found := r.detailsSince.Load(key)
	p, _ := v.(pendingDetails)
	if found && !p.back.IsZero() && now.Sub(p.back) >= wait {
		found = false // settled back for a whole interval: a change from now on is a new one
	}
	if apiequality.Semantic.DeepEqual(old, st) {
		if !found {
			r.detailsSince.Delete(key)
		} else if p.back.IsZero() {
			r.detailsSince.Store(key, pendingDetails{since: p.since, back: now})
		}
		return 0
	}
	if !found {
		p.since = now
	}
	r.detailsSince.Store(key, pendingDetails{since: p.since})
	if st.State == mlv1.StateRunning && st.Workers.Active == 0 {
		wait = max(wait, verdictWait)
	}
	return p.since.Add(wait).Sub(now)
}

// pendingDetails is when a job's details were first seen to differ from what is written and, while they
// are back to it, since when.
type pendingDetails struct {
	since, back time.Time
}

// verdictWait is how long the details of a running job whose workers have all ended wait for the Job's
// verdict (Complete or Failed), whose write carries them: kube-controller-manager concludes a Job after its
// pods end, up to a minute later when it concludes a thousand at once (its five Job workers).
const verdictWait = 2 * time.Minute

// recheck returns when the job must be looked at again although nothing it watches may change: an unbound
// claim's events, the run's deadline, the scheduling timeout, the end of a failed attempt's settling, a
// failed attempt's worker node that is not Ready but does not count as lost yet or whose fate its verdict
// waits for, the percent of goodput
// shown (goodputRecheck).
func (r *JobReconciler) recheck(tj *mlv1.TrainingJob, obs derive.Observed, now time.Time) reconcile.Result {
	var res reconcile.Result
	if claimWaiting(obs) {
		res.RequeueAfter = claimRecheck
	}
	if finished(tj) {
		return res
	}
	for _, left := range []func() (time.Duration, bool){
		func() (time.Duration, bool) { return derive.DeadlineLeft(tj, tj.Status.StartTime, now) },
		func() (time.Duration, bool) { return derive.SchedulingLeft(tj, obs.Job, now) },
		func() (time.Duration, bool) { return settleLeft(obs, now) },
		func() (time.Duration, bool) { return min(obs.NodeWait, nodeRecheck), obs.NodeWait > 0 },
		func() (time.Duration, bool) { return nodeFateLeft(tj, obs, now) },
		func() (time.Duration, bool) { return queueRecheck, obs.Queue != nil && !r.kueueServed },
		func() (time.Duration, bool) {
			_, cs := derive.Rank0Fetcher(obs.Pods)
			return inputsRecheck, cs != nil && cs.State.Running != nil
		},
		func() (time.Duration, bool) { return goodputRecheck, goodputMoves(tj, tj.Status.State) },
		func() (time.Duration, bool) { return r.exitsAwaited(tj, obs, now) },
	} {
		if d, ok := left(); ok && d > 0 {
			res = minResult(res, reconcile.Result{RequeueAfter: d + 10*time.Millisecond})
		}
	}
	return res
}

// rejected is true for errors that repeat until something changes: the object is invalid, or admission
// (a policy, a webhook, a quota) forbids it.
func rejected(err error) bool {
	var missing *missingAPIError
	var spec *specError
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) ||
		errors.As(err, &missing) || errors.As(err, &spec)
}

// specError is a spec the builder refuses (builders.CheckWorkerPod), what admission should have refused:
// like an admission rejection, it repeats until the spec changes.
type specError struct{ error }

func (e *specError) Unwrap() error { return e.error }

// apiMessage returns the API server's message of an error, without our wrapping.
func apiMessage(err error) string {
	var status apierrors.APIStatus
	var missing *missingAPIError
	var spec *specError
	if !errors.As(err, &missing) && !errors.As(err, &spec) && errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}

// SetupWithManager registers the controller: it watches TrainingJobs, owns their Jobs, Services and
// ConfigMaps, and maps worker pods and checkpoint claims (owned or not) to their TrainingJob by label.
func (r *JobReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr)
	if KueueServed(mgr.GetConfig()) {
		r.kueueServed = true
		b = b.Owns(&kueue.Workload{})
	}
	return b.For(&mlv1.TrainingJob{}, builder.WithPredicates(jobControllerEvents)).
		Owns(&batchv1.Job{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Watches(&corev1.Pod{}, r.exits.recordingExits(handler.EnqueueRequestsFromMapFunc(byNameLabel))).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(byNameLabel)).
		Named(jobController).
		WithOptions(controllerOptions(r.Workers)).
		Complete(metrics.Instrument(jobController, r))
}
