package storetest

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
)

// VersityGW is the real S3-compatible server versitygw (built by hack/objstore.sh; its path in
// $VERSITYGW) on a loopback port over a temporary directory, until the test ends. It can be stopped and
// started again on the same port and data, as an outage of the storage.
type VersityGW struct {
	// Endpoint is its URL.
	Endpoint string

	t              testing.TB
	bin, addr, dir string
	access, secret string
	cmd            *exec.Cmd
	log            *os.File
}

// StartVersityGW starts a VersityGW and returns its endpoint URL. Requests must be signed with access
// and secret.
func StartVersityGW(t testing.TB, access, secret string) string {
	return NewVersityGW(t, access, secret).Endpoint
}

// NewVersityGW starts a VersityGW on a free port of 127.0.0.1.
func NewVersityGW(t testing.TB, access, secret string) *VersityGW {
	return NewVersityGWOn(t, "127.0.0.1", access, secret)
}

// NewVersityGWOn starts a VersityGW on a free port of host, an address of this machine (the real nodes'
// pods reach the machine's own address, not its loopback).
func NewVersityGWOn(t testing.TB, host, access, secret string) *VersityGW {
	if testing.Short() {
		t.Skip("starts an S3 server: make test runs it, make unit (go test -short) does not")
	}
	t.Helper()
	bin := os.Getenv("VERSITYGW")
	if bin == "" {
		t.Fatal("VERSITYGW is not set: run the tests with `make test`, which builds versitygw with hack/objstore.sh")
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	v := &VersityGW{t: t, bin: bin, addr: l.Addr().String(), dir: t.TempDir(), access: access, secret: secret}
	l.Close()
	v.Endpoint = "http://" + v.addr
	if err := os.MkdirAll(filepath.Join(v.dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Its request log goes to a file, shown when the test fails.
	if v.log, err = os.Create(filepath.Join(v.dir, "versitygw.log")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		v.Stop()
		v.log.Close()
		if t.Failed() {
			data, _ := os.ReadFile(v.log.Name())
			t.Logf("versitygw log (last 4 KiB):\n%s", tail(data, 4096))
		}
	})
	v.Start()
	return v
}

// Start starts the server (again) and waits until it listens.
func (v *VersityGW) Start() {
	v.t.Helper()
	v.cmd = exec.Command(v.bin, "--port", v.addr, "--access", v.access, "--secret", v.secret, "posix", filepath.Join(v.dir, "data"))
	v.cmd.Stdout, v.cmd.Stderr = v.log, v.log
	if err := v.cmd.Start(); err != nil {
		v.t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", v.addr); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("versitygw did not listen on %s", v.addr)
		}
	}
}

// Stop kills the server: requests fail with "connection refused" until Start.
func (v *VersityGW) Stop() {
	if v.cmd == nil {
		return
	}
	_ = v.cmd.Process.Kill()
	_ = v.cmd.Wait()
	v.cmd = nil
}

// Data returns the directory the server keeps its buckets in (bucket/key as files).
func (v *VersityGW) Data() string { return filepath.Join(v.dir, "data") }

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// Bucket creates bucket on the server (retrying while the server starts, up to 30 s) and returns a store of
// it signed with the server's keys.
func (v *VersityGW) Bucket(bucket string) *checkpoint.S3Store {
	v.t.Helper()
	ctx := context.Background()
	store, err := checkpoint.NewS3Store(ctx, checkpoint.S3Options{Bucket: bucket, Endpoint: v.Endpoint, AccessKey: v.access,
		SecretKey: v.secret})
	if err != nil {
		v.t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err := store.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
		if err == nil {
			return store
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("creating bucket %s: %v", bucket, err)
		}
	}
}
