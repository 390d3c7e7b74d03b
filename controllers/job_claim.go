package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

// The checkpoint claim the operator creates for a job whose checkpoints name no storage (see
// builders.CheckpointClaim). It is not owned by the TrainingJob unless claimRetentionPolicy is
// Delete: checkpoints outlive the job by default.
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=events,verbs=list

// claimRecheck is how soon a job with an unbound claim is looked at again. The events that say why
// do not change the claim, so they trigger no reconcile.
const claimRecheck = 5 * time.Second

// ensureClaim creates the job's checkpoint claim when the operator manages it, and observes the
// claim and, while unbound, its newest event.
func (r *JobReconciler) ensureClaim(ctx context.Context, tj *mlv1.TrainingJob, obs *derive.Observed) error {
	if !builders.ManagedClaim(tj) {
		return nil
	}
	var err error
	obs.Claim, obs.ClaimEvent, err = r.observeClaim(ctx, tj, builders.CheckpointClaim(tj), builders.ClaimOwned(tj))
	return err
}

// observeClaim creates want if it is missing, owned by the job when owned is set. It returns the
// claim and, while unbound, its newest event.
func (r *JobReconciler) observeClaim(ctx context.Context, tj *mlv1.TrainingJob, want *corev1.PersistentVolumeClaim,
	owned bool) (*corev1.PersistentVolumeClaim, *corev1.Event, error) {
	claim := &corev1.PersistentVolumeClaim{}
	found, err := getOptional(ctx, r.Client, client.ObjectKeyFromObject(want), claim)
	switch {
	case err != nil:
		return nil, nil, err
	case !found && owned:
		err = r.createOwned(ctx, tj, want)
	case !found:
		err = r.create(ctx, want)
	}
	if err != nil {
		return nil, nil, err
	}
	if !found {
		claim = want
	}
	if claim.Status.Phase == corev1.ClaimBound || claim.UID == "" {
		return claim, nil, nil
	}
	event, err := r.newestEvent(ctx, claim)
	return claim, event, err
}

// newestEvent returns the newest event about obj, or nil. It reads the API server directly, since
// the operator caches no events, and only for unbound claims.
func (r *JobReconciler) newestEvent(ctx context.Context, obj client.Object) (*corev1.Event, error) {
	var list corev1.EventList
	err := r.APIReader.List(ctx, &list, client.InNamespace(obj.GetNamespace()),
		client.MatchingFields{"involvedObject.uid": string(obj.GetUID())})
	if err != nil {
		return nil, fmt.Errorf("listing the events of %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	var newest *corev1.Event
	for i := range list.Items {
		if newest == nil || !eventTime(&list.Items[i]).Before(eventTime(newest)) {
			newest = &list.Items[i]
		}
	}
	return newest, nil
}

func eventTime(e *corev1.Event) time.Time {
	t := e.CreationTimestamp.Time
	for _, u := range []time.Time{e.LastTimestamp.Time, e.EventTime.Time} {
		if u.After(t) {
			t = u
		}
	}
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	return t
}

// claimWaiting reports whether an observed claim is not bound yet, so its events are read again
// after claimRecheck.
func claimWaiting(obs derive.Observed) bool {
	return obs.Claim != nil && obs.Claim.Status.Phase != corev1.ClaimBound ||
		obs.InputsClaim != nil && obs.InputsClaim.Status.Phase != corev1.ClaimBound
}

// ensureInputsCache creates the shared input cache claim, owned by the job, when a model or dataset
// source is fetched, and observes it. A PerNode cache uses the node cache directory instead.
func (r *JobReconciler) ensureInputsCache(ctx context.Context, tj *mlv1.TrainingJob, obs *derive.Observed) error {
	switch {
	case builders.SharedInputsCache(tj, r.options(ctx)):
		var err error
		obs.InputsClaim, obs.InputsClaimEvent, err = r.observeClaim(ctx, tj, builders.InputsCacheClaim(tj), true)
		return err
	case len(builders.FetchedInputs(tj)) > 0 && r.options(ctx).InputsNodeCacheDir == "": // PerNode
		return &missingAPIError{errors.New("inputs.cache is PerNode, but this operator keeps no input cache on the nodes: " +
			"the platform turns it on with --inputs-node-cache-dir (the chart's inputs.nodeCacheDir); " +
			"or set inputs.cache: Shared with a StorageClass that offers ReadWriteMany")}
	}
	return nil
}
