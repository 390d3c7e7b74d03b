package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/internal/local/node"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

// trainerJob returns a file of a TrainingJob of the example trainer in namespace demo: name, its ranks, its
// epochs and the time each takes.
func trainerJob(t *testing.T, name string, workers, epochs int, delay string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), name+".yaml")
	yaml := fmt.Sprintf(`apiVersion: ml.example.com/v1
kind: TrainingJob
metadata: {name: %s, namespace: demo}
spec:
  model: lr
  dataset: synthetic
  numWorkers: %d
  gpusPerWorker: 0
  command: ["trainer", "--epoch-delay=%s"]
  hyperparameters: {epochs: %d}
`, name, workers, delay, epochs)
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// stackDirs skips a short run, and returns the control plane's binaries, a directory with the packages built
// into it, and a state directory.
func stackDirs(t *testing.T, packages ...string) (assets, bin, state string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts the local stack: make test runs it, make unit (go test -short) does not")
	}
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	bin, state = t.TempDir(), t.TempDir()
	build := exec.Command("go", append([]string{"build", "-o", bin + "/"}, packages...)...)
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %v: %v\n%s", packages, err, out)
	}
	return assets, bin, state
}

// TestInterruptStopsEverything: cancelling `up` (what Ctrl-C does) while a TrainingJob trains stops the
// trainers, the control plane and every other process it started.
func TestInterruptStopsEverything(t *testing.T) {
	assets, bin, state := stackDirs(t, "./examples/trainer", "./cmd/supervisor")
	file := trainerJob(t, "endless", 2, 100000, "50ms")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	stopped := make(chan struct{})
	var out bytes.Buffer
	go func() {
		defer close(stopped)
		done <- up(ctx, &out, []string{"--assets", assets, "--state-dir", state, "--path", bin, "-f", file})
	}()
	t.Cleanup(func() { cancel(); <-stopped }) // on failure too: never leave a control plane behind
	pids := trainerPIDs(t, filepath.Join(state, "kubeconfig"), done)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("up: %v\n%s", err, out.String())
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("trainer %d still runs", pid)
		}
	}
	if kids := children(t); len(kids) > 0 {
		t.Errorf("processes left behind: %v", kids)
	}
}

// trainerPIDs waits until both ranks run and returns their process IDs.
func trainerPIDs(t *testing.T, kubeconfig string, done chan error) []int {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("up returned early: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			continue
		}
		c, err := client.New(cfg, client.Options{})
		if err != nil {
			continue
		}
		pods := &corev1.PodList{}
		if err := c.List(context.Background(), pods, client.InNamespace("demo")); err != nil {
			continue
		}
		var pids []int
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Running != nil {
					pid, _ := strconv.Atoi(strings.TrimPrefix(cs.ContainerID, node.ContainerIDPrefix))
					pids = append(pids, pid)
				}
			}
		}
		if len(pids) == 2 {
			return pids
		}
	}
	t.Fatal("the trainers did not start")
	return nil
}

// children lists the live child processes of this test process.
func children(t *testing.T) []string {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var kids []string
	for _, s := range stats {
		data, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		rest := string(data[bytes.LastIndexByte(data, ')')+2:])
		f := strings.Fields(rest)
		if len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) && f[0] != "Z" {
			kids = append(kids, fmt.Sprintf("%s %s", filepath.Base(filepath.Dir(s)), string(data[:bytes.LastIndexByte(data, ')')+1])))
		}
	}
	return kids
}

// TestSIGTERMStopsEverything: `trainingjob-local up` sent SIGTERM (a test harness's timeout, a service
// manager) while a TrainingJob trains returns within 30 s and leaves no process behind: not its trainers,
// not its control plane (a stop once waited 15 minutes on a pod's last status write).
func TestSIGTERMStopsEverything(t *testing.T) {
	assets, bin, state := stackDirs(t, "./examples/trainer", "./cmd/supervisor", "./cmd/trainingjob-local")
	var out bytes.Buffer
	cmd := exec.Command(filepath.Join(bin, "trainingjob-local"), "up", "--assets", assets, "--state-dir", state, "--path", bin,
		"-f", trainerJob(t, "endless", 2, 100000, "50ms"))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	pids := trainerPIDs(t, filepath.Join(state, "kubeconfig"), done)
	if running := processesMentioning(state); len(running) < 2 {
		t.Fatalf("the stack's processes cannot be told by their command line: %v", running)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("up exited with %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("up still runs 30 s after SIGTERM\n%s", out.String())
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("trainer %d still runs", pid)
		}
	}
	if left := processesMentioning(state); len(left) > 0 {
		t.Errorf("processes of the stack left behind: %v", left)
	}
}

// processesMentioning lists the live processes whose command line names s (the stack's state directory:
// etcd, kube-apiserver, the operator and the pods are started with paths under it).
func processesMentioning(s string) []string {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, c := range cmdlines {
		data, err := os.ReadFile(c)
		if err != nil || !bytes.Contains(data, []byte(s)) {
			continue
		}
		out = append(out, filepath.Base(filepath.Dir(c))+" "+strings.ReplaceAll(string(data), "\x00", " "))
	}
	return out
}
