package controllers

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// Helpers the three controllers share: reads that tell "absent" from errors, and the one way a status
// is written.

// getOptional gets obj by key; found is false when it does not exist.
func getOptional(ctx context.Context, c client.Reader, key client.ObjectKey, obj client.Object) (bool, error) {
	err := c.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("getting %T %s: %w", obj, key, err)
	}
	return true, nil
}

// writeStatus writes tj.Status when it differs from old, the status as read. Every controller writes only
// the fields it owns (see package derive) on top of what it read, with the resourceVersion it read: a
// conflict means another controller wrote meanwhile, and the caller computes its fields again on the
// object as it is now (requeue, not an error: nothing failed). written is true when the write happened.
func writeStatus(ctx context.Context, c client.Client, tj *mlv1.TrainingJob, old mlv1.TrainingJobStatus) (written bool, res reconcile.Result, err error) {
	if apiequality.Semantic.DeepEqual(old, tj.Status) {
		return false, reconcile.Result{}, nil
	}
	err = c.Status().Update(ctx, tj)
	if apierrors.IsConflict(err) {
		ctrl.LoggerFrom(ctx).V(1).Info("status changed meanwhile; computing again", "trainingJob", klog.KObj(tj))
		return false, reconcile.Result{Requeue: true}, nil
	}
	if err != nil {
		return false, reconcile.Result{}, fmt.Errorf("updating status of %s: %w", klog.KObj(tj), err)
	}
	return true, reconcile.Result{}, nil
}

// minResult is the sooner of two results.
func minResult(a, b reconcile.Result) reconcile.Result {
	if a.Requeue || b.Requeue { //nolint:staticcheck // Requeue is what writeStatus asks on a conflict
		return reconcile.Result{Requeue: true}
	}
	if a.RequeueAfter == 0 || (b.RequeueAfter > 0 && b.RequeueAfter < a.RequeueAfter) {
		return b
	}
	return a
}

// byNameLabel maps a child or a pod to its TrainingJob by the name label.
func byNameLabel(_ context.Context, obj client.Object) []reconcile.Request {
	name, ok := obj.GetLabels()[builders.NameLabel]
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}
