package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/time/rate"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// Helpers the controllers share: reads that tell "absent" from errors, and the one way a status
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
	if log := ctrl.LoggerFrom(ctx).V(2); log.Enabled() {
		log.Info("writing status", "trainingJob", klog.KObj(tj), "diff", cmp.Diff(old, tj.Status))
	}
	err = c.Status().Update(ctx, tj)
	if err == nil {
		statusWrites.wrote(tj)
	}
	if apierrors.IsConflict(err) {
		ctrl.LoggerFrom(ctx).V(1).Info("status changed meanwhile; computing again", "trainingJob", klog.KObj(tj))
		return false, reconcile.Result{Requeue: true}, nil //nolint:staticcheck // the rate limiter's backoff: a conflict is computed again at once, then slower
	}
	if err != nil {
		return false, reconcile.Result{}, fmt.Errorf("updating status of %s: %w", klog.KObj(tj), err)
	}
	return true, reconcile.Result{}, nil
}

// statusWrites are the resourceVersions of this process's last status write of each TrainingJob.
var statusWrites resourceVersions

// cacheLag is how long a reconcile that found the cache behind its own last write waits before it looks
// again (the watch event that brings the write usually comes within milliseconds).
const cacheLag = 20 * time.Millisecond

// resourceVersions remembers the resourceVersion of each object's last write by this process, by UID, so
// that a reconcile reading from a cache that has not seen that write yet waits for it instead of
// computing from the old object and writing a conflict (kube-controller-manager's controllers do the same
// since 1.35). A record older than a minute is ignored: a cache that far behind is being resynced anyway.
type resourceVersions struct{ m sync.Map }

type writtenVersion struct {
	rv string
	at time.Time
}

func (v *resourceVersions) wrote(obj client.Object) {
	if obj.GetUID() == "" {
		return // not from an API server (a test's object)
	}
	v.m.Store(obj.GetUID(), writtenVersion{obj.GetResourceVersion(), time.Now()})
}

// behind: obj, read from the cache, is older than this process's last write of it.
func (v *resourceVersions) behind(obj client.Object) bool {
	w, ok := v.m.Load(obj.GetUID())
	if !ok {
		return false
	}
	c, err := resourceversion.CompareResourceVersion(obj.GetResourceVersion(), w.(writtenVersion).rv)
	if err != nil || c >= 0 || time.Since(w.(writtenVersion).at) > time.Minute {
		v.m.CompareAndDelete(obj.GetUID(), w)
		return false
	}
	return true
}

// result is what Reconcile returns: res, or only err when there is one (controller-runtime ignores a
// result returned with an error, and warns about it). A conflict (a write based on a cache that had not
// seen the latest version yet) is no error: the job is computed again, with backoff, on what the cache
// holds then.
func result(res reconcile.Result, err error) (reconcile.Result, error) {
	switch {
	case apierrors.IsConflict(err):
		return reconcile.Result{Requeue: true}, nil //nolint:staticcheck // the rate limiter's backoff, as for a status conflict
	case err != nil:
		return reconcile.Result{}, err
	}
	return res, nil
}

// maxRetryDelay bounds how long a failing reconcile waits before it is tried again. client-go's default
// doubles from 5 ms up to 1,000 s, so a job whose reconciles kept failing through a few minutes of API
// outage would not be looked at again for up to a quarter of an hour unless one of its objects changed:
// progress reads, checkpoint reads and deadlines come back through RequeueAfter, not through events.
const maxRetryDelay = 5 * time.Second

// controllerOptions are the options of the controllers: workers reconciles at once, and failures
// retried with client-go's default backoff capped at maxRetryDelay, within its overall bound of 10
// retries a second (burst 100), which keeps a long outage from turning into a storm of retries.
func controllerOptions(workers int) controller.Options {
	return controller.Options{MaxConcurrentReconciles: workers, RateLimiter: workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)}
}

// minResult is the sooner of two results.
func minResult(a, b reconcile.Result) reconcile.Result {
	if a.Requeue || b.Requeue { //nolint:staticcheck // Requeue is what writeStatus asks on a conflict
		return reconcile.Result{Requeue: true} //nolint:staticcheck // keeps writeStatus's conflict requeue
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
