package storetest

import (
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
)

// StartVersityGW runs the real S3-compatible server versitygw (built by hack/objstore.sh; its path in
// $VERSITYGW) on a free loopback port over a temporary directory until the test ends, and returns its
// endpoint URL. Requests must be signed with access and secret.
func StartVersityGW(t *testing.T, access, secret string) string {
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
	cmd := exec.Command(bin, "--port", addr, "--access", access, "--secret", secret, "posix", t.TempDir())
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
