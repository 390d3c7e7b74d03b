// Package controllers holds the TrainingJob controllers.
package controllers

import (
	"context"
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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// JobReconciler turns a TrainingJob into an Indexed Job, a headless Service and a ConfigMap, and
// derives the TrainingJob's state from them.
type JobReconciler struct {
	client.Client
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
	Options  builders.Options
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
	if tj.Status.State == "" {
		// Record that the job was accepted before anything is created, so every job passes Pending.
		return reconcile.Result{}, r.writeStatus(ctx, tj, DeriveStatus(tj, Observed{}, metav1.NewTime(r.Clock.Now())))
	}
	var obs Observed
	var err error
	if !finished(tj) {
		if err = r.ensureConfigMap(ctx, tj); err != nil {
			return reconcile.Result{}, err
		}
		if err = r.ensureService(ctx, tj); err != nil {
			return reconcile.Result{}, err
		}
	}
	if obs.Job, err = r.ensureJob(ctx, tj); err != nil {
		return reconcile.Result{}, err
	}
	if obs.Pods, err = r.listPods(ctx, tj); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, r.writeStatus(ctx, tj, DeriveStatus(tj, obs, metav1.NewTime(r.Clock.Now())))
}

// writeStatus writes the status when it changed and records an event when the state changed.
func (r *JobReconciler) writeStatus(ctx context.Context, tj *mlv1.TrainingJob, st mlv1.TrainingJobStatus) error {
	if apiequality.Semantic.DeepEqual(tj.Status, st) {
		return nil
	}
	old := tj.Status
	tj.Status = st
	if err := r.Status().Update(ctx, tj); apierrors.IsConflict(err) {
		return nil // the cache is behind; the newer object's event brings another reconcile
	} else if err != nil {
		return fmt.Errorf("updating status of %s: %w", klog.KObj(tj), err)
	}
	if old.State != st.State {
		r.recordTransition(ctx, tj, old.State)
	}
	if running := conditionReason(st, mlv1.ConditionRunning); isFault(st.State, running) && running != conditionReason(old, mlv1.ConditionRunning) {
		r.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, running, "Observe", "%s", conditionMessage(st, mlv1.ConditionRunning))
	}
	return nil
}

func (r *JobReconciler) recordTransition(ctx context.Context, tj *mlv1.TrainingJob, from mlv1.State) {
	kind := corev1.EventTypeNormal
	if tj.Status.State == mlv1.StateFailed {
		kind = corev1.EventTypeWarning
	}
	note := conditionMessage(tj.Status, string(tj.Status.State))
	if note == "" {
		note = conditionMessage(tj.Status, mlv1.ConditionRunning)
	}
	r.Recorder.Eventf(tj, nil, kind, string(tj.Status.State), "Transition", "%s -> %s: %s", stateOrNone(from), tj.Status.State, note)
	ctrl.LoggerFrom(ctx).Info("state changed", "trainingJob", klog.KObj(tj), "from", from, "to", tj.Status.State)
}

func stateOrNone(s mlv1.State) string {
	if s == "" {
		return "New"
	}
	return string(s)
}

// SetupWithManager registers the controller: it watches TrainingJobs, owns their Jobs, Services and
// ConfigMaps, and maps worker pods to their TrainingJob by label.
func (r *JobReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&mlv1.TrainingJob{}).
		Owns(&batchv1.Job{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToTrainingJob)).
		Named("trainingjob").
		Complete(r)
}

func podToTrainingJob(_ context.Context, obj client.Object) []reconcile.Request {
	name, ok := obj.GetLabels()[builders.NameLabel]
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}
