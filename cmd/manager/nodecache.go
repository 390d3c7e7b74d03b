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
		if e.IsDir() && pruneDir(filepath.Join(root, e.Name()), now.Add(-ttl)) {
			fmt.Printf("removed %s from the node's input cache: unused for %s\n", e.Name(), ttl)
		}
	}
}

// pruneDir removes dir when no rank has started with it since t and its lock is free. It follows no link:
// the job's pods write in the directory, and the pruner runs as root (DAC_OVERRIDE), so a link planted
// there would make it create or read files of another job, or of the node.
func pruneDir(dir string, t time.Time) bool {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false // gone, or no longer a directory
	}
	d := os.NewFile(uintptr(fd), dir)
	defer func() { _ = d.Close() }() // read only
	return unusedSince(d, t) && removeUnlocked(d)
}

// unusedSince reports whether no rank has started with the directory d since t: its usedFile's time, else
// (none, or a link or another file that is not regular: never followed) the directory's own.
func unusedSince(d *os.File, t time.Time) bool {
	info, err := statRegularAt(d, usedFile)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(os.Stderr, "the node's input cache: ignoring %v\n", err)
		}
		if info, err = d.Stat(); err != nil {
			return false
		}
	}
	return info.ModTime().Before(t)
}

// removeUnlocked removes the directory d when its lock is free, holding the lock meanwhile. A lock that is
// a link or not a regular file is refused: the directory stays.
func removeUnlocked(d *os.File) bool {
	f, err := openRegularAt(d, lockFile, syscall.O_CREAT|syscall.O_RDWR)
	if err != nil {
		fmt.Fprintf(os.Stderr, "the node's input cache: leaving %s: %v\n", d.Name(), err)
		return false
	}
	defer func() { _ = f.Close() }()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return false
	}
	return os.RemoveAll(d.Name()) == nil // removes a link, never what it points at
}

// openRegularAt opens name in the directory d without following a link (O_NOFOLLOW: a link fails with
// ELOOP) nor blocking on a FIFO, and refuses what is not a regular file.
func openRegularAt(d *os.File, name string, flags int) (*os.File, error) {
	path := filepath.Join(d.Name(), name)
	fd, err := syscall.Openat(int(d.Fd()), name, flags|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return f, nil
}

// statRegularAt returns the FileInfo of the regular file name in the directory d, not through a link.
func statRegularAt(d *os.File, name string) (os.FileInfo, error) {
	f, err := openRegularAt(d, name, syscall.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read only
	return f.Stat()
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
