package storetest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// StartVersityGW runs the real S3-compatible server versitygw (built by hack/objstore.sh; its path in
// $VERSITYGW) on a free loopback port over a temporary directory until the test ends, and returns its
// endpoint URL. Requests must be signed with access and secret.
func StartVersityGW(t testing.TB, access, secret string) string {
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
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", addr, "--access", access, "--secret", secret, "posix", filepath.Join(dir, "data"))
	// Its request log goes to a file, shown when the test fails.
	logFile, err := os.Create(filepath.Join(dir, "versitygw.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			data, _ := os.ReadFile(logFile.Name())
			t.Logf("versitygw log (last 4 KiB):\n%s", tail(data, 4096))
		}
	})
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

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
