package controllers

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// What every controller's Reconcile shares: a read that tells "absent" from an error, the result it
// returns, the retry backoff of its queue, and the mapping of a child to its TrainingJob.

// getTrainingJob gets a TrainingJob and applies the spec's defaults; found is false when it does
// not exist. It is the one place a controller defaults a TrainingJob.
func getTrainingJob(ctx context.Context, c client.Reader, key client.ObjectKey, tj *mlv1.TrainingJob) (bool, error) {
	found, err := getOptional(ctx, c, key, tj)
	if found {
		tj.Default()
	}
	return found, err
}

// getManagedTrainingJob is getTrainingJob for the controllers that follow a running job. A
// TrainingJob another controller manages (spec.managedBy) counts as not found.
func getManagedTrainingJob(ctx context.Context, c client.Reader, key client.ObjectKey, tj *mlv1.TrainingJob) (bool, error) {
	found, err := getTrainingJob(ctx, c, key, tj)
	return found && builders.ManagedByOperator(tj), err
}

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

// result returns what Reconcile returns: res, or only err when there is one, since
// controller-runtime ignores a result sent with an error. A conflict is no error: the job is
// requeued with backoff.
func result(res reconcile.Result, err error) (reconcile.Result, error) {
	switch {
	case apierrors.IsConflict(err):
		return reconcile.Result{Requeue: true}, nil //nolint:staticcheck // the rate limiter's backoff, as for a status conflict
	case err != nil:
		return reconcile.Result{}, err
	}
	return res, nil
}

// maxRetryDelay bounds how long a failing reconcile waits before it is retried. client-go's default
// grows to 1,000 s, and progress reads, checkpoint reads and deadlines return only through
// RequeueAfter.
const maxRetryDelay = 5 * time.Second

// controllerOptions returns the controllers' options: workers reconciles at once, and retries with
// client-go's backoff capped at maxRetryDelay and limited to 10 a second (burst 100).
func controllerOptions(workers int) controller.Options {
	return controller.Options{MaxConcurrentReconciles: workers, RateLimiter: workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)})}
}

// minResult returns the sooner of two results.
func minResult(a, b reconcile.Result) reconcile.Result {
	if a.Requeue || b.Requeue { //nolint:staticcheck // Requeue is what applyStatus asks on a conflict
		return reconcile.Result{Requeue: true} //nolint:staticcheck // keeps applyStatus's conflict requeue
	}
	if a.RequeueAfter == 0 || (b.RequeueAfter > 0 && b.RequeueAfter < a.RequeueAfter) {
		return b
	}
	return a
}
