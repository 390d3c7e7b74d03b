package metrics

import (
	"context"
	"errors"
	"net"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Instrument wraps the reconciler of the named controller so every reconcile counts in
// trainingjob_reconciliation_total{controller,result}, its time in
// trainingjob_reconciliation_duration_seconds{controller} and its error in
// trainingjob_reconciliation_errors_total{controller,error_type}: the StatusController's periodic reads
// do not drown the JobController's figures.
func Instrument(controller string, r reconcile.Reconciler) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		start := time.Now()
		res, err := r.Reconcile(ctx, req)
		ReconcileDuration.WithLabelValues(controller).Observe(time.Since(start).Seconds())
		switch {
		case err != nil:
			Reconciliations.WithLabelValues(controller, "error").Inc()
			ReconcileErrors.WithLabelValues(controller, ErrorType(err)).Inc()
		case res.RequeueAfter > 0:
			Reconciliations.WithLabelValues(controller, "requeue").Inc()
		default:
			Reconciliations.WithLabelValues(controller, "success").Inc()
		}
		return res, err
	})
}

// ErrorType classifies an error for trainingjob_reconciliation_errors_total.
func ErrorType(err error) string {
	var netErr net.Error
	switch {
	case apierrors.IsConflict(err):
		return "conflict"
	case apierrors.IsNotFound(err):
		return "not_found"
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return "invalid"
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return "forbidden"
	case apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &netErr) && netErr.Timeout()):
		return "timeout"
	}
	return "other"
}
