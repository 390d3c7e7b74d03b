//go:build cluster

package cluster

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The node cache's directories seeded before the chart is installed: one no rank has started with for 30
// days, one just used.
const (
	staleCacheDir = "ml_stale-job_uid-stale"
	freshCacheDir = "ml_fresh-job_uid-fresh"
)

// seedNodeCache makes the two directories in the node cache (the directory every real node's hostPath
// shares on this machine), each with its lock and its last use as the fetchers leave them.
func seedNodeCache(root string) error {
	for name, age := range map[string]time.Duration{staleCacheDir: 30 * 24 * time.Hour, freshCacheDir: 0} {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Join(dir, "dataset"), 0o755); err != nil {
			return err
		}
		for _, f := range []string{".lock", ".used", "dataset/train.json"} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
				return err
			}
		}
		used := time.Now().Add(-age)
		if err := os.Chtimes(filepath.Join(dir, ".used"), used, used); err != nil {
			return err
		}
	}
	return nil
}

// TestNodeCachePrunerOnRealNodes: the chart's node cache pruner (a DaemonSet of the operator's image on
// the real nodes, the only pod that mounts the whole node cache) removes the directory unused for longer
// than inputs.nodeCacheTTL (168h by default) and leaves the recently used one.
func TestNodeCachePrunerOnRealNodes(t *testing.T) {
	root := stack.NodeCacheDir()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := os.Stat(filepath.Join(root, staleCacheDir))
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the directory unused for 30 days is still in the node cache after 2 minutes (%v): "+
				"is the pruner running? kubectl -n %s get pods", err, prunerNamespace)
		}
		time.Sleep(time.Second)
	}
	if _, err := os.Stat(filepath.Join(root, freshCacheDir, "dataset", "train.json")); err != nil {
		t.Errorf("the recently used directory: %v, want it kept", err)
	}
}
