package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/storetest"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// startS3 runs versitygw (hack/objstore.sh builds it; $VERSITYGW) with a bucket, until the test ends.
func startS3(t *testing.T, bucket string) (endpoint string, store *checkpoint.S3Store) {
	t.Helper()
	endpoint = storetest.StartVersityGW(t, "e2e-access", "e2e-secret-key")
	var err error
	store, err = checkpoint.NewS3Store(context.Background(), checkpoint.S3Options{Bucket: bucket, Endpoint: endpoint, AccessKey: "e2e-access", SecretKey: "e2e-secret-key"})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "bucket created", func() error {
		_, err := store.Client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(bucket)})
		return err
	})
	return endpoint, store
}

// TestCheckpointRotationOnS3: the same agent rotates checkpoints in an S3 bucket (a real S3-compatible
// server) with the credentials of the storage Secret, and status.checkpoint names the s3:// URI. The
// test writes the checkpoints as a trainer would (the example trainer writes to a directory only).
func TestCheckpointRotationOnS3(t *testing.T) {
	ns, name := newNamespace(t), "s3"
	endpoint, store := startS3(t, "ckpt")
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-keys", Namespace: ns},
		StringData: map[string]string{checkpoint.SecretS3AccessKey: "e2e-access", checkpoint.SecretS3SecretKey: "e2e-secret-key"}})
	tj := trainerJob(ns, name, 1, 100000, "--epoch-delay=50ms").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Retention: ptr.To[int32](2), Storage: &mlv1.CheckpointStorage{
			Type: mlv1.StorageS3, S3Bucket: "ckpt", Prefix: "runs", Endpoint: endpoint, SecretRef: &corev1.LocalObjectReference{Name: "s3-keys"}}}
	}).Obj()
	create(t, tj)
	runningPIDs(t, ns, name, 1)
	root := builders.CheckpointRoot(tj)
	ctx := context.Background()
	for e := 1; e <= 4; e++ {
		dir := root + "/" + checkpoint.Dir(e)
		for _, f := range []string{"model.bin", checkpoint.Marker} {
			if err := store.Put(ctx, dir+"/"+f, []byte(strings.Repeat("x", 100))); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, time.Minute, "rotation in the bucket and status.checkpoint", func() error {
		objs, err := store.List(ctx, root+"/")
		if err != nil {
			return err
		}
		var left []string
		for _, c := range checkpoint.Scan(root, objs) {
			left = append(left, c.Name)
		}
		sort.Strings(left)
		if diff := cmp.Diff([]string{"checkpoint-epoch-3", "checkpoint-epoch-4"}, left); diff != "" {
			return fmt.Errorf("bucket (-want +got):\n%s", diff)
		}
		c := getTJ(t, ns, name).Status.Checkpoint
		if c == nil || c.Latest != "s3://ckpt/runs/"+ns+"/s3/checkpoint-epoch-4" || c.Count != 2 || c.SizeBytes != 400 {
			return fmt.Errorf("status.checkpoint %+v", c)
		}
		return nil
	})
	if err := stack.Client.Delete(ctx, tj); err != nil {
		t.Fatal(err)
	}
}
