package main

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// TestNodeLockSerializes: a second rank on the node takes the job's directory only once the first let it go.
func TestNodeLockSerializes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ml_a_uid")
	unlock, err := nodeLock(context.Background(), dir, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	released := make(chan struct{})
	go func() {
		u, err := nodeLock(context.Background(), dir, 10*time.Millisecond)
		select {
		case <-released:
		default:
			t.Error("the second rank took the lock while the first held it")
		}
		if u != nil {
			u()
		}
		second <- err
	}()
	time.Sleep(50 * time.Millisecond) // let the second rank wait on the lock
	close(released)
	unlock()
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, usedFile)); err != nil {
		t.Errorf("the directory is not marked used: %v", err)
	}
}

// TestNodeLockEndsWithTheContext: a rank waiting on the lock stops when its pod stops.
func TestNodeLockEndsWithTheContext(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ml_a_uid")
	unlock, err := nodeLock(context.Background(), dir, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := nodeLock(ctx, dir, 10*time.Millisecond); err == nil {
		t.Fatal("nodeLock returned without the lock and without an error")
	}
}

// TestPruneNodeCache: the pruner removes the jobs' directories unused for the TTL, unless a fetcher holds
// them; recent ones stay, and so do a link and a file in the cache root (the pruner follows no link).
func TestPruneNodeCache(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		want []string
	}{
		{name: "a day", ttl: 24 * time.Hour, want: []string{"a-file", "a-link", "locked-old", "recent"}},
		{name: "a week", ttl: 7 * 24 * time.Hour, want: []string{"a-file", "a-link", "locked-old", "old", "recent"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			ages := map[string]time.Duration{"older": 30 * 24 * time.Hour, "old": 48 * time.Hour, "recent": time.Hour, "locked-old": 48 * time.Hour}
			for name, age := range ages {
				dir := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Join(dir, "dataset"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, usedFile), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Chtimes(filepath.Join(dir, usedFile), now.Add(-age), now.Add(-age)); err != nil {
					t.Fatal(err)
				}
			}
			elsewhere := t.TempDir() // what a link in the root points at: never removed
			if err := os.Symlink(elsewhere, filepath.Join(root, "a-link")); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "a-file"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := openLock(filepath.Join(root, "locked-old"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			pruneNodeCache(root, tc.ttl, now)
			var got []string
			entries, _ := os.ReadDir(root)
			for _, e := range entries {
				got = append(got, e.Name())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("left on the node (-want +got):\n%s", diff)
			}
			if _, err := os.Stat(elsewhere); err != nil {
				t.Errorf("the link's target: %v", err)
			}
		})
	}
}

// TestInputsFlags: the input cache flags as the manager reads them.
func TestInputsFlags(t *testing.T) {
	for _, tc := range []struct {
		name, cache, dir string
		max              string // --inputs-node-cache-max-size; "": not given
		want             builders.Options
		wantErr          bool
	}{
		{name: "defaults", cache: "Shared", dir: "", want: builders.Options{InputsCache: mlv1.InputsCacheShared}, wantErr: false},
		{name: "a node cache", cache: "Shared", dir: "/var/lib/tj/",
			want: builders.Options{InputsCache: mlv1.InputsCacheShared, InputsNodeCacheDir: "/var/lib/tj"}, wantErr: false},
		{name: "PerNode by default", cache: "PerNode", dir: "/var/lib/tj",
			want: builders.Options{InputsCache: mlv1.InputsCachePerNode, InputsNodeCacheDir: "/var/lib/tj"}, wantErr: false},
		{name: "PerNode without a directory", cache: "PerNode", dir: "", want: builders.Options{}, wantErr: true},
		{name: "a relative directory", cache: "Shared", dir: "var/lib/tj", want: builders.Options{}, wantErr: true},
		{name: "an unknown cache", cache: "Local", dir: "", want: builders.Options{}, wantErr: true},
		{name: "a node cache limit", cache: "PerNode", dir: "/var/lib/tj", max: ptrQ("20Gi").String(),
			want: builders.Options{
				InputsCache: mlv1.InputsCachePerNode, InputsNodeCacheDir: "/var/lib/tj", InputsNodeCacheMaxSize: ptrQ("20Gi"),
			},
			wantErr: false},
		{name: "a node cache limit of 0", cache: "PerNode", dir: "/var/lib/tj", max: "0", want: builders.Options{}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got builders.Options
			c := config{inputsCache: tc.cache, inputsNodeCacheDir: tc.dir, inputsNodeCacheMax: tc.max}
			err := inputsFlags(c, &got)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %v", err, tc.wantErr)
			}
			if err == nil {
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("options (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func ptrQ(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

// TestPruneNodeCacheFollowsNoLink: a job's pods write in its directory and the pruner runs as root, so it
// follows no link planted there. A .lock link is refused (the directory stays, nothing is created where it
// points); a .used link is no mark of use (the directory's own time decides) and its target stays.
func TestPruneNodeCacheFollowsNoLink(t *testing.T) {
	now := time.Now()
	old := now.Add(-48 * time.Hour)
	tests := []struct {
		name string
		file string // the link planted in job-a, old unless for the link
		// target is where the link points: in job-b (another job's directory, recent) or out of the cache.
		target     func(elsewhere, outside string) string
		createdNow bool      // the target exists, written now
		dirTime    time.Time // job-a's own time
		want       []string  // the directories left
	}{
		{
			name: "lock into another job's directory", file: lockFile,
			target:  func(elsewhere, _ string) string { return filepath.Join(elsewhere, lockFile) },
			dirTime: old, want: []string{"job-a", "job-b"},
		},
		{
			name: "lock out of the cache", file: lockFile,
			target:  func(_, outside string) string { return filepath.Join(outside, "created") },
			dirTime: old, want: []string{"job-a", "job-b"},
		},
		{
			name: "used to a fresh file, old directory", file: usedFile,
			target:     func(_, outside string) string { return filepath.Join(outside, "fresh") },
			createdNow: true, dirTime: old, want: []string{"job-b"},
		},
		{
			name: "used to a fresh file, recent directory", file: usedFile,
			target:     func(_, outside string) string { return filepath.Join(outside, "fresh") },
			createdNow: true, dirTime: now, want: []string{"job-a", "job-b"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, outside := t.TempDir(), t.TempDir()
			linked, elsewhere := filepath.Join(root, "job-a"), filepath.Join(root, "job-b")
			for _, dir := range []string{linked, elsewhere} {
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(elsewhere, usedFile), nil, 0o644); err != nil { // recent: stays
				t.Fatal(err)
			}
			target := tt.target(elsewhere, outside)
			if tt.createdNow {
				if err := os.WriteFile(target, []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(target, filepath.Join(linked, tt.file)); err != nil {
				t.Fatal(err)
			}
			if tt.file == lockFile { // old, but for the link
				if err := os.WriteFile(filepath.Join(linked, usedFile), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Chtimes(filepath.Join(linked, usedFile), old, old); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chtimes(linked, tt.dirTime, tt.dirTime); err != nil {
				t.Fatal(err)
			}
			pruneNodeCache(root, 24*time.Hour, now)
			var got []string
			entries, _ := os.ReadDir(root)
			for _, e := range entries {
				got = append(got, e.Name())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("left on the node (-want +got):\n%s", diff)
			}
			_, err := os.Stat(target)
			if exists := err == nil; exists != tt.createdNow {
				t.Errorf("the link's target exists: %t, want %t (stat: %v)", exists, tt.createdNow, err)
			}
		})
	}
}
