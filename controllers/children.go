package controllers

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

func (r *JobReconciler) ensureConfigMap(ctx context.Context, tj *mlv1.TrainingJob) error {
	cm, err := builders.ConfigMap(tj)
	if err != nil {
		return err
	}
	found, err := r.getOptional(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
	if err != nil || found {
		return err
	}
	return r.createOwned(ctx, tj, cm)
}

func (r *JobReconciler) ensureService(ctx context.Context, tj *mlv1.TrainingJob) error {
	svc := builders.Service(tj)
	found, err := r.getOptional(ctx, client.ObjectKeyFromObject(svc), &corev1.Service{})
	if err != nil || found {
		return err
	}
	return r.createOwned(ctx, tj, svc)
}

// ensureJob creates the workers' Job, or keeps its suspend field in step with the TrainingJob's. It
// returns the Job as observed, nil when it does not exist. A finished TrainingJob's Job is never
// recreated.
func (r *JobReconciler) ensureJob(ctx context.Context, tj *mlv1.TrainingJob) (*batchv1.Job, error) {
	want := builders.Job(tj, r.Options)
	job := &batchv1.Job{}
	found, err := r.getOptional(ctx, client.ObjectKeyFromObject(want), job)
	if err != nil {
		return nil, err
	}
	if !found {
		if finished(tj) || builders.Suspended(tj) {
			return nil, nil
		}
		return want, r.createOwned(ctx, tj, want)
	}
	if !metav1.IsControlledBy(job, tj) {
		return nil, fmt.Errorf("job %s exists and is not owned by trainingjob %s", job.Name, tj.Name)
	}
	if suspend := builders.Suspended(tj); ptr.Deref(job.Spec.Suspend, false) != suspend && !finished(tj) {
		patch := client.MergeFrom(job.DeepCopy())
		job.Spec.Suspend = ptr.To(suspend)
		if err := r.Patch(ctx, job, patch); err != nil {
			return nil, fmt.Errorf("setting suspend=%t on job %s: %w", suspend, job.Name, err)
		}
	}
	return job, nil
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
