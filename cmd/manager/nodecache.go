package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/builders"
)

// A node's input cache holds one directory per job (builders.NodeCacheKey). In each, lockFile serializes
// the job's fetchers on the node and usedFile's time says when a rank last started with it.
const (
	lockFile = ".lock"
	usedFile = ".used"
)

// nodeLock takes the job's directory on the node for this fetcher: it waits (polling every poll) while
// another rank of the node fetches, then marks the directory used. A directory pruned by another job's
// fetcher between the open and the lock is taken again.
func nodeLock(ctx context.Context, dir string, poll time.Duration) (unlock func(), err error) {
	for {
		f, err := openLock(dir)
		if err != nil {
			return nil, err
		}
		if err := waitFlock(ctx, f, poll); err != nil {
			_ = f.Close()
			return nil, err
		}
		if sameFile(f, filepath.Join(dir, lockFile)) {
			now := time.Now()
			if err := os.WriteFile(filepath.Join(dir, usedFile), nil, 0o644); err == nil {
				_ = os.Chtimes(filepath.Join(dir, usedFile), now, now)
			}
			return func() { _ = f.Close() }, nil // closing releases the lock
		}
		_ = f.Close() // pruned meanwhile: the directory is new
	}
}

func openLock(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("the node's input cache: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("the node's input cache: %w", err)
	}
	return f, nil
}

// waitFlock takes f's exclusive lock, polling so that the context can end the wait.
func waitFlock(ctx context.Context, f *os.File, poll time.Duration) error {
	for said := false; ; {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		if !said {
			fmt.Println("another rank on this node fetches the inputs: waiting for it")
			said = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// sameFile: f is still the file at path (not unlinked by a prune).
func sameFile(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// pruneNodeCache removes the directories beside dir (other jobs' caches on this node) that no rank has
// started with for ttl, each only while holding its lock, so one being fetched is left alone. ttl 0 keeps
// them. Best effort: what cannot be removed is left for a later fetcher.
func pruneNodeCache(dir string, ttl time.Duration, now time.Time) {
	if ttl <= 0 {
		return
	}
	parent := filepath.Dir(dir)
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		other := filepath.Join(parent, e.Name())
		if !e.IsDir() || other == filepath.Clean(dir) || !unusedSince(other, now.Add(-ttl)) {
			continue
		}
		if removeUnlocked(other) {
			fmt.Printf("removed %s from the node's input cache: unused for %s\n", e.Name(), ttl)
		}
	}
}

// unusedSince: no rank has started with the directory since t (its usedFile, else the directory itself).
func unusedSince(dir string, t time.Time) bool {
	info, err := os.Stat(filepath.Join(dir, usedFile))
	if err != nil {
		if info, err = os.Stat(dir); err != nil {
			return false
		}
	}
	return info.ModTime().Before(t)
}

// removeUnlocked removes dir when its lock is free, holding the lock meanwhile.
func removeUnlocked(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return false
	}
	return os.RemoveAll(dir) == nil
}

// inputsFlags checks --inputs-cache and --inputs-node-cache-dir and sets them in opts.
func inputsFlags(c config, opts *builders.Options) error {
	switch mode := mlv1.InputsCache(c.inputsCache); mode {
	case mlv1.InputsCacheShared, mlv1.InputsCachePerNode:
		opts.InputsCache = mode
	default:
		return fmt.Errorf("--inputs-cache %q is neither %s nor %s", c.inputsCache, mlv1.InputsCacheShared, mlv1.InputsCachePerNode)
	}
	if c.inputsNodeCacheDir != "" && !filepath.IsAbs(c.inputsNodeCacheDir) {
		return fmt.Errorf("--inputs-node-cache-dir %q is not an absolute path", c.inputsNodeCacheDir)
	}
	if opts.InputsCache == mlv1.InputsCachePerNode && c.inputsNodeCacheDir == "" {
		return errors.New("--inputs-cache=PerNode needs --inputs-node-cache-dir")
	}
	if c.inputsNodeCacheDir != "" {
		opts.InputsNodeCacheDir = filepath.Clean(c.inputsNodeCacheDir)
	}
	opts.InputsNodeCacheTTL = c.inputsNodeCacheTTL
	return nil
}
