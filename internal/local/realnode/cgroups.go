package realnode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"
)

// cgroupFS is where the cgroup v1 hierarchies are mounted, one directory per controller.
const cgroupFS = "/sys/fs/cgroup"

// cgroupRoot returns the node's cgroup, under which its kubelet puts every pod: several kubelets share the
// machine without seeing each other's pods.
func (o Options) cgroupRoot() string { return "trainingjob-" + o.Name }

// hierarchies returns the mounted cgroup v1 hierarchies (cpu,cpuacct and its links counted once).
func hierarchies() ([]string, error) {
	entries, err := os.ReadDir(cgroupFS)
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() { // links (cpu -> cpu,cpuacct) are not directories here
			out = append(out, filepath.Join(cgroupFS, e.Name()))
		}
	}
	return out, nil
}

// createCgroupRoot creates the node's cgroup in every hierarchy (the kubelet wants its root to exist).
func createCgroupRoot(name string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		if err := os.MkdirAll(filepath.Join(h, name), 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", name, err)
		}
	}
	return nil
}

// cgroupTrees returns the node's cgroup name in every hierarchy (endProcesses ends what is in them).
func cgroupTrees(name string) ([]string, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = filepath.Join(h, name)
	}
	return out, nil
}

// removeCgroupRoot removes the node's cgroups, the pods' ones below it first (endProcesses ended their
// processes).
func removeCgroupRoot(name string) error {
	trees, err := cgroupTrees(name)
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range trees {
		errs = append(errs, removeCgroupTree(t, 5*time.Second))
	}
	return errors.Join(errs...)
}

// removeCgroupTree removes the cgroup dir and every cgroup below it, deepest first. A cgroup whose last
// process has just been killed can be busy a moment longer: it retries until timeout.
func removeCgroupTree(dir string, timeout time.Duration) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	deadline := time.Now().Add(timeout)
	var errs []error
	for _, d := range dirs {
		for {
			err := os.Remove(d)
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}
