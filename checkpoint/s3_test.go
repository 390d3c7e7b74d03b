package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sync/errgroup"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/storetest"
)

var buckets atomic.Int64

func TestS3StoreConformance(t *testing.T) {
	endpoint := storetest.StartVersityGW(t, "test-access", "test-secret-key")
	storetest.Run(t, func(t *testing.T) checkpoint.Store {
		ctx := context.Background()
		bucket := fmt.Sprintf("checkpoints-%d", buckets.Add(1))
		s, err := checkpoint.NewS3Store(ctx,
			checkpoint.S3Options{Bucket: bucket, Endpoint: endpoint, AccessKey: "test-access", SecretKey: "test-secret-key"})
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
	s, err := checkpoint.NewS3Store(context.Background(),
		checkpoint.S3Options{Bucket: "any", Endpoint: endpoint, AccessKey: "test-access", SecretKey: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	var first string
	for i := range 3 {
		_, err := s.List(context.Background(), "x/")
		if err == nil {
			t.Fatal("listing with a wrong secret succeeded: the server does not check signatures")
		}
		// The message names the fault and reads the same at every request: no RequestID, no HostID.
		var api smithy.APIError
		if !errors.As(err, &api) || api.ErrorCode() != "SignatureDoesNotMatch" || strings.Contains(err.Error(), "RequestID") {
			t.Fatalf("error %q: want the API error SignatureDoesNotMatch, without the request's ID", err)
		}
		if i == 0 {
			first = err.Error()
		} else if err.Error() != first {
			t.Errorf("the same fault reads differently at request %d (-first +now):\n%s", i+1, cmp.Diff(first, err.Error()))
		}
	}
	want := "listing s3://any/x/: operation error S3: ListObjectsV2, StatusCode: 403, api error SignatureDoesNotMatch: "
	if !strings.HasPrefix(first, want) {
		t.Errorf("error %q, want it to start with %q", first, want)
	}
}

// BenchmarkSync10000 measures the agent's cost with 10,000 complete checkpoints (20,000 objects) kept: one
// Sync (list every page, scan, plan, nothing to delete) against a real S3 server on loopback and against
// a directory (pvc, nfs).
func BenchmarkSync10000(b *testing.B) {
	ctx := context.Background()
	endpoint := storetest.StartVersityGW(b, "bench-access", "bench-secret-key")
	s3s, err := checkpoint.NewS3Store(ctx,
		checkpoint.S3Options{Bucket: "bench", Endpoint: endpoint, AccessKey: "bench-access", SecretKey: "bench-secret-key"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s3s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("bench")}); err != nil {
		b.Fatal(err)
	}
	for _, s := range []struct {
		name  string
		store checkpoint.Store
	}{{name: "dir", store: checkpoint.DirStore{Root: b.TempDir()}}, {name: "s3", store: s3s}} {
		fill(b, s.store, 10000)
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r, err := checkpoint.Sync(ctx, s.store, "ml/job", checkpoint.Policy{Retention: 10000}, time.Now())
				if err != nil || r.Count() != 10000 {
					b.Fatalf("sync: %d checkpoints, %v", r.Count(), err)
				}
			}
		})
	}
}

// fill writes n complete checkpoints under ml/job, 16 writers at a time.
func fill(b *testing.B, s checkpoint.Store, n int) {
	b.Helper()
	var g errgroup.Group
	g.SetLimit(16)
	for e := 1; e <= n; e++ {
		for _, f := range []string{"model.bin", checkpoint.Marker} {
			g.Go(func() error { return s.Put(context.Background(), "ml/job/"+checkpoint.Dir(e)+"/"+f, []byte("x")) })
		}
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
}
