package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
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

// sameFile reports whether f is still the file at path (not unlinked by a prune).
func sameFile(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// runPruneNodeCache runs `manager prune-node-cache`, the node cache pruner (a DaemonSet of the chart, the
// only process that sees a node's whole input cache): every --every it removes the jobs' directories in
// --dir that no rank has started with for --ttl. The directories' names come from the operator's builder
// (the kubelet creates each as a job's hostPath); no job's pod or data decides what is removed.
func runPruneNodeCache(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("prune-node-cache", flag.ContinueOnError)
	var dir string
	var ttl, every time.Duration
	fs.StringVar(&dir, "dir", "/node-cache", "the node's input cache (the operator's --inputs-node-cache-dir, mounted)")
	fs.DurationVar(&ttl, "ttl", 7*24*time.Hour, "remove a job's directory once no rank has started with it for this long")
	fs.DurationVar(&every, "every", 10*time.Minute, "time between two passes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if ttl <= 0 || every <= 0 {
		return fmt.Errorf("--ttl %s and --every %s must be positive", ttl, every)
	}
	for {
		pruneNodeCache(dir, ttl, time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

// pruneNodeCache removes the directories in root (the jobs' caches on this node) that no rank has started
// with for ttl, each only while holding its lock, so one being fetched is left alone; entries that are not
// directories (a link, a file) are left alone. Best effort: what cannot be removed is tried again later.
func pruneNodeCache(root string, ttl time.Duration, now time.Time) {
	entries, err := os.ReadDir(root)
	if err != nil {
		fmt.Fprintf(os.Stderr, "reading the node's input cache: %v\n", err)
		return
	}
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		if !e.IsDir() || !unusedSince(dir, now.Add(-ttl)) {
			continue
		}
		if removeUnlocked(dir) {
			fmt.Printf("removed %s from the node's input cache: unused for %s\n", e.Name(), ttl)
		}
	}
}

// unusedSince reports whether no rank has started with the directory since t (its usedFile, else the directory itself).
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
	if c.inputsNodeCacheMax != "" {
		q, err := resource.ParseQuantity(c.inputsNodeCacheMax)
		if err != nil || q.Sign() <= 0 {
			return fmt.Errorf("--inputs-node-cache-max-size %q is not a positive quantity", c.inputsNodeCacheMax)
		}
		opts.InputsNodeCacheMaxSize = &q
	}
	return nil
}
