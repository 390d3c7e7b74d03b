package controllers

import (
	"context"
	"errors"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// JobReconciler is the JobController. It turns a TrainingJob into an Indexed Job per attempt, a
// headless Service, a ConfigMap, a checkpoint claim and a PodGroup, and derives the job's state
// from them.
type JobReconciler struct {
	client.Client
	// APIReader reads what the cache does not hold: nodes, Leases, a claim's events.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Options are the builders' options as configured; options adds the cluster's in-place support.
	Options builders.Options
	// Workers is how many TrainingJobs are reconciled at once.
	Workers int
	// ClusterName names this cluster in status.clusterName (Config.ClusterName).
	ClusterName string
	// DetailInterval is how long a change of details only waits to be written (detailsWait).
	DetailInterval time.Duration
	// Logs reads the end of a failed trainer's log for the failure's hint; nil leaves it out.
	Logs LogReader
	// Control orders the supervisors of a job that restarts in place (gangRestart).
	Control *controlapi.Client

	// writes remembers this process's status writes, shared by the four controllers (statusWrites).
	writes *statusWrites
	// memory is what the JobController remembers of each job between reconciles (jobMemory).
	memory memory
	// restartSupport finds whether the cluster restarts pods in place; nil leaves it to
	// Options.InPlaceRestart.
	restartSupport *inPlaceSupport
	// checkpointSeconds is rank 0's time spent saving checkpoints in the attempt, for goodput (Setup
	// wires the StatusController's); nil reads none.
	checkpointSeconds func(*mlv1.TrainingJob) *float64
	// kueueServed: the cluster served Kueue's Workload API at start, and the Workloads are watched.
	kueueServed bool
}

// +kubebuilder:rbac:groups=ml.example.com,resources=trainingjobs,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services;configmaps,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete;deletecollection;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile brings one TrainingJob's children and status in line with its spec. Its steps:
//  1. get the TrainingJob (a deleted one releases what it held; its children go by owner
//     references);
//  2. a job another controller manages (MultiKueue's) only keeps its dispatched Workload;
//  3. wait while the cache has not seen this process's last status write;
//  4. place checkpoints: the storage the operator chose and the run ID are recorded first;
//  5. clean up a finished job (cleanPodPolicy, ttlSecondsAfterFinished);
//  6. ensure the children: ConfigMap, Service, claims, PodGroup, Workload and the attempt's Job (a
//     new attempt restarts the gang in place or recreates it: nextAttempt);
//  7. observe the workers' pods, from the cache only;
//  8. ask what the cache cannot tell, in bounded calls: the supervisors, rank 0's fetcher, and for
//     a failing attempt the trainers' logs, the nodes and their heartbeats;
//  9. act on the answers: order the replacements behind the attempt, keep the Workload in step;
//  10. derive the status (package derive) and write it, once, when it changed.
func (r *JobReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	// 1. Get the TrainingJob.
	tj := &mlv1.TrainingJob{}
	if found, err := getTrainingJob(ctx, r.Client, req.NamespacedName, tj); err != nil || !found || !tj.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, r.gone(ctx, req.NamespacedName, found, err)
	}
	// 2. Keep only the Workload of a job another controller manages.
	if !builders.ManagedByOperator(tj) {
		return reconcile.Result{}, r.ensureDispatchedWorkload(ctx, tj)
	}
	// 3. Wait for the cache to see our last status write.
	if r.writes.behind(tj) {
		return reconcile.Result{RequeueAfter: cacheLag}, nil
	}
	old := *tj.Status.DeepCopy()
	// 4. Record the checkpoint storage and run ID.
	tj.Status.CheckpointStorage = builders.StorageChoice(tj, r.options(ctx))
	tj.Status.RunID = builders.RunID(tj)
	tj.Status.ClusterName = r.ClusterName
	now := metav1.NewTime(r.Clock.Now())
	if old.State == "" && tj.Status.CheckpointStorage != nil {
		return r.write(ctx, tj, old, derive.Status(tj, derive.Observed{}, now), now.Time)
	}
	// 5. Clean up a finished job.
	done, ttl, err := r.cleanupFinished(ctx, tj, now.Time)
	if done || err != nil {
		return reconcile.Result{}, err
	}
	// 6. Ensure the children.
	obs, err := r.ensureChildren(ctx, tj)
	if rejected(err) && (old.State == "" || old.State == mlv1.StatePending || old.State == mlv1.StateInitializing) {
		// Say why nothing starts, and retry with backoff: the cause (a quota, a policy) may go away.
		_, werr := r.write(ctx, tj, old, derive.Status(tj, derive.Observed{CreateRejected: apiMessage(err)}, now), now.Time)
		return reconcile.Result{}, errors.Join(err, werr)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	// 7. Observe the workers' pods.
	if err := r.observePods(ctx, tj, &obs); err != nil {
		return reconcile.Result{}, err
	}
	// 8. Ask what the cache cannot tell.
	answers, err := r.ask(ctx, tj, &obs)
	if err != nil {
		return reconcile.Result{}, err
	}
	// 9. Act on the answers.
	if err := r.actOnAnswers(ctx, tj, &obs, answers); err != nil {
		return reconcile.Result{}, err
	}
	// 10. Derive and write the status.
	res, err := r.write(ctx, tj, old, derive.Status(tj, obs, now), now.Time)
	return result(minResult(minResult(res, ttl), r.recheck(ctx, tj, obs, now.Time)), err)
}

// options returns the builders' options for this reconcile: the configured ones plus the cluster's
// in-place support as found now. Every child is built from them.
func (r *JobReconciler) options(ctx context.Context) builders.Options {
	o := r.Options
	if r.restartSupport != nil {
		o.InPlaceRestart = r.restartSupport.available(ctx, r.Clock.Now())
	}
	return o
}

// gone ends the reconcile of a TrainingJob that could not be read, is not found, or is being
// deleted. A gone job is forgotten and what it held is released.
func (r *JobReconciler) gone(ctx context.Context, key client.ObjectKey, found bool, err error) error {
	if !found {
		r.memory.forget(key)
		r.writes.forget(key)
	}
	if err != nil {
		return err
	}
	return r.releaseDeleted(ctx, key)
}

// ensureChildren creates or updates the ConfigMap, Service, checkpoint claim, PodGroup, Workload
// and the current attempt's Job, and returns what it saw of the claims, the Workload and the Job.
func (r *JobReconciler) ensureChildren(ctx context.Context, tj *mlv1.TrainingJob) (derive.Observed, error) {
	var obs derive.Observed
	var cm *corev1.ConfigMap
	if finished(tj) {
		// The verdict is written.
		r.memory.forgetExits(client.ObjectKeyFromObject(tj))
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
	err := r.ensureJob(ctx, tj, cm, &obs)
	return obs, err
}

// ensureRunning ensures an unfinished job's other children: the headless Service, the PodGroup, the
// checkpoint claim and the input cache.
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

// observePods lists the current attempt's pods from the cache, plus the remembered ends of gone
// pods (memory.goneExits) and of force-deleted running ones. It counts only the current Job's pods.
func (r *JobReconciler) observePods(ctx context.Context, tj *mlv1.TrainingJob, obs *derive.Observed) error {
	var err error
	if obs.Pods, err = listPods(ctx, r.Client, tj, true, obs.Job); err != nil {
		return err
	}
	key := client.ObjectKeyFromObject(tj)
	obs.Gone = slices.DeleteFunc(r.memory.goneExits(key, tj.Status.Attempt, obs.Pods), notOf(obs.Job))
	obs.ForceDeleted = slices.DeleteFunc(r.memory.forcedWhileRunning(key, tj.Status.Attempt), notOf(obs.Job))
	return nil
}

// ask asks what the cache cannot tell, in bounded calls: the supervisors of an in-place job (into
// obs.Held), rank 0's fetcher, the nodes of NotReady workers and, for a failing attempt, the logs,
// node trouble, heartbeats and schedulable nodes.
func (r *JobReconciler) ask(ctx context.Context, tj *mlv1.TrainingJob, obs *derive.Observed) (supervisorAnswers, error) {
	answers := r.gang(ctx).askSupervisors(ctx, tj, obs.Job, obs.Pods)
	obs.Held = answers.held
	obs.InputsProgress = inputsProgress(ctx, tj, obs.Pods)
	pods := obs.Workers()
	var err error
	// A worker marked NotReady may sit on a lost node, blocking its peers.
	if marked := slices.DeleteFunc(slices.Clone(pods), func(p corev1.Pod) bool { return !derive.MarkedNotReady(&p) }); len(marked) > 0 {
		if obs.NodeTrouble, _, err = nodeTrouble(ctx, r.APIReader, marked, r.Clock.Now()); err != nil {
			return answers, err
		}
	}
	if !attemptFailing(tj, *obs) {
		return answers, nil
	}
	ctrl.LoggerFrom(ctx).V(1).Info("The attempt is failing: reading its logs and nodes", "attempt", tj.Status.Attempt)
	obs.Logs = r.failedLogs(ctx, pods)
	if obs.NodeTrouble, obs.NodeWait, err = nodeTrouble(ctx, r.APIReader, pods, r.Clock.Now()); err != nil {
		return answers, err
	}
	if obs.Heartbeats, err = heartbeats(ctx, r.APIReader, pods, obs.NodeTrouble); err != nil {
		return answers, err
	}
	obs.Schedulable, err = r.schedulable(ctx, tj, *obs)
	return answers, err
}

// actOnAnswers orders the replacements behind the attempt and keeps the Workload's quota and
// PodsReady condition in step with the workers.
func (r *JobReconciler) actOnAnswers(ctx context.Context, tj *mlv1.TrainingJob, obs *derive.Observed, a supervisorAnswers) error {
	if err := r.gang(ctx).orderBehind(ctx, tj, a.behind); err != nil {
		return err
	}
	if err := r.releaseQuota(ctx, tj, obs); err != nil {
		return err
	}
	return r.syncPodsReady(ctx, tj, obs)
}

// notOf returns a filter for pods job (nil when none) did not make (madeBy).
func notOf(job *batchv1.Job) func(corev1.Pod) bool {
	return func(p corev1.Pod) bool { return !madeBy(job, &p) }
}

// write writes st as the new status and records events for what changed. A change of details only
// waits DetailInterval, since worker counts move with every pod event and a later state change
// carries them.
func (r *JobReconciler) write(ctx context.Context, tj *mlv1.TrainingJob, old, st mlv1.TrainingJobStatus,
	now time.Time) (reconcile.Result, error) {
	key := client.ObjectKeyFromObject(tj)
	goodput, moved := r.goodput(tj, old, st, now)
	if !moved && routineWrite(jobController, old, st) {
		if wait := r.detailsWait(key, tj, old, st, now); wait > 0 {
			ctrl.LoggerFrom(ctx).V(2).Info("Details wait to be written", "wait", wait)
			return reconcile.Result{RequeueAfter: wait}, nil
		}
	}
	tj.Status = st
	tj.Status.Goodput = goodput
	written, res, err := applyStatus(ctx, r.Client, r.writes, tj, old, jobController)
	if written {
		r.memory.peek(key, func(j *jobMemory) { j.details = pendingDetails{} })
		logTransition(ctx, old, tj.Status)
		r.recordEvents(ctx, tj, old)
	}
	return res, err
}

// logTransition logs a state change or a new attempt at level 1.
func logTransition(ctx context.Context, old, st mlv1.TrainingJobStatus) {
	log := ctrl.LoggerFrom(ctx).V(1)
	if st.State != old.State {
		log.Info("State changed", "from", old.State, "to", st.State, "reason", derive.ConditionReason(st, string(st.State)),
			"message", derive.ConditionMessage(st, string(st.State)))
	}
	if st.Attempt != old.Attempt {
		log.Info("Restart decided", "attempt", st.Attempt, "restartCount", st.RestartCount,
			"why", derive.ConditionMessage(st, mlv1.ConditionRestarting))
	}
}

// detailsWait returns how long st, differing from old in details at most, still waits before it is
// written. Details back to their written value stay pending for a full interval.
func (r *JobReconciler) detailsWait(key client.ObjectKey, tj *mlv1.TrainingJob, old, st mlv1.TrainingJobStatus,
	now time.Time) time.Duration {
	wait := interval(tj, r.DetailInterval)
	var left time.Duration
	r.memory.with(key, func(j *jobMemory) {
		p := j.details
		found := !p.since.IsZero()
		if found && !p.back.IsZero() && now.Sub(p.back) >= wait {
			// Settled back for a whole interval: a change from now on is a new one.
			found = false
		}
		if apiequality.Semantic.DeepEqual(old, st) {
			if !found {
				j.details = pendingDetails{}
			} else if p.back.IsZero() {
				j.details = pendingDetails{since: p.since, back: now}
			}
			return
		}
		if !found {
			p.since = now
		}
		j.details = pendingDetails{since: p.since}
		if st.State == mlv1.StateRunning && st.Workers.Active == 0 {
			wait = max(wait, verdictWait)
		}
		left = p.since.Add(wait).Sub(now)
	})
	return left
}

// verdictWait is how long a running job whose workers all ended waits for the Job's verdict to
// carry its details. kube-controller-manager can take up to a minute when concluding a thousand
// Jobs at once.
const verdictWait = 2 * time.Minute

// recheck returns when to look at the job again even if nothing it watches changes: claim events,
// the deadline, the scheduling timeout, a failed attempt's settling or node fate, and goodput
// (goodputRecheck).
func (r *JobReconciler) recheck(ctx context.Context, tj *mlv1.TrainingJob, obs derive.Observed, now time.Time) reconcile.Result {
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
		func() (time.Duration, bool) { return r.gang(ctx).exitsAwaited(tj, obs, now) },
	} {
		if d, ok := left(); ok && d > 0 {
			res = minResult(res, reconcile.Result{RequeueAfter: d + 10*time.Millisecond})
		}
	}
	return res
}

// rejected reports whether err repeats until something changes: the object is invalid, or admission
// forbids it.
func rejected(err error) bool {
	var missing *missingAPIError
	var spec *specError
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) ||
		errors.As(err, &missing) || errors.As(err, &spec)
}

// specError is a spec the builder refuses (builders.CheckWorkerPod) that admission should have
// refused. Like an admission rejection, it repeats until the spec changes.
type specError struct{ error }

func (e *specError) Unwrap() error { return e.error }

// apiMessage returns the API server's message of err, without our wrapping.
func apiMessage(err error) string {
	var status apierrors.APIStatus
	var missing *missingAPIError
	var spec *specError
	if !errors.As(err, &missing) && !errors.As(err, &spec) && errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}

// uncontrolled reports whether obj has no controller.
func uncontrolled(obj client.Object) bool {
	return metav1.GetControllerOfNoCopy(obj) == nil
}

// SetupWithManager registers the controller. It watches TrainingJobs, owns their Jobs, Services and
// ConfigMaps, and maps worker pods and checkpoint claims to their TrainingJob by label.
func (r *JobReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr)
	if KueueServed(mgr.GetConfig()) {
		r.kueueServed = true
		// A Workload MultiKueue made for a job (builders.PrebuiltWorkload) is not the job's until adopted.
		b = b.Owns(&kueue.Workload{}).Watches(&kueue.Workload{}, handler.EnqueueRequestsFromMapFunc(byNameLabel),
			builder.WithPredicates(predicate.NewPredicateFuncs(uncontrolled)))
	}
	return b.For(&mlv1.TrainingJob{}, builder.WithPredicates(jobControllerEvents)).
		Owns(&batchv1.Job{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Watches(&corev1.Pod{}, r.recordingExits(handler.EnqueueRequestsFromMapFunc(byNameLabel))).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(byNameLabel)).
		Named(jobController).
		WithOptions(controllerOptions(r.Workers)).
		Complete(metrics.Instrument(jobController, r))
}
