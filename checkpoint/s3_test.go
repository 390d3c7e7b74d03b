package checkpoint_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/storetest"
)

var buckets atomic.Int64

func TestS3StoreConformance(t *testing.T) {
	endpoint := storetest.StartVersityGW(t, "test-access", "test-secret-key")
	storetest.Run(t, func(t *testing.T) checkpoint.Store {
		ctx := context.Background()
		bucket := fmt.Sprintf("checkpoints-%d", buckets.Add(1))
		s, err := checkpoint.NewS3Store(ctx, checkpoint.S3Options{Bucket: bucket, Endpoint: endpoint, AccessKey: "test-access", SecretKey: "test-secret-key"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
			t.Fatalf("creating bucket %s: %v", bucket, err)
		}
		return s
	})
}

func TestS3WrongCredentialsAreReported(t *testing.T) {
	endpoint := storetest.StartVersityGW(t, "test-access", "test-secret-key")
	s, err := checkpoint.NewS3Store(context.Background(), checkpoint.S3Options{Bucket: "any", Endpoint: endpoint, AccessKey: "test-access", SecretKey: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(context.Background(), "x/"); err == nil {
		t.Fatal("listing with a wrong secret succeeded: the server does not check signatures")
	}
}
