package builders_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

func chosen(storage *mlv1.CheckpointStorage) func(*mlv1.TrainingJob) {
	return func(tj *mlv1.TrainingJob) { tj.Status.CheckpointStorage = storage }
}

func TestStorageChoice(t *testing.T) {
	s3 := &mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "team", Prefix: "runs"}
	claim := &mlv1.CheckpointStorage{Type: mlv1.StoragePVC}
	withDefault := builders.Options{DefaultCheckpointStorage: s3}
	cases := []struct {
		name string
		tj   *mlv1.TrainingJob
		opts builders.Options
		want *mlv1.CheckpointStorage
	}{
		{name: "checkpoints off", tj: tjtest.NewTJ("ml", "a").Obj(), opts: withDefault, want: nil},
		{
			name: "spec names the storage",
			tj:   tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StorageGCS, GCSBucket: "g"}).Obj(),
			opts: withDefault,
			want: nil,
		},
		{
			name: "spec names the storage after a choice was made",
			tj:   tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StorageGCS, GCSBucket: "g"}).With(chosen(claim)).Obj(),
			opts: withDefault,
			want: nil,
		},
		{name: "no storage, operator default", tj: tjtest.NewTJ("ml", "a").Checkpoints(nil).Obj(), opts: withDefault, want: s3},
		{
			name: "no storage, no operator default: a claim of the operator's",
			tj:   tjtest.NewTJ("ml", "a").Checkpoints(nil).Obj(),
			opts: builders.Options{},
			want: claim,
		},
		{
			name: "a choice is kept when the operator's default changes",
			tj:   tjtest.NewTJ("ml", "a").Checkpoints(nil).With(chosen(claim)).Obj(),
			opts: withDefault,
			want: claim,
		},
		{
			name: "a choice is kept while checkpoints are switched off",
			tj:   tjtest.NewTJ("ml", "a").With(chosen(s3)).Obj(),
			opts: builders.Options{},
			want: s3,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, builders.StorageChoice(tc.tj, tc.opts)); diff != "" {
				t.Errorf("StorageChoice (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckpointClaim(t *testing.T) {
	size := resource.MustParse("200Gi")
	cases := []struct {
		name    string
		tj      *mlv1.TrainingJob
		managed bool
		owned   bool
		want    corev1.PersistentVolumeClaimSpec
	}{
		{
			name:    "defaults, two ranks share it",
			tj:      tjtest.NewTJ("ml", "a").Checkpoints(nil).With(chosen(&mlv1.CheckpointStorage{Type: mlv1.StoragePVC})).Obj(),
			managed: true,
			owned:   false,
			want: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Gi")}}},
		},
		{
			name: "one rank, size, class, deleted with the job",
			tj: tjtest.NewTJ("ml", "a").Workers(1).Checkpoints(&mlv1.CheckpointStorage{
				Type: mlv1.StoragePVC, Size: &size, StorageClassName: ptr.To("fast"), ClaimRetentionPolicy: mlv1.ClaimDelete}).Obj(),
			managed: true,
			owned:   true,
			want: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To("fast"),
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}}},
		},
		{
			name:    "a storage of only a size, type not defaulted yet",
			tj:      tjtest.NewTJ("ml", "a").Workers(1).Checkpoints(&mlv1.CheckpointStorage{Size: &size}).Obj(),
			managed: true,
			owned:   false,
			want: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}}},
		},
		{
			name:    "a user's claim is not the operator's",
			tj:      tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "mine"}).Obj(),
			managed: false,
			owned:   false,
			want:    corev1.PersistentVolumeClaimSpec{},
		},
		{
			name:    "s3 needs no claim",
			tj:      tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "b"}).Obj(),
			managed: false,
			owned:   false,
			want:    corev1.PersistentVolumeClaimSpec{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := builders.ManagedClaim(tc.tj); got != tc.managed {
				t.Fatalf("ManagedClaim = %t, want %t", got, tc.managed)
			}
			if got := builders.ClaimOwned(tc.tj); got != tc.owned {
				t.Errorf("ClaimOwned = %t, want %t", got, tc.owned)
			}
			if !tc.managed {
				return
			}
			pvc := builders.CheckpointClaim(tc.tj)
			wantMeta := metav1.ObjectMeta{Name: "a-checkpoints", Namespace: "ml", Labels: names.Labels(tc.tj)}
			if diff := cmp.Diff(wantMeta, pvc.ObjectMeta); diff != "" {
				t.Errorf("claim metadata (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, pvc.Spec); diff != "" {
				t.Errorf("claim spec (-want +got):\n%s", diff)
			}
			vols := builders.Job(tc.tj, opts).Spec.Template.Spec.Volumes
			i := slices.IndexFunc(vols, func(v corev1.Volume) bool { return v.Name == builders.CheckpointVolumeName })
			if i < 0 || vols[i].PersistentVolumeClaim == nil || vols[i].PersistentVolumeClaim.ClaimName != "a-checkpoints" {
				t.Errorf("workers mount %+v, want the claim a-checkpoints", vols)
			}
		})
	}
}

func TestParseStorageURI(t *testing.T) {
	cases := []struct {
		uri     string
		want    *mlv1.CheckpointStorage
		wantErr bool
	}{
		{uri: "", want: nil, wantErr: false},
		{
			uri: "s3://team-ckpt/runs/vision?endpoint=http://minio.minio:9000&region=us-east-1&secret=s3-creds",
			want: &mlv1.CheckpointStorage{
				Type: mlv1.StorageS3, S3Bucket: "team-ckpt", Prefix: "runs/vision", Endpoint: "http://minio.minio:9000", Region: "us-east-1",
				SecretRef: &corev1.LocalObjectReference{Name: "s3-creds"}},
			wantErr: false,
		},
		{uri: "gs://team-ckpt", want: &mlv1.CheckpointStorage{Type: mlv1.StorageGCS, GCSBucket: "team-ckpt"}, wantErr: false},
		{
			uri:     "pvc://shared-checkpoints/runs",
			want:    &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "shared-checkpoints", Prefix: "runs"},
			wantErr: false,
		},
		{uri: "nfs://server/export", want: nil, wantErr: true},
		{uri: "s3://", want: nil, wantErr: true},
		{uri: "gs://b?region=x", want: nil, wantErr: true},
		{uri: "pvc://c?secret=x", want: nil, wantErr: true},
		{uri: "s3://b?bucket=x", want: nil, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.uri, func(t *testing.T) {
			got, err := builders.ParseStorageURI(tc.uri)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %t", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("storage (-want +got):\n%s", diff)
			}
		})
	}
}
