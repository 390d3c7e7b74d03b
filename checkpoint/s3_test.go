package checkpoint_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/storetest"
)

// startVersityGW runs the real S3-compatible server versitygw (built by hack/objstore.sh, path in
// $VERSITYGW) on a free loopback port over a temporary directory, until the test ends.
func startVersityGW(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("VERSITYGW")
	if bin == "" {
		t.Fatal("VERSITYGW is not set: run the tests with `make test`, which builds versitygw with hack/objstore.sh")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "--port", addr, "--access", "test-access", "--secret", "test-secret-key", "posix", t.TempDir())
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw did not listen on %s", addr)
		}
	}
}

var buckets atomic.Int64

func TestS3StoreConformance(t *testing.T) {
	endpoint := startVersityGW(t)
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
	endpoint := startVersityGW(t)
	s, err := checkpoint.NewS3Store(context.Background(), checkpoint.S3Options{Bucket: "any", Endpoint: endpoint, AccessKey: "test-access", SecretKey: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(context.Background(), "x/"); err == nil {
		t.Fatal("listing with a wrong secret succeeded: the server does not check signatures")
	}
}
