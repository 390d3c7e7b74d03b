// Package controllers holds the four TrainingJob controllers over one pure state machine (package
// derive):
//
//   - the JobController (job_*.go) builds the workers' Job, headless Service, ConfigMap, checkpoint claim
//     and PodGroup, restarts the gang, cleans up, and alone derives status.state and the run's conditions;
//   - the StatusController (status_*.go) reads rank 0's progress into status and the per-job series and
//     gives the success policy's verdict;
//   - the CheckpointController (checkpoint_*.go) reads rank 0's checkpoint agent into status.checkpoint
//     and alone writes the ConfigMap's RESUME_FROM;
//   - the TrackingController (tracking_controller.go) keeps the job's MLflow run in step with the status,
//     and alone writes status.mlflow, ExperimentTracked and the ConfigMap's MLFLOW_RUN_ID.
package controllers

import (
	"context"
	"errors"
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
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// jobController is the controller's name: its field manager, and the controller label of its series.
const jobController = "trainingjob"

// JobReconciler turns a TrainingJob into an Indexed Job (one per attempt), a headless Service, a
// ConfigMap, a checkpoint claim and a PodGroup, and derives the TrainingJob's state from them.
type JobReconciler struct {
	client.Client
	// APIReader reads what the cache does not hold: a checkpoint claim's events.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	Options   builders.Options
	// Workers is how many TrainingJobs are reconciled at once (one job is never reconciled twice at once).
	Workers int
	// DetailInterval is how long a change of details only (worker counts, a reason) may wait to be written
	// after the job's last write (monitoring.scrapeIntervalSeconds overrides it, as for progress).
	DetailInterval time.Duration

	// written is when each job's status was last written by this controller (time.Time by ObjectKey).
	written sync.Map
	// exits remembers the non-zero ends of pods the watch delivered, for pods deleted before they are read.
	exits exitMemory
	// Logs reads the end of a failed trainer's log for the failure's hint; nil leaves it out.
	Logs LogReader
	// kueueServed: the cluster served Kueue's Workload API when the controller started, and the
	// controller watches the Workloads it owns.
	kueueServed bool
}

// +kubebuilder:rbac:groups=ml.example.com,resources=trainingjobs,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services;configmaps,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete;deletecollection;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile brings one TrainingJob's children and status in line with its spec: get, place checkpoints
// (accepting the job first when the operator chose where), ensure the children, derive the status, write
// it once.
func (r *JobReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	tj := &mlv1.TrainingJob{}
	if found, err := getTrainingJob(ctx, r.Client, req.NamespacedName, tj); err != nil || !found || !tj.DeletionTimestamp.IsZero() {
		if !found {
			r.written.Delete(req.NamespacedName)
			r.exits.forget(req.NamespacedName)
		}
		if err == nil {
			err = r.releaseDeleted(ctx, req.NamespacedName)
		}
		return reconcile.Result{}, err // children go with it through owner references
	}
	if !builders.ManagedByOperator(tj) {
		return reconcile.Result{}, r.ensureDispatchedWorkload(ctx, tj)
	}
	if statusWrites.behind(tj) {
		return reconcile.Result{RequeueAfter: cacheLag}, nil
	}
	old := *tj.Status.DeepCopy()
	// Where checkpoints go is chosen before anything is built from it; the status write records it.
	tj.Status.CheckpointStorage = builders.StorageChoice(tj, r.Options)
	now := metav1.NewTime(r.Clock.Now())
	if old.State == "" && tj.Status.CheckpointStorage != nil {
		// The operator chose where checkpoints go: record the choice (and that the job was accepted, Pending)
		// before anything is built from it, so a restart with other defaults never moves them.
		return r.write(ctx, tj, old, derive.Status(tj, derive.Observed{}, now), now.Time)
	}
	done, ttl, err := r.cleanupFinished(ctx, tj, now.Time)
	if done || err != nil {
		return reconcile.Result{}, err
	}
	obs, err := r.ensureChildren(ctx, tj)
	if rejected(err) && (old.State == "" || old.State == mlv1.StatePending || old.State == mlv1.StateInitializing) {
		// Say why nothing starts (the first attempt or a restart's), and keep retrying with backoff: the
		// cause (a quota, a policy) may go.
		_, werr := r.write(ctx, tj, old, derive.Status(tj, derive.Observed{CreateRejected: apiMessage(err)}, now), now.Time)
		return reconcile.Result{}, errors.Join(err, werr)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	res, err := r.write(ctx, tj, old, derive.Status(tj, obs, now), now.Time)
	return result(minResult(minResult(res, ttl), r.recheck(tj, obs, now.Time)), err)
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
		for _, ensure := range []func(context.Context, *mlv1.TrainingJob) error{r.ensureService, r.ensurePodGroup} {
			if err := ensure(ctx, tj); err != nil {
				return obs, err
			}
		}
		if err := r.ensureClaim(ctx, tj, &obs); err != nil {
			return obs, err
		}
		if err := r.ensureInputsCache(ctx, tj, &obs); err != nil {
			return obs, err
		}
	}
	if err := r.ensureWorkload(ctx, tj, &obs); err != nil {
		return obs, err
	}
	if err := r.ensureJob(ctx, tj, cm, &obs); err != nil {
		return obs, err
	}
	var err error
	if obs.Pods, err = r.listPods(ctx, tj, true); err != nil {
		return obs, err
	}
	obs.InputsProgress = inputsProgress(ctx, tj, obs.Pods)
	if err := r.releaseQuota(ctx, tj, &obs); err != nil {
		return obs, err
	}
	if err := r.syncPodsReady(ctx, tj, &obs); err != nil || !attemptFailing(tj, obs) {
		return obs, err
	}
	obs.Gone = r.exits.gone(client.ObjectKeyFromObject(tj), tj.Status.Attempt, obs.Pods)
	obs.Logs = r.failedLogs(ctx, obs.Pods)
	obs.NodeTrouble, obs.NodeWait, err = nodeTrouble(ctx, r.APIReader, obs.Pods, r.Clock.Now())
	return obs, err
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
// (derive.Significant) waits until DetailInterval has passed since the job's last write by this
// controller: worker counts move with every pod event, and each would be a write.
func (r *JobReconciler) write(ctx context.Context, tj *mlv1.TrainingJob, old, st mlv1.TrainingJobStatus, now time.Time) (reconcile.Result, error) {
	key := client.ObjectKeyFromObject(tj)
	if !derive.Significant(old, st) && !apiequality.Semantic.DeepEqual(old, st) {
		if last, ok := r.written.Load(key); ok {
			if wait := last.(time.Time).Add(interval(tj, r.DetailInterval)).Sub(now); wait > 0 {
				return reconcile.Result{RequeueAfter: wait}, nil
			}
		}
	}
	tj.Status = st
	written, res, err := applyStatus(ctx, r.Client, tj, old, jobController)
	if written {
		r.written.Store(key, now)
		r.recordEvents(ctx, tj, old)
	}
	return res, err
}

// recheck is when the job must be looked at again although nothing it watches may change: an unbound
// claim's events, the run's deadline, the scheduling timeout, the end of a failed attempt's settling, a
// failed attempt's worker node that is not Ready but does not count as lost yet.
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
		func() (time.Duration, bool) { return queueRecheck, obs.Queue != nil && !r.kueueServed },
		func() (time.Duration, bool) {
			_, cs := derive.Rank0Fetcher(obs.Pods)
			return inputsRecheck, cs != nil && cs.State.Running != nil
		},
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

// apiMessage is the API server's message of an error, without our wrapping.
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
