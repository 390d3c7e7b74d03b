package controllers

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
)

// The QueueController keeps the list of LocalQueues whose ClusterQueue dispatches through a MultiKueue
// admission check: one ConfigMap, names.MultiKueueQueuesConfigMap in the operator's namespace, whose keys
// are <namespace>.<LocalQueue> (a namespace has no dot) and whose values are empty. The admission policy
// trainingjob-multikueue-managed-by (deploy/policy) reads it to default spec.managedBy of a job created in
// one of them. Only the operator (and the cluster's admins) may write there: no tenant can steer another's
// defaults, squat the name or delete the list. It runs only where Kueue's API is served. Its RBAC is
// the operator's namespace's Role, which stays there when the chart limits the rest to watchNamespaces.
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=localqueues;clusterqueues;admissionchecks,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=trainingjob-system,resources=configmaps,resourceNames=trainingjob-multikueue-queues,verbs=get;update;delete
// +kubebuilder:rbac:groups="",namespace=trainingjob-system,resources=configmaps,verbs=create

const queueController = "queue"

// QueueReconciler reconciles the one list: every request is for all the LocalQueues.
type QueueReconciler struct {
	client.Client
	// APIReader reads the ConfigMap, which the cache does not hold (it holds the jobs' only).
	APIReader client.Reader
	// Namespace is the operator's, where the ConfigMap lives (the policy's binding names it).
	Namespace string
}

// Reconcile observes the LocalQueues, their ClusterQueues and admission checks (the cache), decides which
// dispatch through MultiKueue, and writes the ConfigMap when that changed.
func (r *QueueReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	want, err := r.multiKueueQueues(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	cm := &corev1.ConfigMap{}
	found, err := getOptional(ctx, r.APIReader, client.ObjectKey{Namespace: r.Namespace, Name: names.MultiKueueQueuesConfigMap}, cm)
	if err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, r.writeQueues(ctx, want, cm, found)
}

// multiKueueQueues returns, as <namespace>.<LocalQueue> keys with empty values, the LocalQueues whose
// ClusterQueue has an admission check of MultiKueue's controller.
func (r *QueueReconciler) multiKueueQueues(ctx context.Context) (map[string]string, error) {
	var lqs kueue.LocalQueueList
	if err := r.List(ctx, &lqs); err != nil {
		return nil, fmt.Errorf("listing LocalQueues: %w", err)
	}
	out := map[string]string{}
	dispatches := map[kueue.ClusterQueueReference]bool{}
	for _, lq := range lqs.Items {
		ref := lq.Spec.ClusterQueue
		mk, seen := dispatches[ref]
		if !seen {
			var err error
			if mk, err = r.dispatched(ctx, ref); err != nil {
				return nil, err
			}
			dispatches[ref] = mk
		}
		if mk {
			out[lq.Namespace+"."+lq.Name] = ""
		}
	}
	return out, nil
}

// dispatched reports whether the ClusterQueue has an admission check of MultiKueue's controller.
func (r *QueueReconciler) dispatched(ctx context.Context, ref kueue.ClusterQueueReference) (bool, error) {
	cq := &kueue.ClusterQueue{}
	if found, err := getOptional(ctx, r.Client, client.ObjectKey{Name: string(ref)}, cq); err != nil || !found {
		return false, err
	}
	if cq.Spec.AdmissionChecksStrategy == nil {
		return false, nil
	}
	for _, rule := range cq.Spec.AdmissionChecksStrategy.AdmissionChecks {
		ac := &kueue.AdmissionCheck{}
		found, err := getOptional(ctx, r.Client, client.ObjectKey{Name: string(rule.Name)}, ac)
		if err != nil {
			return false, err
		}
		if found && ac.Spec.ControllerName == names.MultiKueueController {
			return true, nil
		}
	}
	return false, nil
}

// writeQueues creates, updates or deletes the ConfigMap so it lists want; it writes nothing when it already
// does.
func (r *QueueReconciler) writeQueues(ctx context.Context, want map[string]string, cm *corev1.ConfigMap, found bool) error {
	log := ctrl.LoggerFrom(ctx)
	switch {
	case len(want) == 0 && !found:
		return nil
	case len(want) == 0:
		if err := r.Delete(ctx, cm, client.Preconditions{UID: &cm.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s: %w", klog.KObj(cm), err)
		}
		log.V(1).Info("No MultiKueue queue left", "configMap", klog.KObj(cm))
		return nil
	case !found:
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: names.MultiKueueQueuesConfigMap,
			Labels: map[string]string{names.ManagedByLabel: names.ManagedByValue}}, Data: want}
		if err := r.Create(ctx, cm, client.FieldOwner(queueController)); err != nil {
			return fmt.Errorf("creating %s: %w", klog.KObj(cm), err)
		}
	case maps.Equal(cm.Data, want) && len(cm.BinaryData) == 0:
		return nil
	default:
		cm.Data, cm.BinaryData = want, nil
		if err := r.Update(ctx, cm, client.FieldOwner(queueController)); err != nil {
			return fmt.Errorf("updating %s: %w", klog.KObj(cm), err)
		}
	}
	log.V(1).Info("MultiKueue queues written", "configMap", klog.KObj(cm), "queues", len(want))
	return nil
}

// SetupWithManager registers the controller: a LocalQueue, or a change of a ClusterQueue's or an admission
// check's spec (not Kueue's frequent status writes), enqueues the one list.
func (r *QueueReconciler) SetupWithManager(mgr manager.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: r.Namespace, Name: names.MultiKueueQueuesConfigMap}}}
	})
	specs := builder.WithPredicates(predicate.GenerationChangedPredicate{})
	return ctrl.NewControllerManagedBy(mgr).Named(queueController).
		Watches(&kueue.LocalQueue{}, all, specs).
		Watches(&kueue.ClusterQueue{}, all, specs).
		Watches(&kueue.AdmissionCheck{}, all, specs).
		Complete(r)
}
