package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
)

// kubectlCmd runs the real kubectl with the plugin (stacktest.Kubectl).
func kubectlCmd(t *testing.T, plugins string, args ...string) (string, error) {
	t.Helper()
	return stacktest.Kubectl(t, stack, plugins, args...)
}

func buildPlugin(t *testing.T) string { return stacktest.BuildPlugin(t) }

// TestKubectl: on a running job with checkpoints, `kubectl trainingjob status` tells its story, `kubectl
// trainingjob logs --rank 0` and plain `kubectl logs` show rank 0's log (the process node serves the
// kubelet's log endpoint), `kubectl trainingjob checkpoints` names the newest checkpoint, suspend stops
// the workers and resume continues from that checkpoint to Completed; `kubectl describe` lists the
// TrainingJob's own events.
func TestKubectl(t *testing.T) {
	plugins := buildPlugin(t)
	ns, name := newNamespace(t), "told"
	create(t, trainerJob(ns, name, 2, 12, "--epoch-delay=500ms").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Frequency: ptr.To[int32](1)}
	}).Obj())
	run := func(args ...string) string {
		t.Helper()
		out, err := kubectlCmd(t, plugins, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	contains := func(what, out string, parts ...string) error {
		for _, p := range parts {
			if !strings.Contains(out, p) {
				return fmt.Errorf("%s lacks %q:\n%s", what, p, out)
			}
		}
		return nil
	}
	var status string
	eventually(t, 2*time.Minute, "status while running with a checkpoint", func() error {
		out, err := kubectlCmd(t, plugins, "trainingjob", "status", name, "-n", ns)
		if status = out; err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return contains("status", out, "TrainingJob  "+ns+"/"+name, "State        Running (", "Progress", "epoch ", "Checkpoint   epoch ",
			"Conditions:", "AllWorkersRunning", "2 of 2 workers running", "Events:", "Workers of attempt 0:",
			name+"-worker-0-", name+"-worker-1-")
	})
	t.Logf("kubectl trainingjob status:\n%s", status)
	if err := contains("logs --rank 0", run("trainingjob", "logs", name, "--rank", "0", "-n", ns), "epoch 1/12 loss="); err != nil {
		t.Error(err)
	}
	pod := workerPods(t, ns, name)[0].Name
	if err := contains("kubectl logs", run("logs", pod, "-c", "trainer", "-n", ns, "--tail", "1"), "epoch"); err != nil {
		t.Error(err)
	}
	if err := contains("checkpoints", run("trainingjob", "checkpoints", name, "-n", ns), "Storage              pvc claim "+name+"-checkpoints",
		"Newest               ", "checkpoint-epoch-"); err != nil {
		t.Error(err)
	}

	run("trainingjob", "suspend", name, "-n", ns)
	waitForState(t, ns, name, mlv1.StateSuspended, time.Minute)
	run("trainingjob", "resume", name, "-n", ns)
	waitForState(t, ns, name, mlv1.StateCompleted, 3*time.Minute)
	if log := rankLog(t, ns, name, 0); !strings.Contains(log, "resuming from ") {
		t.Errorf("rank 0 did not resume from a checkpoint after resume:\n%s", log)
	}
	if err := contains("describe", run("describe", "trainingjob", name, "-n", ns), "Events:", "Suspended", "Completed"); err != nil {
		t.Error(err)
	}
}
