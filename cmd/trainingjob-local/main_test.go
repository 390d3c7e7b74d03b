package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

// TestDemo runs what `make demo` runs: examples/trainingjob-local.yaml on a fresh local stack until it is
// Completed, then reads rank 0's log with the logs command.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the local stack: make test runs it, make unit (go test -short) does not")
	}
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	root := testenv.RepoRoot()
	bin, state := t.TempDir(), t.TempDir()
	// manager: the checkpoint agent
	build := exec.Command("go", "build", "-o", bin+"/", "./examples/trainer", "./cmd/manager", "./cmd/supervisor")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the trainer: %v\n%s", err, out)
	}
	var out bytes.Buffer
	err = up(context.Background(), &out, []string{"--assets", assets, "--state-dir", state, "--path", bin,
		"-f", filepath.Join(root, "examples", "trainingjob-local.yaml"), "--exit-when-done"})
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	states := regexp.MustCompile(`demo/logistic-regression\s+(\w+)`).FindAllStringSubmatch(out.String(), -1)
	var seen []string
	for _, m := range states {
		if len(seen) == 0 || seen[len(seen)-1] != m[1] {
			seen = append(seen, m[1])
		}
	}
	if diff := cmp.Diff([]string{"Pending", "Initializing", "Running", "Completed"}, seen); diff != "" {
		t.Errorf("states shown (-want +got):\n%s", diff)
	}
	if !regexp.MustCompile(`Running .* progress [1-9][0-9]?%`).MatchString(out.String()) ||
		!regexp.MustCompile(`Completed .* progress 100%`).MatchString(out.String()) {
		t.Errorf("the watch did not show rank 0's progress while running and 100%% at the end")
	}
	if !regexp.MustCompile(`checkpoints [1-3] \(latest epoch ([2468]|10)\)`).MatchString(out.String()) {
		t.Errorf("the watch did not show the checkpoint agent's report (1 to 3 kept, every 2nd epoch)")
	}
	var log bytes.Buffer
	if err := logs(&log, []string{"-n", "demo", "--state-dir", state, "logistic-regression"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"epoch 10/10 loss=", "checkpoint-epoch-10", "training complete: 10 epochs on 2 ranks"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("rank 0 log lacks %q:\n%s", want, log.String())
		}
	}
	if _, err := os.Stat(filepath.Join(state, "kubeconfig")); err != nil {
		t.Errorf("no kubeconfig in the state directory: %v", err)
	}
}

// TestUpWithKueue runs what `make up KUEUE=1 FILE=examples/kueue.yaml` runs, to the end: the real Kueue
// manager admits the first job (queued by Kueue's label) and holds the second (spec.scheduling.queueName)
// Suspended with Kueue's reason until the first one's quota is free; both complete. Without
// --kueue-assets, --kueue is refused with what to run.
func TestUpWithKueue(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the local stack: make test runs it, make unit (go test -short) does not")
	}
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	kueueAssets, err := testenv.KueueAssets()
	if err != nil {
		t.Fatal(err)
	}
	_, err = parseUp([]string{"--assets", assets, "--kueue", "--kueue-assets", ""})
	if err == nil || !strings.Contains(err.Error(), "hack/kueue.sh") {
		t.Errorf("--kueue without its assets: %v, want an error naming hack/kueue.sh", err)
	}
	root := testenv.RepoRoot()
	bin, state := t.TempDir(), t.TempDir()
	build := exec.Command("go", "build", "-o", bin+"/", "./examples/trainer", "./cmd/manager", "./cmd/supervisor")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the trainer: %v\n%s", err, out)
	}
	var out bytes.Buffer
	err = up(context.Background(), &out, []string{"--assets", assets, "--state-dir", state, "--path", bin,
		"--kueue", "--kueue-assets", kueueAssets, "-f", filepath.Join(root, "examples", "kueue.yaml"), "--exit-when-done"})
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	// The two jobs are alike and created in the same second: Kueue may admit either first.
	s := out.String()
	waited, ran := "second", "first"
	if !regexp.MustCompile(`demo/second\s+Suspended .*insufficient unused quota for cpu`).MatchString(s) {
		waited, ran = ran, waited
	}
	queued := regexp.MustCompile(`demo/` + waited + `\s+Suspended .*insufficient unused quota for cpu`).FindStringIndex(s)
	otherDone := regexp.MustCompile(`demo/` + ran + `\s+Completed`).FindStringIndex(s)
	runs := regexp.MustCompile(`demo/` + waited + `\s+Running`).FindStringIndex(s)
	if queued == nil || otherDone == nil || runs == nil || runs[0] < otherDone[0] ||
		!regexp.MustCompile(`demo/`+waited+`\s+Completed`).MatchString(s[runs[0]:]) {
		t.Errorf("want one job Suspended for quota, then running only after the other Completed, then Completed")
	}
}
