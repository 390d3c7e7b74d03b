package node

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLogs: LogPath is the newest matching pod's log, LogPaths and AllLogs cover every matching pod (the
// attempts of one rank) and no other rank's or namespace's.
func TestLogs(t *testing.T) {
	root := t.TempDir()
	write := func(dir, text string, age time.Duration) {
		path := filepath.Join(root, "pods", dir, "logs", "trainer.log")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-age)
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	write("ns_job-worker-0-aaaaa_uid1", "attempt 0\n", time.Minute)
	write("ns_job-worker-0-bbbbb_uid2", "attempt 1\n", 0)
	write("ns_job-worker-1-ccccc_uid3", "rank 1\n", 0)
	write("other_job-worker-0-ddddd_uid4", "other namespace\n", 0)

	newest, err := LogPath(root, "ns", "job-worker-0-*", "trainer")
	if err != nil || filepath.Base(filepath.Dir(filepath.Dir(newest))) != "ns_job-worker-0-bbbbb_uid2" {
		t.Errorf("LogPath = %q, %v; want attempt 1's", newest, err)
	}
	if got := len(LogPaths(root, "ns", "job-worker-0-*", "trainer")); got != 2 {
		t.Errorf("LogPaths: %d files, want rank 0's 2", got)
	}
	if got, want := AllLogs(root, "ns", "job-worker-0-*", "trainer"), "attempt 0\nattempt 1\n"; got != want {
		t.Errorf("AllLogs = %q, want %q", got, want)
	}
	if _, err := LogPath(root, "ns", "job-worker-2-*", "trainer"); err == nil {
		t.Error("LogPath of a rank without pods: no error")
	}
}
