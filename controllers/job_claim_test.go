package controllers

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
