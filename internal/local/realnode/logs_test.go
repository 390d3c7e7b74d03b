package realnode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCopyLog: a CRI log file reads back as what the container printed: timestamps and stream tags gone,
// partial lines (tag P) joined with the next.
func TestCopyLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "real-node-1", "pod-logs", "ns_job-worker-0-abcde_uid", "trainer", "0.log")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	cri := "2026-11-24T15:40:16.1Z stdout F epoch 1/10 loss=0.5\n" +
		"2026-11-24T15:40:16.2Z stderr P a long \n" +
		"2026-11-24T15:40:16.3Z stderr F line\n" +
		"2026-11-24T15:40:16.4Z stdout F training complete\n"
	if err := os.WriteFile(path, []byte(cri), 0o644); err != nil {
		t.Fatal(err)
	}
	found, err := LogPath(dir, "ns", "job-worker-0-*", "trainer")
	if err != nil || found != path {
		t.Fatalf("LogPath = %q, %v; want %q", found, err, path)
	}
	var out strings.Builder
	if err := CopyLog(&out, found); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("epoch 1/10 loss=0.5\na long line\ntraining complete\n", out.String()); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
}
