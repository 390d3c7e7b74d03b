package controllers

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

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
		{name: "no storage section: retained", storage: nil, owned: false},
		{name: "pvc without claimName, Delete: owned",
			storage: &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimRetentionPolicy: mlv1.ClaimDelete}, owned: true},
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

// TestReconcileInputsCache: a fetched source gets the shared claim; a PerNode cache gets none, and is
// refused (CreateRejected, naming the flag) where the operator keeps no cache on the nodes.
func TestReconcileInputsCache(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cache      mlv1.InputsCache
		nodeDir    string
		wantClaim  bool
		wantReason string
	}{
		{name: "shared", cache: "", nodeDir: "", wantClaim: true, wantReason: ""},
		{name: "per node", cache: mlv1.InputsCachePerNode, nodeDir: "/var/lib/tj", wantClaim: false, wantReason: ""},
		{name: "per node without a node cache", cache: mlv1.InputsCachePerNode, nodeDir: "", wantClaim: false, wantReason: "CreateRejected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "bert").Workers(2).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Dataset = "s3://datasets/squad"
				tj.Spec.Inputs = &mlv1.InputsSpec{Cache: tc.cache}
			}).Obj()
			tj.UID = "uid-1"
			r := newReconciler(tj)
			r.Options.InputsNodeCacheDir = tc.nodeDir
			key := types.NamespacedName{Namespace: "ml", Name: "bert"}
			for range 3 {
				_, _ = r.Reconcile(context.Background(), reconcile.Request{NamespacedName: key})
			}
			err := r.Get(context.Background(), types.NamespacedName{Namespace: "ml", Name: "bert-inputs"}, &corev1.PersistentVolumeClaim{})
			if (err == nil) != tc.wantClaim {
				t.Errorf("claim bert-inputs: %v, want it to exist: %t", err, tc.wantClaim)
			}
			got := &mlv1.TrainingJob{}
			if err := r.Get(context.Background(), key, got); err != nil {
				t.Fatal(err)
			}
			c := meta.FindStatusCondition(got.Status.Conditions, mlv1.ConditionCreated)
			if tc.wantReason != "" && (c == nil || c.Reason != tc.wantReason || !strings.Contains(c.Message, "--inputs-node-cache-dir")) {
				t.Errorf("Created %+v, want %s naming --inputs-node-cache-dir", c, tc.wantReason)
			}
			if tc.wantReason == "" && c != nil && c.Reason == "CreateRejected" {
				t.Errorf("Created %+v", c)
			}
		})
	}
}
