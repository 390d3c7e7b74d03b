package main

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/storetest"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// TestCheckResumeFromAnotherBucket: resumeFrom may name a checkpoint in another bucket than the job's
// storage (a fine-tune of an earlier run); the resume check looks there, with the same identity, and
// names the URI when the checkpoint is missing or incomplete.
func TestCheckResumeFromAnotherBucket(t *testing.T) {
	ctx := context.Background()
	endpoint := storetest.StartVersityGW(t, "k", "secret-key")
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret-key")
	old, err := checkpoint.NewS3Store(ctx, checkpoint.S3Options{Bucket: "old-runs", Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"old-runs", "new-runs"} {
		if _, err := old.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"ml/a/checkpoint-epoch-4/model.bin", "ml/a/checkpoint-epoch-4/_COMPLETE", "ml/a/checkpoint-epoch-5/model.bin"} {
		if err := old.Put(ctx, key, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	st := func() *mlv1.CheckpointStorage {
		return &mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "new-runs", Endpoint: endpoint}
	}
	cases := []struct{ from, wantErr string }{
		{"s3://old-runs/ml/a/checkpoint-epoch-4", ""},
		{"s3://old-runs/ml/a/checkpoint-epoch-5", "s3://old-runs/ml/a/checkpoint-epoch-5 is not a complete checkpoint"},
		{"s3://new-runs/ml/a/checkpoint-epoch-4", "s3://new-runs/ml/a/checkpoint-epoch-4 does not exist"},
	}
	for _, tc := range cases {
		err := checkResume(ctx, st(), "", tc.from)
		if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("checkResume(%s) = %v; want %q", tc.from, err, tc.wantErr)
		}
	}
}
