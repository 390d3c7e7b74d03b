//go:build cluster

package cluster

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
)

// bars is a script of one's own: it draws a progress bar with "\r" and prints one line per epoch and a few
// bytes that are not UTF-8; nothing of the operator. expectedBars is what it prints.
const bars = `import sys, time
out = sys.stdout.buffer
for epoch in range(1, 4):
    for step in range(11):
        out.write((f"\rEpoch {epoch}/3: {step * 10:3d}%|{'#' * step}{' ' * (10 - step)}| {step}/10 "
                   f"[00:01<00:01,  9.00it/s, loss=0.{9 - epoch}]").encode())
        out.flush()
        time.sleep(0.1)
    out.write(f"\nepoch {epoch}/3 loss 0.{9 - epoch}\n".encode() + b"\xff\xfe raw\n")
    out.flush()
    time.sleep(2)
`

func expectedBars() []byte {
	var b bytes.Buffer
	for epoch := 1; epoch <= 3; epoch++ {
		for step := 0; step <= 10; step++ {
			fmt.Fprintf(&b, "\rEpoch %d/3: %3d%%|%s%s| %d/10 [00:01<00:01,  9.00it/s, loss=0.%d]", epoch, step*10, strings.Repeat("#", step),
				strings.Repeat(" ", 10-step), step, 9-epoch)
		}
		fmt.Fprintf(&b, "\nepoch %d/3 loss 0.%d\n\xff\xfe raw\n", epoch, 9-epoch)
	}
	return b.Bytes()
}

// TestOwnScriptOnRealNodes: a script of one's own on the runner image, in a real container whose first
// process is the supervisor: the status shows the epoch and loss it prints while it runs, and `kubectl
// logs` returns its bytes exactly ("\r" and invalid UTF-8 included). (SIGTERM through the supervisor as
// the container's first process: TestPreemptionKeepsTheWork, whose runner writes its checkpoint on it.)
func TestOwnScriptOnRealNodes(t *testing.T) {
	ns := stacktest.NewNamespace(t, stack.Client, "own")
	script, tj := scriptJob(ns, "bars", 1, "bars.py", bars, "python3", "/scripts/bars.py")
	stacktest.Create(t, stack.Client, script, tj)
	node, id := runningContainer(t, ns, tj.Name, "0")
	if cmd := procFile(t, node, id, "cmdline"); !strings.HasPrefix(cmd, builders.SupervisorPath+"\x00") {
		t.Errorf("the container's first process is %q, want the supervisor", cmd)
	}
	eventually(t, 2*time.Minute, "progress from the output", func() error {
		got := getTJ(t, ns, tj.Name)
		c := meta.FindStatusCondition(got.Status.Conditions, mlv1.ConditionProgressReported)
		if c == nil || c.Reason != derive.ReasonFromOutput || got.Status.CurrentEpoch < 1 ||
			got.Status.Metrics == nil || got.Status.Metrics.Loss == nil {
			return fmt.Errorf("progress %q epoch %d condition %+v", got.Status.Progress, got.Status.CurrentEpoch, c)
		}
		return nil
	})
	done := waitForEnd(t, ns, tj.Name, 2*time.Minute)
	pod := workerPods(t, ns, tj.Name, 0)["0"]
	log := kubectl(t, "logs", "-n", ns, pod.Name, "-c", names.ContainerName)
	if done.Status.State != mlv1.StateCompleted {
		t.Fatalf("state %s: %s\n%s", done.Status.State, done.Status.FailureReason, log)
	}
	if want := expectedBars(); log != string(want) {
		t.Errorf("kubectl logs is not what the script printed:\ngot  %q\nwant %q", log, want)
	}
	if done.Status.Goodput == nil || done.Status.Goodput.Percent == "" || strings.Contains(done.Status.Goodput.Percent, "unknown") {
		t.Errorf("goodput %+v, want a figure", done.Status.Goodput)
	}
}
