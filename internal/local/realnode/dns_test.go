package realnode

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLogEnd: CoreDNS that does not come up is explained by its log's last line (a port another program
// holds was the cause, found by hand).
func TestLogEnd(t *testing.T) {
	p := filepath.Join(t.TempDir(), "coredns.log")
	log := "maxprocs: Leaving GOMAXPROCS=2\nlisten tcp 127.0.0.1:18080: bind: address already in use\n"
	if err := os.WriteFile(p, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := logEnd(p), "listen tcp 127.0.0.1:18080: bind: address already in use"; got != want {
		t.Errorf("logEnd = %q, want %q", got, want)
	}
}
