// Package controllers holds the TrainingJob controllers.
package controllers

import (
	"context"
	"errors"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// JobReconciler turns a TrainingJob into an Indexed Job, a headless Service and a ConfigMap, and
// derives the TrainingJob's state from them.
type JobReconciler struct {
	client.Client
	// APIReader reads what the cache does not hold: a checkpoint claim's events.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	Options   builders.Options
}

// +kubebuilder:rbac:groups=ml.example.com,resources=trainingjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=ml.example.com,resources=trainingjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services;configmaps,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile brings one TrainingJob's children and status in line with its spec.
func (r *JobReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	tj := &mlv1.TrainingJob{}
	if found, err := r.getOptional(ctx, req.NamespacedName, tj); err != nil || !found {
		return reconcile.Result{}, err
	}
	if !tj.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil // children go with it through owner references
	}
	old := *tj.Status.DeepCopy()
	// Where checkpoints go is chosen before anything is built from it; the status write records it.
	tj.Status.CheckpointStorage = builders.StorageChoice(tj, r.Options)
	now := metav1.NewTime(r.Clock.Now())
	if old.State == "" {
		// Record that the job was accepted before anything is created, so every job passes Pending.
		return reconcile.Result{}, r.writeStatus(ctx, tj, old, DeriveStatus(tj, Observed{}, now))
	}
	obs, err := r.ensureChildren(ctx, tj)
	if rejected(err) && old.State == mlv1.StatePending {
		// Say why nothing starts, and keep retrying with backoff: the cause (a quota, a policy) may go.
		return reconcile.Result{}, errors.Join(err, r.writeStatus(ctx, tj, old, DeriveStatus(tj, Observed{CreateRejected: apiMessage(err)}, now)))
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	var res reconcile.Result
	if claimWaiting(obs) {
		res.RequeueAfter = claimRecheck
	}
	return res, r.writeStatus(ctx, tj, old, DeriveStatus(tj, obs, now))
}

// rejected is true for errors that repeat until something changes: the object is invalid, or admission
// (a policy, a webhook, a quota) forbids it.
func rejected(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err)
}

// apiMessage is the API server's message of an error, without our wrapping.
func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}

// ensureChildren creates or updates the ConfigMap, Service, checkpoint claim and Job, and observes the
// claim, the Job and its pods.
func (r *JobReconciler) ensureChildren(ctx context.Context, tj *mlv1.TrainingJob) (Observed, error) {
	var obs Observed
	if !finished(tj) {
		if err := r.ensureConfigMap(ctx, tj); err != nil {
			return obs, err
		}
		if err := r.ensureService(ctx, tj); err != nil {
			return obs, err
		}
		if err := r.ensureClaim(ctx, tj, &obs); err != nil {
			return obs, err
		}
	}
	var err error
	if obs.Job, err = r.ensureJob(ctx, tj); err != nil {
		return obs, err
	}
	obs.Pods, err = r.listPods(ctx, tj)
	return obs, err
}

// writeStatus writes st when it differs from old, the status as read, and records an event when the
// state changed.
func (r *JobReconciler) writeStatus(ctx context.Context, tj *mlv1.TrainingJob, old, st mlv1.TrainingJobStatus) error {
	if apiequality.Semantic.DeepEqual(old, st) {
		return nil
	}
	tj.Status = st
	if err := r.Status().Update(ctx, tj); err != nil {
		// A conflict (the StatusController wrote progress meanwhile) is returned too: the reconcile is
		// retried, since progress-only updates do not trigger this controller (see specOrState).
		return fmt.Errorf("updating status of %s: %w", klog.KObj(tj), err)
	}
	r.recordEvents(ctx, tj, old)
	return nil
}

// SetupWithManager registers the controller: it watches TrainingJobs, owns their Jobs, Services and
// ConfigMaps, and maps worker pods and checkpoint claims (owned or not) to their TrainingJob by label.
func (r *JobReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&mlv1.TrainingJob{}, builder.WithPredicates(specOrState)).
		Owns(&batchv1.Job{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(byNameLabel)).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(byNameLabel)).
		Named(jobController).
		Complete(metrics.Instrument(jobController, r))
}

func byNameLabel(_ context.Context, obj client.Object) []reconcile.Request {
	name, ok := obj.GetLabels()[builders.NameLabel]
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}
