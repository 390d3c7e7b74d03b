package controllers

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// createOwned creates obj owned by tj. Names are deterministic, so an object left by an earlier
// reconcile (or a crash between two creates) is found, never duplicated.
func (r *JobReconciler) createOwned(ctx context.Context, tj *mlv1.TrainingJob, obj client.Object) error {
	if err := controllerutil.SetControllerReference(tj, obj, r.Scheme); err != nil {
		return fmt.Errorf("setting owner of %T %s: %w", obj, obj.GetName(), err)
	}
	return r.create(ctx, obj)
}

// create creates obj; one of its name that exists already is left as it is.
func (r *JobReconciler) create(ctx context.Context, obj client.Object) error {
	if err := r.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

// getOptional gets obj by key; found is false when it does not exist.
func (r *JobReconciler) getOptional(ctx context.Context, key client.ObjectKey, obj client.Object) (bool, error) {
	err := r.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("getting %T %s: %w", obj, key, err)
	}
	return true, nil
}

// ensure creates want, or, when an object of its name exists (read into current), lets sync copy the
// fields the operator manages from want and updates the object when sync reports a change.
func (r *JobReconciler) ensure(ctx context.Context, tj *mlv1.TrainingJob, want, current client.Object, sync func() bool) error {
	found, err := r.getOptional(ctx, client.ObjectKeyFromObject(want), current)
	if err != nil {
		return err
	}
	if !found {
		return r.createOwned(ctx, tj, want)
	}
	if !sync() {
		return nil
	}
	if err := r.Update(ctx, current); err != nil {
		return fmt.Errorf("updating %T %s of %s: %w", current, current.GetName(), klog.KObj(tj), err)
	}
	return nil
}

// ensureConfigMap creates the ConfigMap, or brings config.json up to date (it changes only while no worker
// runs: admission rejects changes to the hyperparameters of an Initializing or Running job). RESUME_FROM is
// set here only when the ConfigMap is created or lacks it; after that the StatusController alone moves it
// forward, together with the agent's protection (see syncResumeFrom): this controller, working from a
// status it may see late, must never move it back to a checkpoint rotation may already have deleted.
func (r *JobReconciler) ensureConfigMap(ctx context.Context, tj *mlv1.TrainingJob) error {
	want, err := builders.ConfigMap(tj)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{}
	return r.ensure(ctx, tj, want, cm, func() bool {
		if v, ok := cm.Data[builders.ResumeFromKey]; ok {
			want.Data[builders.ResumeFromKey] = v
		}
		if apiequality.Semantic.DeepEqual(cm.Data, want.Data) {
			return false
		}
		cm.Data = want.Data
		return true
	})
}

// ensureService creates the headless Service, or brings its ports and selector up to date.
func (r *JobReconciler) ensureService(ctx context.Context, tj *mlv1.TrainingJob) error {
	want := builders.Service(tj)
	svc := &corev1.Service{}
	return r.ensure(ctx, tj, want, svc, func() bool {
		if apiequality.Semantic.DeepEqual(svc.Spec.Ports, want.Spec.Ports) && apiequality.Semantic.DeepEqual(svc.Spec.Selector, want.Spec.Selector) {
			return false
		}
		svc.Spec.Ports, svc.Spec.Selector = want.Spec.Ports, want.Spec.Selector
		return true
	})
}

// stopJob suspends a Job that still runs workers of a finished TrainingJob (a success policy completed
// it): the Job controller stops the pods gracefully (SIGTERM, grace period) and the Job is kept for its
// history.
func (r *JobReconciler) stopJob(ctx context.Context, job *batchv1.Job) error {
	if ptr.Deref(job.Spec.Suspend, false) || jobCondition(job, batchv1.JobComplete) != nil || jobCondition(job, batchv1.JobFailed) != nil {
		return nil
	}
	patch := client.MergeFrom(job.DeepCopy())
	job.Spec.Suspend = ptr.To(true)
	if err := r.Patch(ctx, job, patch); err != nil {
		return fmt.Errorf("stopping the workers of finished job %s: %w", klog.KObj(job), err)
	}
	return nil
}

// ensureJob creates the workers' Job, keeps its suspend field in step with the TrainingJob's and
// replaces a suspended Job built from an older spec. It returns the Job as observed, nil when it does
// not exist. A finished TrainingJob's Job is never recreated.
func (r *JobReconciler) ensureJob(ctx context.Context, tj *mlv1.TrainingJob) (*batchv1.Job, error) {
	want := builders.Job(tj, r.Options)
	job := &batchv1.Job{}
	found, err := r.getOptional(ctx, client.ObjectKeyFromObject(want), job)
	switch {
	case err != nil:
		return nil, err
	case !found && (finished(tj) || builders.Suspended(tj)):
		return nil, nil
	case !found:
		return want, r.createOwned(ctx, tj, want)
	case !metav1.IsControlledBy(job, tj):
		return nil, fmt.Errorf("job %s exists and is not owned by trainingjob %s", job.Name, tj.Name)
	case finished(tj):
		return job, r.stopJob(ctx, job)
	case isStale(job, want):
		return nil, r.deleteStale(ctx, job)
	}
	return job, r.syncSuspend(ctx, tj, job)
}

// isStale: the Job is suspended, runs no pod, and was built from a spec edited since (spec edits are
// admitted only while suspended). Its pod template is immutable, so it is replaced.
func isStale(job, want *batchv1.Job) bool {
	return ptr.Deref(job.Spec.Suspend, false) && job.Status.Active == 0 &&
		job.Annotations[builders.SpecHashAnnotation] != want.Annotations[builders.SpecHashAnnotation]
}

func (r *JobReconciler) deleteStale(ctx context.Context, job *batchv1.Job) error {
	err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &job.UID})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("replacing job %s built from an older spec: %w", job.Name, err)
	}
	return nil
}

// syncSuspend suspends the Job when the user suspends the TrainingJob, and resumes it when the user
// resumes, unless a queue (Kueue) decides when it runs.
func (r *JobReconciler) syncSuspend(ctx context.Context, tj *mlv1.TrainingJob, job *batchv1.Job) error {
	current := ptr.Deref(job.Spec.Suspend, false)
	want := current
	switch {
	case builders.Suspended(tj):
		want = true
	case builders.QueueName(tj) == "":
		want = false
	}
	if want == current {
		return nil
	}
	patch := client.MergeFrom(job.DeepCopy())
	job.Spec.Suspend = ptr.To(want)
	if err := r.Patch(ctx, job, patch); err != nil {
		return fmt.Errorf("setting suspend=%t on job %s: %w", want, job.Name, err)
	}
	return nil
}

// listPods lists the workers' pods.
func (r *JobReconciler) listPods(ctx context.Context, tj *mlv1.TrainingJob) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(tj.Namespace), client.MatchingLabels(builders.SelectorLabels(tj))); err != nil {
		return nil, fmt.Errorf("listing pods of %s: %w", tj.Name, err)
	}
	return pods.Items, nil
}

func finished(tj *mlv1.TrainingJob) bool {
	return tj.Status.State == mlv1.StateCompleted || tj.Status.State == mlv1.StateFailed
}
