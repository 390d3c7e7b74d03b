package controllers

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestReconcileCreatesTheCheckpointClaim: the storage choice is recorded with the first status write,
// the claim is created on the next reconcile, owned only with claimRetentionPolicy Delete, and the
// operator's default storage (set after the choice) does not move the job.
func TestReconcileCreatesTheCheckpointClaim(t *testing.T) {
	cases := []struct {
		name    string
		storage *mlv1.CheckpointStorage
		owned   bool
	}{
		{"no storage section: retained", nil, false},
		{"pvc without claimName, Delete: owned", &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimRetentionPolicy: mlv1.ClaimDelete}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "mnist").Checkpoints(tc.storage).Obj()
			tj.UID = "uid-1"
			r := newReconciler(tj)
			key := types.NamespacedName{Namespace: "ml", Name: "mnist"}
			reconcileN(t, r, key, 1)
			r.Options.DefaultCheckpointStorage = &mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "later"}
			reconcileN(t, r, key, 2)
			got := &mlv1.TrainingJob{}
			if err := r.Get(context.Background(), key, got); err != nil {
				t.Fatal(err)
			}
			var want *mlv1.CheckpointStorage
			if tc.storage == nil {
				want = &mlv1.CheckpointStorage{Type: mlv1.StoragePVC}
			}
			if diff := cmp.Diff(want, got.Status.CheckpointStorage); diff != "" {
				t.Errorf("status.checkpointStorage (-want +got):\n%s", diff)
			}
			claim := &corev1.PersistentVolumeClaim{}
			if err := r.Get(context.Background(), types.NamespacedName{Namespace: "ml", Name: "mnist-checkpoints"}, claim); err != nil {
				t.Fatal(err)
			}
			if owned := metav1.GetControllerOf(claim) != nil; owned != tc.owned {
				t.Errorf("claim owned = %t, want %t", owned, tc.owned)
			}
		})
	}
}

func TestClaimCondition(t *testing.T) {
	pending := builders.CheckpointClaim(tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{
		Type: mlv1.StoragePVC, Size: ptr.To(resource.MustParse("5Gi")), StorageClassName: ptr.To("efs")}).Obj())
	bound := pending.DeepCopy()
	bound.Status.Phase, bound.Spec.VolumeName = corev1.ClaimBound, "pv-1"
	event := func(typ, reason, msg string) *corev1.Event {
		return &corev1.Event{Type: typ, Reason: reason, Message: msg}
	}
	const what = `claim a-checkpoints (ReadWriteMany, 5Gi, StorageClass "efs") is not bound: `
	cases := []struct {
		name string
		obs  Observed
		want *metav1.Condition
	}{
		{"no claim managed", Observed{}, nil},
		{"bound", Observed{Claim: bound}, &metav1.Condition{Type: mlv1.ConditionCheckpointClaimBound, Status: metav1.ConditionTrue, Reason: "Bound",
			Message: "claim a-checkpoints is bound to volume pv-1"}},
		{"pending, nothing said yet", Observed{Claim: pending}, &metav1.Condition{Type: mlv1.ConditionCheckpointClaimBound, Status: metav1.ConditionFalse,
			Reason: ReasonClaimPending, Message: what + "no event explains it yet"}},
		{"waiting for the first consumer", Observed{Claim: pending, ClaimEvent: event("Normal", "WaitForFirstConsumer", "waiting for first consumer to be created before binding")},
			&metav1.Condition{Type: mlv1.ConditionCheckpointClaimBound, Status: metav1.ConditionFalse, Reason: ReasonClaimPending,
				Message: what + "WaitForFirstConsumer: waiting for first consumer to be created before binding"}},
		{"no storage class and no volume (a Normal event of the binder)", Observed{Claim: pending, ClaimEvent: event("Normal", "FailedBinding", "no persistent volumes available for this claim and no storage class is set")},
			&metav1.Condition{Type: mlv1.ConditionCheckpointClaimBound, Status: metav1.ConditionFalse, Reason: "FailedBinding",
				Message: what + "FailedBinding: no persistent volumes available for this claim and no storage class is set"}},
		{"driver refuses", Observed{Claim: pending, ClaimEvent: event("Warning", "ProvisioningFailed", "access mode ReadWriteMany is not supported\n")},
			&metav1.Condition{Type: mlv1.ConditionCheckpointClaimBound, Status: metav1.ConditionFalse, Reason: "ProvisioningFailed",
				Message: what + "ProvisioningFailed: access mode ReadWriteMany is not supported"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var st mlv1.TrainingJobStatus
			setClaimCondition(&st, tc.obs, t0)
			got := meta.FindStatusCondition(st.Conditions, mlv1.ConditionCheckpointClaimBound)
			if tc.want != nil {
				tc.want.LastTransitionTime = t0
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("condition (-want +got):\n%s", diff)
			}
			if fault := claimFault(st); (fault != "") != (got != nil && got.Status == metav1.ConditionFalse && got.Reason != ReasonClaimPending) {
				t.Errorf("claimFault = %q for %+v", fault, got)
			}
		})
	}
}
