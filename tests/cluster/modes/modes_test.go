//go:build cluster

// Package modes runs the local stack as a new user does, one mode after the other in one state directory:
// `make demo`, `make demo NODES_RUNTIME=containerd`, `make demo` again. make test-cluster runs it after the
// real-node suite (root, Linux), never beside it: both use the machine's real-node parts.
package modes

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainingjob-operator/trainingjob-operator/internal/local/realnode"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

// TestModesShareAStateDirectory: each mode of trainingjob-local starts from what the other left in the
// state directory (an earlier real-node run left an in-cluster certificate that the process mode's control
// plane could not use), runs the demo to Completed and leaves no process, bridge or rule behind.
func TestModesShareAStateDirectory(t *testing.T) {
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	nodeAssets := os.Getenv("NODE_ASSETS")
	if nodeAssets == "" {
		t.Fatal("NODE_ASSETS is not set: run make test-cluster (hack/node.sh builds the node parts)")
	}
	bin, err := testenv.BuildWorkerTools(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/trainingjob-local")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building trainingjob-local: %v\n%s", err, out)
	}
	state := t.TempDir()
	demo := []string{"up", "--assets", assets, "--state-dir", state, "--path", bin,
		"-f", filepath.Join(testenv.RepoRoot(), "examples", "trainingjob-local.yaml"), "--exit-when-done"}
	// The runner's image is not needed by the demo: leave RUNNER_ROOTFS (set by make test-cluster) out.
	real := append(append([]string{}, demo...), "--nodes-runtime", "containerd", "--node-assets", nodeAssets, "--runner-rootfs", "")
	for _, run := range []struct {
		name string
		args []string
	}{
		{name: "process nodes", args: demo},
		{name: "real nodes", args: real},
		{name: "process nodes after real nodes", args: demo},
	} {
		cmd := exec.Command(filepath.Join(bin, "trainingjob-local"), run.args...)
		cmd.Dir = testenv.RepoRoot()
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "demo/logistic-regression Completed") {
			t.Fatalf("%s: trainingjob-local up: %v\n%s\n%s", run.name, err, out, tail(filepath.Join(state, "operator.log")))
		}
		t.Logf("%s:\n%s", run.name, out)
		if left := append(realnode.Leftovers(), processesOf(state)...); len(left) > 0 {
			t.Fatalf("%s: left behind:\n  %s", run.name, strings.Join(left, "\n  "))
		}
	}
	// make demo's last step: rank 0's log is this run's (on a process node its checkpoints are under the
	// state directory), not the real-node run's before it (under /checkpoints in the container).
	logs := exec.Command(filepath.Join(bin, "trainingjob-local"), "logs", "--state-dir", state, "-n", "demo", "logistic-regression")
	out, err := logs.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "checkpoint "+filepath.Join(state, "data")) ||
		strings.Contains(string(out), "checkpoint /checkpoints/") {
		t.Errorf("trainingjob-local logs after the process-node run (%v): want its own checkpoints under %s/data:\n%s", err, state, out)
	}
}

// processesOf lists the running processes whose command line names dir: every process of a local stack
// does (etcd's data, kube-apiserver's certificates, the other components' kubeconfigs, the nodes' files).
func processesOf(dir string) []string {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var left []string
	for _, f := range cmdlines {
		data, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(data), dir) {
			left = append(left, "process "+filepath.Base(filepath.Dir(f))+": "+strings.ReplaceAll(string(data), "\x00", " "))
		}
	}
	return left
}

// tail returns the end of a log file, for a failure's message.
func tail(path string) string {
	data, _ := os.ReadFile(path)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return path + ":\n" + string(data)
}
