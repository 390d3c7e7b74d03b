package controllers

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

// createOwned creates obj owned by tj. Names are deterministic, so an object left by an earlier
// reconcile or crash is found, never duplicated.
func (r *JobReconciler) createOwned(ctx context.Context, tj *mlv1.TrainingJob, obj client.Object) error {
	if err := controllerutil.SetControllerReference(tj, obj, r.Scheme); err != nil {
		return fmt.Errorf("setting owner of %T %s: %w", obj, obj.GetName(), err)
	}
	return r.create(ctx, obj)
}

// create creates obj, leaving an existing object of that name as it is.
func (r *JobReconciler) create(ctx context.Context, obj client.Object) error {
	if err := r.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

// ensure creates want, or, when it exists (read into current), calls sync to copy the managed
// fields from want and updates the object if sync reports a change.
func (r *JobReconciler) ensure(ctx context.Context, tj *mlv1.TrainingJob, want, current client.Object, sync func() bool) error {
	found, err := getOptional(ctx, r.Client, client.ObjectKeyFromObject(want), current)
	if err != nil {
		return err
	}
	if !found {
		return r.createOwned(ctx, tj, want)
	}
	if !sync() {
		return nil
	}
	// The cache holds slim copies (CacheOptions), so the update starts from the stored object.
	if err := r.readStored(ctx, current); err != nil {
		return err
	}
	if !sync() {
		return nil
	}
	if err := r.Update(ctx, current); err != nil {
		return fmt.Errorf("updating %T %s of %s: %w", current, current.GetName(), klog.KObj(tj), err)
	}
	return nil
}

// readStored rereads obj from the API server, past the cache (APIReader, else the client).
func (r *JobReconciler) readStored(ctx context.Context, obj client.Object) error {
	var reader client.Reader = r.Client
	if r.APIReader != nil {
		reader = r.APIReader
	}
	key := client.ObjectKeyFromObject(obj)
	v := reflect.ValueOf(obj).Elem()
	// Decoding into a used object would merge its maps.
	v.Set(reflect.Zero(v.Type()))
	if err := reader.Get(ctx, key, obj); err != nil {
		return fmt.Errorf("reading %T %s: %w", obj, key.Name, err)
	}
	return nil
}

// ensureConfigMap creates the ConfigMap or updates config.json and, for an in-place job, the
// attempt (builders.ConfigMap). It keeps RESUME_FROM and its annotation, which the
// CheckpointController owns.
func (r *JobReconciler) ensureConfigMap(ctx context.Context, tj *mlv1.TrainingJob) (*corev1.ConfigMap, error) {
	want, err := builders.ConfigMap(tj, r.options(ctx))
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{}
	err = r.ensure(ctx, tj, want, cm, func() bool {
		have, config := cm.Data[names.ConfigFileName], want.Data[names.ConfigFileName]
		attempt, inPlace := want.Data[names.CurrentAttemptKey]
		if (have == config || have == configDigest(config)) && (!inPlace || cm.Data[names.CurrentAttemptKey] == attempt) {
			// As built; the cache holds its digest (slimConfigMap).
			return false
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[names.ConfigFileName] = config
		if inPlace {
			cm.Data[names.CurrentAttemptKey] = attempt
		}
		return true
	})
	if cm.ResourceVersion == "" { // not found: want is what was created (or, created meanwhile by another reconcile, alike)
		return want, err
	}
	return cm, err
}

// ensureService creates the headless Service, or brings its ports and selector up to date.
func (r *JobReconciler) ensureService(ctx context.Context, tj *mlv1.TrainingJob) error {
	want := builders.Service(tj)
	svc := &corev1.Service{}
	return r.ensure(ctx, tj, want, svc, func() bool {
		if apiequality.Semantic.DeepEqual(svc.Spec.Ports, want.Spec.Ports) &&
			apiequality.Semantic.DeepEqual(svc.Spec.Selector, want.Spec.Selector) {
			return false
		}
		svc.Spec.Ports, svc.Spec.Selector = want.Spec.Ports, want.Spec.Selector
		return true
	})
}

// ensureJob keeps exactly one Job, the current attempt's, and puts it into obs. It replaces an
// older, stale or avoided-node Job, creates the current one once nothing blocks, and keeps suspend
// in step. The attempt is recorded before the old Job goes, so a restart never counts twice.
func (r *JobReconciler) ensureJob(ctx context.Context, tj *mlv1.TrainingJob, cm *corev1.ConfigMap, obs *derive.Observed) error {
	var admission *builders.Admission
	if obs.Queue != nil {
		admission = obs.Queue.Admission
	}
	waits := obs.Queue != nil && admission == nil
	want := builders.AdmittedJob(tj, r.options(ctx), admission)
	job := &batchv1.Job{}
	found, err := getOptional(ctx, r.Client, client.ObjectKeyFromObject(want), job)
	switch {
	case err != nil:
		return err
	case found && !metav1.IsControlledBy(job, tj):
		return fmt.Errorf("job %s exists and is not owned by trainingjob %s", job.Name, tj.Name)
	case found && names.JobAttempt(job) != tj.Status.Attempt:
		return r.nextAttempt(ctx, tj, cm, job, obs)
	case found && finished(tj):
		obs.Job = job
		return r.stopJob(ctx, tj, job)
	case found && isStale(job, want):
		return r.deleteJob(ctx, job, "built from an older spec")
	case found:
		if recreated, err := r.recreateOnAvoided(ctx, tj, job, obs); recreated || err != nil {
			return err
		}
		obs.Job = job
		if err := r.gang(ctx).labelReplacements(ctx, tj, job); err != nil {
			return err
		}
		if err := r.syncSize(ctx, tj, job); err != nil {
			return err
		}
		return r.syncSuspend(ctx, tj, job, waits)
	case finished(tj) || tj.Suspended() || waits:
		return nil
	}
	return r.createJob(ctx, tj, cm, want, obs)
}

// nextAttempt moves job's workers to the current attempt: in place when the Job allows it
// (gangRestart), else by deleting the Job and its pods. The next Job is created once they are gone.
func (r *JobReconciler) nextAttempt(ctx context.Context, tj *mlv1.TrainingJob, cm *corev1.ConfigMap, job *batchv1.Job,
	obs *derive.Observed) error {
	opts, gang := r.options(ctx), r.gang(ctx)
	why := builders.InPlaceUnavailable(tj, opts)
	if finished(tj) {
		why = "" // the run ended: its workers are only stopped
	}
	if job.Annotations[names.InPlaceAnnotation] != "" && builders.InPlace(tj, opts) && !finished(tj) && cm != nil {
		blocked, done, err := gang.restart(ctx, tj, cm, job)
		if done || err != nil {
			obs.StartBlocked = blocked
			return err
		}
		why = "" // restart said why
	}
	if why != "" && job.DeletionTimestamp == nil {
		gang.recreating(ctx, tj, job, corev1.EventTypeNormal, why)
	}
	obs.StartBlocked = fmt.Sprintf("stopping the workers of attempt %d", names.JobAttempt(job))
	return r.deleteAttempt(ctx, tj, job)
}

// recreateOnAvoided deletes job and its pods when a restart in place put a pod on an avoided node
// (replacedOnAvoided); the new Job keeps every pod off it. recreated reports whether it did.
func (r *JobReconciler) recreateOnAvoided(ctx context.Context, tj *mlv1.TrainingJob, job *batchv1.Job,
	obs *derive.Observed) (recreated bool, err error) {
	gang := r.gang(ctx)
	why, err := gang.replacedOnAvoided(ctx, tj, job)
	if err != nil || why == "" {
		return false, err
	}
	if job.DeletionTimestamp == nil {
		gang.recreating(ctx, tj, job, corev1.EventTypeNormal, why)
	}
	obs.StartBlocked = fmt.Sprintf("stopping the workers of attempt %d", names.JobAttempt(job))
	return true, r.deleteAttempt(ctx, tj, job)
}

// createJob creates the current attempt's Job, want, once its pod passes the builder's checks and
// nothing blocks its start (obs.StartBlocked). It creates an MPI job's SSH Secret and the job's token
// Secret first.
func (r *JobReconciler) createJob(ctx context.Context, tj *mlv1.TrainingJob, cm *corev1.ConfigMap, want *batchv1.Job,
	obs *derive.Observed) (err error) {
	if err := builders.CheckWorkerPod(tj); err != nil {
		return &specError{fmt.Errorf("the operator refuses the workers' pod: %w", err)}
	}
	if err := builders.CheckPatterns(tj); err != nil {
		return &specError{fmt.Errorf("the operator refuses the job's patterns: %w", err)}
	}
	if obs.StartBlocked, err = r.startBlocked(ctx, tj, cm); err != nil || obs.StartBlocked != "" {
		return err
	}
	if err := r.ensureSSHSecret(ctx, tj); err != nil {
		return err
	}
	if err := r.ensureTokenSecret(ctx, tj); err != nil {
		return err
	}
	obs.Job = want
	if err := r.createOwned(ctx, tj, want); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Created the attempt's Job", "job", klog.KObj(want), "attempt", tj.Status.Attempt)
	if applied := builders.AppliedDefaults(tj, r.options(ctx)); len(applied) > 0 {
		r.Recorder.Eventf(tj, want, corev1.EventTypeNormal, derive.ReasonWorkerDefaultsApplied, "Create",
			"attempt %d: the cluster's worker defaults applied beneath the job's own settings: %s", tj.Status.Attempt,
			strings.Join(applied, "; "))
	}
	return nil
}

// startBlocked says why the current attempt's Job cannot be created yet, or "": older workers still
// stop (a deleted pod that runs nothing does not block, whatever finalizer keeps it), RESUME_FROM is
// not settled, or the TrackingController has not tried to create the MLflow run. cm is reread when
// nil.
func (r *JobReconciler) startBlocked(ctx context.Context, tj *mlv1.TrainingJob, cm *corev1.ConfigMap) (string, error) {
	old, err := listPods(ctx, r.Client, tj, false, nil)
	if err == nil {
		old, err = withoutStranded(ctx, r.APIReader, old, r.Clock.Now())
	}
	if err != nil {
		return "", err
	}
	if len(old) > 0 {
		err := r.stopPods(ctx, tj, old)
		if old = slices.DeleteFunc(old, func(p corev1.Pod) bool { return derive.RunsNothing(&p) }); len(old) > 0 {
			return fmt.Sprintf("waiting for %d workers of attempt %d to stop", len(old), names.JobAttempt(&old[0])), err
		}
		if err != nil {
			return "", err
		}
	}
	checkpoints, tracked := tj.CheckpointEnabled(), builders.MLflowTrackingURI(tj, r.options(ctx)) != ""
	if !checkpoints && !tracked {
		return "", nil
	}
	if cm == nil {
		cm = &corev1.ConfigMap{}
		if _, err := getOptional(ctx, r.Client, client.ObjectKey{Namespace: tj.Namespace, Name: names.ConfigMapName(tj)}, cm); err != nil {
			return "", err
		}
	}
	switch {
	case checkpoints && !resumeSettled(tj, cm):
		return waitingForResumeFrom, nil
	case tracked && cm.Annotations[names.TrackingSettledAnnotation] == "":
		return "waiting for the tracking controller's first attempt to create the MLflow run", nil
	}
	return "", nil
}

// waitingForResumeFrom says why an attempt's workers do not start yet.
const waitingForResumeFrom = "waiting for the checkpoint controller to settle RESUME_FROM"

// resumeSettled reports whether the CheckpointController settled RESUME_FROM in cm for the current
// attempt.
func resumeSettled(tj *mlv1.TrainingJob, cm *corev1.ConfigMap) bool {
	return cm != nil && cm.Annotations[names.ResumeAttemptAnnotation] == strconv.Itoa(int(tj.Status.Attempt))
}

// deleteJob deletes a Job the current attempt replaces, with background propagation; the next Job
// waits for its pods (startBlocked).
func (r *JobReconciler) deleteJob(ctx context.Context, job *batchv1.Job, why string) error {
	err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &job.UID})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting job %s %s: %w", job.Name, why, err)
	}
	return nil
}

// deleteAttempt deletes an attempt's Job with background propagation, then stops its pods itself.
// Deleting the Job first keeps Kubernetes' Job controller from releasing finalizers one by one at
// its client rate, which left 256 ranks 23-25 s to go.
func (r *JobReconciler) deleteAttempt(ctx context.Context, tj *mlv1.TrainingJob, job *batchv1.Job) error {
	if job.DeletionTimestamp == nil {
		ctrl.LoggerFrom(ctx).V(1).Info("Deleting the Job of an older attempt", "job", klog.KObj(job), "attempt", names.JobAttempt(job))
	}
	if err := r.deleteJob(ctx, job, "of an older attempt"); err != nil {
		return err
	}
	old, err := listPods(ctx, r.Client, tj, false, nil)
	if err != nil {
		return err
	}
	return r.stopPods(ctx, tj, old)
}

// stopPods deletes older attempts' pods several at a time, so their graceful stop starts now, and
// releases their Job tracking finalizers once their Job is gone. A failed request is retried, since
// the next Job waits (startBlocked).
func (r *JobReconciler) stopPods(ctx context.Context, tj *mlv1.TrainingJob, old []corev1.Pod) error {
	var errs []error
	var mu sync.Mutex
	var grace *int64
	if derive.LastAttemptHung(tj.Status) {
		grace = ptr.To(hungGrace)
	}
	parallel(len(old), stopWorkers, func(i int) {
		if err := r.stopPod(ctx, &old[i], grace); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	})
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stopping the workers of an older attempt of %s: %w", klog.KObj(tj), err)
	}
	return nil
}

// maxWorkerGrace is the longest grace period a worker the operator built has, in seconds
// (checkpoint.preemptionGraceSeconds' maximum; else Kubernetes' default 30 s). An older pod deleted
// with a longer one of its own (a pod made to look like a worker: a month, SIGTERM ignored, a
// finalizer) is deleted again with it, and no longer holds the next attempt for its own time; a
// worker's own grace (a checkpoint on SIGTERM) is never cut.
const maxWorkerGrace int64 = 3600

// stopWorkers is how many pods of an older attempt the JobController deletes (or releases) at once.
const stopWorkers = 16

// trackingFinalizerPatch removes the Job tracking finalizer at index i, only if it is still there.
const trackingFinalizerPatch = `[{"op":"test","path":"/metadata/finalizers/%d","value":%q},` +
	`{"op":"remove","path":"/metadata/finalizers/%d"}]`

// hungGrace is the grace period, in seconds, for an attempt that hung. A hung rank ignoring SIGTERM
// held a restart for its whole grace (31 s of 39.5 s), so it is killed instead.
const hungGrace int64 = 1

// stopPod deletes an older attempt's pod unless it is being deleted with at most grace (or
// maxWorkerGrace), with grace when set, and releases its Job tracking finalizer.
func (r *JobReconciler) stopPod(ctx context.Context, p *corev1.Pod, grace *int64) error {
	if grace == nil && p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds > maxWorkerGrace {
		grace = ptr.To(maxWorkerGrace)
	}
	longer := grace != nil && (p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds > *grace)
	if p.DeletionTimestamp == nil || longer {
		opts := []client.DeleteOption{client.Preconditions{UID: &p.UID}}
		if grace != nil {
			opts = append(opts, client.GracePeriodSeconds(*grace))
		}
		if err := r.Delete(ctx, p, opts...); ignoreNotFound(err) != nil {
			return err
		}
	}
	i := slices.Index(p.Finalizers, batchv1.JobTrackingFinalizer)
	if i < 0 {
		return nil
	}
	patch := client.RawPatch(types.JSONPatchType, fmt.Appendf(nil, trackingFinalizerPatch, i, batchv1.JobTrackingFinalizer, i))
	if err := r.Patch(ctx, p, patch); ignoreNotFound(err) != nil && !apierrors.IsInvalid(err) {
		// Invalid: the test failed; the finalizer went meanwhile.
		return err
	}
	return nil
}

// parallel runs f(0..n-1) on at most workers goroutines and waits for them.
func parallel(n, workers int, f func(int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(n, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// isStale reports whether the Job is suspended, runs no pod, and predates a spec edit. Its pod
// template is immutable, so it is replaced.
func isStale(job, want *batchv1.Job) bool {
	return ptr.Deref(job.Spec.Suspend, false) && job.Status.Active == 0 &&
		job.Annotations[names.SpecHashAnnotation] != want.Annotations[names.SpecHashAnnotation]
}

// stopJob suspends a Job still running a finished TrainingJob's workers, so Kubernetes' Job
// controller stops them gracefully and the Job stays for history. With cleanPodPolicy None the
// workers run until they exit.
func (r *JobReconciler) stopJob(ctx context.Context, tj *mlv1.TrainingJob, job *batchv1.Job) error {
	if ptr.Deref(job.Spec.Suspend, false) || jobFinished(job) || tj.CleanPodPolicy() == mlv1.CleanPodsNone {
		return nil
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Stopping the workers of the finished run", "job", klog.KObj(job))
	patch := client.MergeFrom(job.DeepCopy())
	job.Spec.Suspend = ptr.To(true)
	if err := r.Patch(ctx, job, patch); err != nil {
		return fmt.Errorf("stopping the workers of finished job %s: %w", klog.KObj(job), err)
	}
	return nil
}

// jobFinished reports whether the Job completed or failed.
func jobFinished(job *batchv1.Job) bool {
	return derive.JobCondition(job, batchv1.JobComplete) != nil || derive.JobCondition(job, batchv1.JobFailed) != nil
}

// syncSuspend suspends the Job when the user suspends the TrainingJob or the queue does not let it
// run (waits), and resumes it otherwise. A Job suspended for the queue is replaced once its workers
// are gone (isStale).
func (r *JobReconciler) syncSuspend(ctx context.Context, tj *mlv1.TrainingJob, job *batchv1.Job, waits bool) error {
	current := ptr.Deref(job.Spec.Suspend, false)
	want := tj.Suspended() || waits
	if want == current {
		return nil
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Setting the Job's suspend", "job", klog.KObj(job), "suspend", want, "byQueue", waits)
	patch := client.MergeFrom(job.DeepCopy())
	job.Spec.Suspend = ptr.To(want)
	if err := r.Patch(ctx, job, patch); err != nil {
		return fmt.Errorf("setting suspend=%t on job %s: %w", want, job.Name, err)
	}
	return nil
}

// syncSize scales an elastic job's Job to numWorkers by setting parallelism and completions
// together. torchrun's rendezvous admits or drops the ranks.
func (r *JobReconciler) syncSize(ctx context.Context, tj *mlv1.TrainingJob, job *batchv1.Job) error {
	n := tj.Spec.NumWorkers
	if tj.Spec.Elastic == nil || (ptr.Deref(job.Spec.Parallelism, 0) == n && ptr.Deref(job.Spec.Completions, 0) == n) {
		return nil
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Scaling the Job", "job", klog.KObj(job), "workers", n)
	patch := client.MergeFrom(job.DeepCopy())
	job.Spec.Parallelism, job.Spec.Completions = ptr.To(n), ptr.To(n)
	if err := r.Patch(ctx, job, patch); err != nil {
		return fmt.Errorf("scaling job %s to %d workers: %w", job.Name, n, err)
	}
	return nil
}

// listPods lists the workers' pods of the current attempt's Job (job, nil when none), or of older
// attempts' Jobs when current is false. Pods no Job of the job's name controls (labels alone, as
// kubectl debug --copy-to leaves them) neither decide nor block an attempt, and are never deleted.
func listPods(ctx context.Context, c client.Reader, tj *mlv1.TrainingJob, current bool, job *batchv1.Job) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(tj.Namespace), client.MatchingLabels(names.SelectorLabels(tj))); err != nil {
		return nil, fmt.Errorf("listing pods of %s: %w", tj.Name, err)
	}
	out := pods.Items[:0]
	for _, p := range pods.Items {
		if ofJobName(tj, &p) && (names.JobAttempt(&p) == tj.Status.Attempt && madeBy(job, &p)) == current {
			out = append(out, p)
		}
	}
	return out, nil
}

// finished reports whether the run is Completed or Failed.
func finished(tj *mlv1.TrainingJob) bool {
	return tj.Status.State == mlv1.StateCompleted || tj.Status.State == mlv1.StateFailed
}
