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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
)

// The QueueController keeps, in each namespace, the list of LocalQueues whose ClusterQueue dispatches
// through a MultiKueue admission check: the ConfigMap names.MultiKueueQueuesConfigMap, one key per such
// LocalQueue (its value the ClusterQueue). The admission policy trainingjob-multikueue-managed-by
// (deploy/policy) reads it to default spec.managedBy of a job created in one of them. It runs only where
// Kueue's API is served.
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=localqueues;clusterqueues;admissionchecks,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update;delete

const queueController = "queue"

// QueueReconciler reconciles a namespace: its key is the namespace's name.
type QueueReconciler struct {
	client.Client
	// APIReader reads the ConfigMap, which the cache does not hold (it holds the jobs' only).
	APIReader client.Reader
}

// Reconcile observes the namespace's LocalQueues, their ClusterQueues and admission checks (the cache),
// decides which dispatch through MultiKueue, and writes the ConfigMap when that changed.
func (r *QueueReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ns := req.Name
	want, err := r.multiKueueQueues(ctx, ns)
	if err != nil {
		return reconcile.Result{}, err
	}
	cm := &corev1.ConfigMap{}
	found, err := getOptional(ctx, r.APIReader, client.ObjectKey{Namespace: ns, Name: names.MultiKueueQueuesConfigMap}, cm)
	if err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, r.writeQueues(ctx, ns, want, cm, found)
}

// multiKueueQueues returns the namespace's LocalQueues whose ClusterQueue has an admission check of
// MultiKueue's controller, with their ClusterQueue.
func (r *QueueReconciler) multiKueueQueues(ctx context.Context, ns string) (map[string]string, error) {
	var lqs kueue.LocalQueueList
	if err := r.List(ctx, &lqs, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing the LocalQueues of %s: %w", ns, err)
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
			out[lq.Name] = string(ref)
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

// writeQueues creates, updates or deletes the namespace's ConfigMap so it lists want; it writes nothing
// when it already does, and leaves alone a ConfigMap of that name the operator did not make.
func (r *QueueReconciler) writeQueues(ctx context.Context, ns string, want map[string]string, cm *corev1.ConfigMap, found bool) error {
	log := ctrl.LoggerFrom(ctx)
	switch {
	case found && cm.Labels[names.ManagedByLabel] != names.ManagedByValue:
		log.Info("A ConfigMap the operator did not make holds the MultiKueue queues' name: jobs there get no default managedBy",
			"configMap", klog.KObj(cm))
		return nil
	case len(want) == 0 && !found:
		return nil
	case len(want) == 0:
		if err := r.Delete(ctx, cm, client.Preconditions{UID: &cm.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s: %w", klog.KObj(cm), err)
		}
		log.V(1).Info("No MultiKueue queue left in the namespace", "configMap", klog.KObj(cm))
		return nil
	case !found:
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: names.MultiKueueQueuesConfigMap,
			Labels: map[string]string{names.ManagedByLabel: names.ManagedByValue}}, Data: want}
		if err := r.Create(ctx, cm, client.FieldOwner(queueController)); err != nil {
			return fmt.Errorf("creating %s: %w", klog.KObj(cm), err)
		}
	case maps.Equal(cm.Data, want):
		return nil
	default:
		cm.Data = want
		if err := r.Update(ctx, cm, client.FieldOwner(queueController)); err != nil {
			return fmt.Errorf("updating %s: %w", klog.KObj(cm), err)
		}
	}
	log.V(1).Info("MultiKueue queues of the namespace written", "configMap", klog.KObj(cm), "queues", len(want))
	return nil
}

// SetupWithManager registers the controller: a LocalQueue enqueues its namespace, a ClusterQueue or an
// admission check every namespace with a LocalQueue.
func (r *QueueReconciler) SetupWithManager(mgr manager.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named(queueController).
		Watches(&kueue.LocalQueue{}, handler.EnqueueRequestsFromMapFunc(namespaceOf)).
		Watches(&kueue.ClusterQueue{}, handler.EnqueueRequestsFromMapFunc(r.queueNamespaces)).
		Watches(&kueue.AdmissionCheck{}, handler.EnqueueRequestsFromMapFunc(r.queueNamespaces)).
		Complete(r)
}

func namespaceOf(_ context.Context, obj client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: obj.GetNamespace()}}}
}

// queueNamespaces returns every namespace with a LocalQueue.
func (r *QueueReconciler) queueNamespaces(ctx context.Context, _ client.Object) []reconcile.Request {
	var lqs kueue.LocalQueueList
	if err := r.List(ctx, &lqs); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing LocalQueues")
		return nil
	}
	seen := map[string]bool{}
	var out []reconcile.Request
	for _, lq := range lqs.Items {
		if !seen[lq.Namespace] {
			seen[lq.Namespace] = true
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: lq.Namespace}})
		}
	}
	return out
}
