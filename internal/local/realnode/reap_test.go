package realnode

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestEndProcesses: on a fake cgroup tree (directories with cgroup.procs files naming processes of the
// test), every process listed anywhere in the tree ends, so does a shim outside it whose command line
// names the node's directory, cgroup.kill is written where it exists (cgroup v2), and a bystander lives
// on, as does another program reading a file of the node's directory; then the tree is removed, deepest
// cgroups first.
func TestEndProcesses(t *testing.T) {
	sleep, errSleep := exec.LookPath("sleep")
	sh, errSh := exec.LookPath("sh")
	if errSleep != nil || errSh != nil {
		t.Fatalf("sleep and sh (coreutils, dash: in every Debian) are needed: %v, %v", errSleep, errSh)
	}
	type proc struct {
		cgroup string // relative to the node's cgroup; "" for none
		shim   bool   // containerd-shim-runc-v2 -namespace k8s.io -address DIR/containerd/containerd.sock
		reader bool   // less DIR/kubelet.log: names the node's directory, but is not the node's
	}
	type result struct {
		Ended, Alive []string
		Killed       string // cgroup.kill's content; "-" without one
		Cgroups      []string
	}
	for _, tc := range []struct {
		name  string
		procs map[string]proc
		v2    bool
		gone  []string // pids listed that are no process (an exited container)
		want  result
	}{{
		name: "cgroup v1: the pods' and containers' processes at every depth",
		procs: map[string]proc{
			"pause":     {cgroup: "kubepods/besteffort/podA"},
			"trainer":   {cgroup: "kubepods/besteffort/podA/ctr1"},
			"runc-init": {cgroup: "kubepods/burstable/podB/ctr2"},
			"bystander": {},
		},
		want: result{Ended: []string{"pause", "runc-init", "trainer"}, Alive: []string{"bystander"}, Killed: "-"},
	}, {
		name:  "cgroup v2: cgroup.kill written, the listed processes killed as well",
		procs: map[string]proc{"trainer": {cgroup: "kubepods/podA/ctr1"}, "bystander": {}},
		v2:    true,
		want:  result{Ended: []string{"trainer"}, Alive: []string{"bystander"}, Killed: "1"},
	}, {
		name: "a shim outside the node's cgroups, by its command line",
		procs: map[string]proc{
			"shim":      {shim: true},
			"runc-init": {cgroup: "kubepods/podA/ctr1"},
			"reader":    {reader: true},
			"bystander": {},
		},
		want: result{Ended: []string{"runc-init", "shim"}, Alive: []string{"bystander", "reader"}, Killed: "-"},
	}, {
		name:  "pids of processes that exited already",
		procs: map[string]proc{"bystander": {}},
		gone:  []string{"kubepods/podA"},
		want:  result{Alive: []string{"bystander"}, Killed: "-"},
	}, {
		name:  "no cgroup and no process",
		procs: map[string]proc{},
		want:  result{Killed: "-"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir := filepath.Join(base, "real-node-0")
			cgroup := filepath.Join(base, "cgroup", "trainingjob-real-node-0")
			shim := filepath.Join(base, "bin", "containerd-shim-runc-v2") // outside dir: named by its flags
			for _, d := range []string{filepath.Dir(cgroup), filepath.Dir(shim)} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			// A copy of the shell named as the shim: its command name is the shim's (containerd-shim).
			data, err := os.ReadFile(sh)
			if err != nil {
				t.Fatal(err)
			}
			less := filepath.Join(base, "bin", "less")
			for _, f := range []string{shim, less} {
				if err := os.WriteFile(f, data, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tc.v2 {
				writeFile(t, filepath.Join(cgroup, "cgroup.kill"), "0")
			}
			procs := map[string]string{} // cgroup.procs path -> its content
			exits := map[string]chan error{}
			for name, p := range tc.procs {
				cmd := exec.Command(sleep, "300")
				if p.shim || p.reader { // the shell's read: no child, and the flags as its positional arguments
					cmd = exec.Command(shim, "-c", "read line", "sh",
						"-namespace", "k8s.io", "-address", filepath.Join(dir, "containerd", "containerd.sock"))
					if p.reader {
						cmd = exec.Command(less, "-c", "read line", "sh", filepath.Join(dir, "kubelet.log"))
					}
					r, w, err := os.Pipe()
					if err != nil {
						t.Fatal(err)
					}
					cmd.Stdin = r
					t.Cleanup(func() { _ = r.Close(); _ = w.Close() })
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				exited := make(chan error, 1)
				go func() { exited <- cmd.Wait() }()
				t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited; exited <- nil })
				exits[name] = exited
				if p.cgroup != "" {
					f := filepath.Join(cgroup, p.cgroup, "cgroup.procs")
					procs[f] += fmt.Sprintf("%d\n", cmd.Process.Pid)
				}
			}
			for _, g := range tc.gone {
				cmd := exec.Command("true")
				if err := cmd.Run(); err != nil {
					t.Fatal(err)
				}
				f := filepath.Join(cgroup, g, "cgroup.procs")
				procs[f] += fmt.Sprintf("%d\n", cmd.Process.Pid)
			}
			for f, content := range procs {
				writeFile(t, f, content)
			}

			if err := endProcesses([]string{cgroup}, dir, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			var got result
			for name, exited := range exits {
				select {
				case err := <-exited:
					var ee *exec.ExitError
					if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
						t.Errorf("%s: %v, want killed by SIGKILL", name, err)
					}
					exited <- err
					got.Ended = append(got.Ended, name)
				case <-time.After(300 * time.Millisecond):
					got.Alive = append(got.Alive, name)
				}
			}
			sort.Strings(got.Ended)
			sort.Strings(got.Alive)
			got.Killed = "-"
			if b, err := os.ReadFile(filepath.Join(cgroup, "cgroup.kill")); err == nil {
				got.Killed = string(b)
			}
			// A real cgroup goes with its control files; the fake one's files go first.
			_ = filepath.WalkDir(cgroup, func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					_ = os.Remove(p)
				}
				return nil
			})
			if err := removeCgroupTree(cgroup, time.Second); err != nil {
				t.Error(err)
			}
			got.Cgroups = cgroupsUnder(t, filepath.Dir(cgroup))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestEndProcessesSparesItsCaller: the process that stops the stack and its parent, listed in a node's
// cgroup, are neither killed nor waited for.
func TestEndProcessesSparesItsCaller(t *testing.T) {
	cgroup := t.TempDir()
	writeFile(t, filepath.Join(cgroup, "pod", "cgroup.procs"), fmt.Sprintf("%d\n%d\n", os.Getpid(), os.Getppid()))
	start := time.Now()
	if err := endProcesses([]string{cgroup}, t.TempDir(), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %s, want no wait for spared processes", d)
	}
}

// TestNodeCommand: the command names a node runs outside its cgroups, as the kernel cuts them.
func TestNodeCommand(t *testing.T) {
	got := map[string]bool{}
	for _, c := range []string{"containerd-shim", "runc", "runc:[2:INIT]", "containerd", "kubelet",
		"tail", "less", "sleep", "kube-apiserver"} {
		got[c] = nodeCommand(c)
	}
	want := map[string]bool{"containerd-shim": true, "runc": true, "runc:[2:INIT]": true, "containerd": true, "kubelet": true,
		"tail": false, "less": false, "sleep": false, "kube-apiserver": false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("nodeCommand (-want +got):\n%s", diff)
	}
}

// TestRemoveTaskState: a killed shim's runc state and socket go, named by the node's task bundles; another
// node's stay.
func TestRemoveTaskState(t *testing.T) {
	base := t.TempDir()
	state, runc, sockets := filepath.Join(base, "state"), filepath.Join(base, "runc"), filepath.Join(base, "s")
	address := "/var/node-0/containerd/containerd.sock"
	socket := func(addr, id string) string {
		return fmt.Sprintf("s/%x", sha256.Sum256([]byte(addr+"/k8s.io/"+id)))
	}
	for _, f := range []string{
		"state/io.containerd.runtime.v2.task/k8s.io/aaa/config.json", "runc/aaa/state.json", socket(address, "aaa"),
		"runc/bbb/state.json", socket("/var/node-1/containerd/containerd.sock", "bbb"),
	} {
		writeFile(t, filepath.Join(base, f), "")
	}
	if err := removeTaskState(state, address, runc, sockets); err != nil {
		t.Fatal(err)
	}
	var got []string
	_ = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(p, state) {
			got = append(got, strings.TrimPrefix(p, base+"/"))
		}
		return nil
	})
	want := []string{"runc/bbb/state.json", socket("/var/node-1/containerd/containerd.sock", "bbb")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("files left (-want +got):\n%s", diff)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// cgroupsUnder lists the directories below root, relative to it.
func cgroupsUnder(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != root {
			out = append(out, strings.TrimPrefix(p, root+"/"))
		}
		return nil
	})
	return out
}
