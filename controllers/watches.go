package controllers

import (
	"context"
	"maps"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

// What wakes each controller: the predicates on TrainingJob events, and the mapping of a child or a
// pod to its TrainingJob.

// specOrState passes every TrainingJob event except updates that change none of the generation,
// labels, annotations, deletion, status.state and status.attempt. Dropping progress updates saves
// hundreds of reconciles a second at 1,000 jobs. A controller whose write conflicts retries by
// itself.
var specOrState = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, okOld := e.ObjectOld.(*mlv1.TrainingJob)
	n, okNew := e.ObjectNew.(*mlv1.TrainingJob)
	if !okOld || !okNew {
		return true
	}
	return o.Generation != n.Generation || o.Status.State != n.Status.State || o.Status.Attempt != n.Status.Attempt ||
		!n.DeletionTimestamp.IsZero() || !maps.Equal(o.Labels, n.Labels) || !maps.Equal(o.Annotations, n.Annotations)
}}

// jobControllerEvents are specOrState's events plus the StatusController's facts the JobController
// acts on: the SuccessPolicyMet and Stalled conditions and a change of goodput category.
var jobControllerEvents = predicate.Or[client.Object](specOrState, predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, okOld := e.ObjectOld.(*mlv1.TrainingJob)
	n, okNew := e.ObjectNew.(*mlv1.TrainingJob)
	if !okOld || !okNew {
		return false
	}
	for _, c := range []string{mlv1.ConditionSuccessPolicyMet, mlv1.ConditionStalled} {
		if meta.IsStatusConditionTrue(n.Status.Conditions, c) != meta.IsStatusConditionTrue(o.Status.Conditions, c) {
			return true
		}
	}
	return goodputMoved(o, n)
}})

// goodputMoved reports whether another controller's write moved a job's goodput to another category
// or told of a newer checkpoint, so the JobController accounts it.
func goodputMoved(o, n *mlv1.TrainingJob) bool {
	oc, _ := derive.GoodputCategory(o)
	nc, _ := derive.GoodputCategory(n)
	return oc != nc || checkpointTime(o) != checkpointTime(n)
}

// checkpointTime returns when the status' newest checkpoint was written, or the zero time.
func checkpointTime(tj *mlv1.TrainingJob) time.Time {
	if c := tj.Status.Checkpoint; c != nil && c.LastTime != nil {
		return c.LastTime.Time
	}
	return time.Time{}
}

// trackingEvents returns specOrState's events of tracked jobs plus what the TrackingController
// logs: a new epoch, a newer checkpoint and the run in the status.
func trackingEvents(opts builders.Options) predicate.Funcs {
	tracked := func(o client.Object) bool {
		tj, ok := o.(*mlv1.TrainingJob)
		return ok && (tj.Status.MLflow != nil || builders.MLflowTrackingURI(tj, opts) != "")
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return tracked(e.Object) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return tracked(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return tracked(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okOld := e.ObjectOld.(*mlv1.TrainingJob)
			n, okNew := e.ObjectNew.(*mlv1.TrainingJob)
			if !okOld || !okNew || !tracked(n) {
				return false
			}
			return specOrState.Update(e) || metricsEpoch(o) != metricsEpoch(n) || (o.Status.Metrics == nil) != (n.Status.Metrics == nil) ||
				checkpointLatest(o) != checkpointLatest(n) || !apiequality.Semantic.DeepEqual(o.Status.MLflow, n.Status.MLflow)
		},
	}
}

// metricsEpoch returns the epoch rank 0's metrics in the status were read at.
func metricsEpoch(tj *mlv1.TrainingJob) int32 {
	if m := tj.Status.Metrics; m != nil {
		return m.Epoch
	}
	return 0
}

// statusControllerEvents are specOrState's events plus a finished run's newer checkpoint, which
// settles its epoch (derive.SettleProgress).
var statusControllerEvents = predicate.Or[client.Object](specOrState, predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, okOld := e.ObjectOld.(*mlv1.TrainingJob)
	n, okNew := e.ObjectNew.(*mlv1.TrainingJob)
	return okOld && okNew && finished(n) && checkpointLatest(o) != checkpointLatest(n)
}})

func checkpointLatest(tj *mlv1.TrainingJob) string {
	if c := tj.Status.Checkpoint; c != nil {
		return c.Latest
	}
	return ""
}

// created passes only creations: the TrackingController waits for a job's ConfigMap to exist, not
// for its changes.
var created = predicate.Funcs{
	UpdateFunc:  func(event.UpdateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// byNameLabel maps a child or a pod to its TrainingJob by the name label.
func byNameLabel(_ context.Context, obj client.Object) []reconcile.Request {
	key, ok := trainingJobOf(obj)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}
