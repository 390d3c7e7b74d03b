package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// cleanupFinished applies spec.cleanup to a finished run. cleanPodPolicy All deletes every worker
// pod. After ttlSecondsAfterFinished it deletes the children, and with deleteTrainingJob the
// TrainingJob too (done). The checkpoint claim follows claimRetentionPolicy. res requeues at the
// TTL.
func (r *JobReconciler) cleanupFinished(ctx context.Context, tj *mlv1.TrainingJob,
	now time.Time) (done bool, res reconcile.Result, err error) {
	if !finished(tj) {
		return false, res, nil
	}
	c := tj.Spec.Cleanup
	if c.CleanPodPolicy == mlv1.CleanPodsAll {
		if err := r.deletePods(ctx, tj); err != nil {
			return false, res, err
		}
	}
	if c.TTLSecondsAfterFinished == nil || tj.Status.CompletionTime == nil {
		return false, res, nil
	}
	if left := tj.Status.CompletionTime.Add(time.Duration(*c.TTLSecondsAfterFinished) * time.Second).Sub(now); left > 0 {
		return false, reconcile.Result{RequeueAfter: left}, nil
	}
	if c.DeleteTrainingJob {
		ctrl.LoggerFrom(ctx).Info("deleting finished TrainingJob (ttlSecondsAfterFinished)")
		return true, res, ignoreNotFound(r.Delete(ctx, tj, client.Preconditions{UID: &tj.UID}))
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Deleting the finished run's children (ttlSecondsAfterFinished)")
	return false, res, r.deleteChildren(ctx, tj)
}

// deletePods deletes the run's pods (cleanPodPolicy All). It calls the API server only while the
// cache holds a pod not yet being deleted.
func (r *JobReconciler) deletePods(ctx context.Context, tj *mlv1.TrainingJob) error {
	var pods corev1.PodList
	sel := client.MatchingLabels(names.SelectorLabels(tj))
	if err := r.List(ctx, &pods, client.InNamespace(tj.Namespace), sel); err != nil {
		return fmt.Errorf("listing the pods of finished %s: %w", klog.KObj(tj), err)
	}
	if !slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp == nil }) {
		return nil
	}
	if err := r.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(tj.Namespace), sel); err != nil {
		return fmt.Errorf("deleting the pods of finished %s (cleanPodPolicy All): %w", klog.KObj(tj), err)
	}
	return nil
}

// deleteChildren deletes the run's Job (and its pods), Service, ConfigMap and PodGroup that the
// cache still holds.
func (r *JobReconciler) deleteChildren(ctx context.Context, tj *mlv1.TrainingJob) error {
	meta := metav1.ObjectMeta{Namespace: tj.Namespace}
	children := []client.Object{
		&batchv1.Job{ObjectMeta: withName(meta, names.JobName(tj))},
		&corev1.Service{ObjectMeta: withName(meta, names.ServiceName(tj))},
		&corev1.ConfigMap{ObjectMeta: withName(meta, names.ConfigMapName(tj))},
	}
	if pg := builders.PodGroup(tj, r.options(ctx)); pg != nil {
		children = append(children, pg)
	}
	for _, obj := range children {
		found, err := getOptional(ctx, r.Client, client.ObjectKeyFromObject(obj), obj)
		if err != nil || !found || !metav1.IsControlledBy(obj, tj) {
			// A PodGroup API gone with its scheduler leaves nothing to clean.
			continue
		}
		if err := r.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); ignoreNotFound(err) != nil {
			return fmt.Errorf("deleting %T %s of finished %s (ttlSecondsAfterFinished): %w", obj, obj.GetName(), klog.KObj(tj), err)
		}
	}
	return nil
}

func withName(m metav1.ObjectMeta, name string) metav1.ObjectMeta {
	m.Name = name
	return m
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
