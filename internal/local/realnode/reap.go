package realnode

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// reapTimeout bounds how long a stop keeps killing a node's processes and waits for its cgroups to empty.
const reapTimeout = 15 * time.Second

// endProcesses ends every process of a node once its kubelet and containerd are stopped (or dead, as on a
// lost node): those in the cgroup trees cgroups (one per hierarchy: the node's pods, their containers and a
// `runc init` still waiting to be started) and those whose command line names a path under dir (the
// node's containerd shims, `-address DIR/containerd/containerd.sock`, and a `runc create` one of them ran,
// `--bundle DIR/...`; nodeCommand says which programs): containerd does not stop its shims with itself, and a task it never listed (created
// while the kubelet was stopping, or by a lost node's kubelet on its return) keeps its shim and container.
// A tree with cgroup.kill (cgroup v2) is killed at once; every process listed is sent SIGKILL too (cgroup
// v1, or a process that raced in), again until none is left or timeout has passed. It returns an error
// naming the processes still alive then. The caller's own process and its ancestors are never killed.
func endProcesses(cgroups []string, dir string, timeout time.Duration) error {
	spared := ancestors()
	for _, c := range cgroups {
		if err := killCgroup(c); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(timeout)
	seen := map[int]bool{} // killed here, or by cgroup.kill
	for {
		left := map[int]bool{}
		for _, c := range cgroups {
			for _, pid := range cgroupPids(c) {
				left[pid] = true
			}
		}
		for _, pid := range pidsNaming(dir) {
			left[pid] = true
		}
		var alive []int
		for pid := range left {
			if spared[pid] {
				continue
			}
			seen[pid] = true
			if running(pid) {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 {
			waitReaped(seen, reapWait)
			return nil
		}
		sort.Ints(alive)
		if time.Now().After(deadline) {
			names := make([]string, len(alive))
			for i, pid := range alive {
				names[i] = fmt.Sprintf("%d (%s)", pid, comm(pid))
			}
			return fmt.Errorf("processes of %s still running %s after SIGKILL: %s", dir, timeout, strings.Join(names, ", "))
		}
		for _, pid := range alive {
			_ = syscall.Kill(pid, syscall.SIGKILL) // ESRCH: it ended meanwhile
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killCgroup writes cgroup.kill of the cgroup v2 dir, which kills every process of it and below it, a
// process forking meanwhile included. Nothing when there is none (cgroup v1, dir gone).
func killCgroup(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, "cgroup.kill"), os.O_WRONLY, 0) // never created
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		_, err = f.Write([]byte("1"))
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		return fmt.Errorf("killing cgroup %s: %w", dir, err)
	}
	return nil
}

// reapWait bounds how long endProcesses waits for the zombies of the processes it killed to be reaped.
const reapWait = 3 * time.Second

// waitReaped waits until none of pids is a process any more, zombies included, or timeout has passed: the
// killed shims' and runc inits' parent is init (here a VM's, which reaps a while later), and a pgrep right
// after a stop would still list them. A zombie holds nothing (no cgroup, memory or mount): past timeout it
// is left to its reaper.
func waitReaped(pids map[int]bool, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for pid := range pids {
		for time.Now().Before(deadline) {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// cgroupPids returns the processes of the cgroup dir and of every cgroup below it (none when dir is gone).
func cgroupPids(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// nodeCommand reports whether a process's command name (comm: its executable's name, cut to 15 bytes) is
// one a node runs outside its cgroups: containerd-shim-runc-v2, runc (create, start, kill, delete),
// containerd and the kubelet. Anything else naming the node's directory (a user's `tail -f` of a log there)
// is left alone.
func nodeCommand(comm string) bool {
	return comm == "containerd-shim" || strings.HasPrefix(comm, "runc") || comm == "containerd" || comm == "kubelet"
}

// pidsNaming returns the processes of a node's commands (nodeCommand) with an argument (argv[0] included)
// that is a path under dir, alone or as the value of a --flag=PATH.
func pidsNaming(dir string) []int {
	dir = filepath.Clean(dir)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !nodeCommand(comm(pid)) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // ended meanwhile
		}
		for _, arg := range bytes.Split(cmdline, []byte{0}) {
			a := string(arg)
			if i := strings.Index(a, "="); i >= 0 && strings.HasPrefix(a, "-") {
				a = a[i+1:]
			}
			if a == dir || strings.HasPrefix(a, dir+"/") {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// running reports whether pid is a process that has not exited: a zombie is past killing (its parent reaps
// it) and a cgroup lists it no longer.
func running(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses, the state follows the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return false
	}
	state := data[i+2]
	return state != 'Z' && state != 'X'
}

// comm returns a process's command name, for messages.
func comm(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(data))
}

// ancestors returns this process and its ancestors: a node's directory can appear in the command line of
// the program that runs the stack (a state directory given to trainingjob-local).
func ancestors() map[int]bool {
	out := map[int]bool{}
	for pid := os.Getpid(); pid > 1 && !out[pid]; {
		out[pid] = true
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			break
		}
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			break
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 2 {
			break
		}
		ppid, err := strconv.Atoi(f[1])
		if err != nil {
			break
		}
		pid = ppid
	}
	out[1] = true
	return out
}

// removeTaskState removes what the runc shims of a node's containerd keep outside the node's directory
// for each task: runc's state (RUNC/ID; runcRoot) and the shim's socket (SOCKETS/HASH of ADDRESS/k8s.io/ID;
// shimSockets). A shim deletes them when its task is deleted; one that endProcesses killed did not. The
// tasks are the bundles in stateDir (containerd's state directory).
func removeTaskState(stateDir, address, runc, sockets string) error {
	bundles, _ := filepath.Glob(filepath.Join(stateDir, "io.containerd.runtime.v2.task", "k8s.io", "*"))
	var errs []error
	for _, b := range bundles {
		id := filepath.Base(b)
		socket := fmt.Sprintf("%x", sha256.Sum256([]byte(filepath.Join(address, "k8s.io", id))))
		for _, p := range []string{filepath.Join(runc, id), filepath.Join(sockets, socket)} {
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// runcRoot is where the runc shim keeps runc's state for containerd's k8s.io namespace (runc's --root,
// the shim's default), and shimSockets where containerd 1.6's shims listen: machine-wide, whichever
// containerd started them.
const (
	runcRoot    = "/run/containerd/runc/k8s.io"
	shimSockets = "/run/containerd/s"
)
