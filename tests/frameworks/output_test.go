//go:build frameworks

package frameworks

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// Scripts of one's own, unchanged: no endpoint, no helper. The supervisor around their command reads the
// progress they print, passes their output through byte for byte and their exit code out.

// TestOwnDDPScriptWithTqdm: real PyTorch DDP (gloo, 2 ranks) printing tqdm bars (Debian's python3-tqdm):
// the status shows its epoch, progress and loss from the bars while it runs, the supervisor's endpoint
// serves them, and the ranks end with the same weights.
func TestOwnDDPScriptWithTqdm(t *testing.T) {
	ns := newNamespace(t)
	create(t, tjtest.NewTJ(ns, "tqdm").Workers(2).GPUs(0).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Image = "me/ddp:1"
		tj.Spec.Command = []string{"python3", "examples/python/ddp_tqdm.py", "--epochs=3", "--steps=30", "--step-delay=0.1"}
	}).Obj())
	seen := waitStatus(t, ns, "tqdm", 3*time.Minute, func(tj *mlv1.TrainingJob) bool {
		return fromOutput(tj, "tqdm") && tj.Status.CurrentEpoch >= 1 && tj.Status.Progress != "" &&
			tj.Status.Metrics != nil && tj.Status.Metrics.Loss != nil
	})
	body := scrapeSupervisor(t, ns, "tqdm")
	for _, series := range []string{
		"training_epoch ", "training_epochs_total 3", "training_steps_total 30", "training_loss ", `trainingjob_output_format{format="tqdm"} 1`,
	} {
		if !strings.Contains(body, series) {
			t.Errorf("the supervisor's endpoint serves no %q:\n%s", series, body)
		}
	}
	done := waitFinished(t, ns, "tqdm", 3*time.Minute)
	logs := rankLogs(t, ns, "tqdm", 2)
	assertSameChecksum(t, logs, 2)
	if !strings.Contains(logs[0], "\r") || !regexp.MustCompile(`Epoch 3/3: 100%\|█+\| 30/30 \[`).MatchString(logs[0]) {
		t.Errorf("rank 0's log lacks tqdm's redrawn bars:\n%q", logs[0])
	}
	t.Logf("while running: progress %s, epoch %d, loss %s; at the end: %s, goodput %s", seen.Status.Progress, seen.Status.CurrentEpoch,
		seen.Status.Metrics.Display.Loss, done.Status.Progress, goodputOf(done))
}

// TestOwnScriptPlainEpochs: `epoch N/M loss X` lines: progress, epoch and loss in the status, the log byte
// for byte what the script printed, and goodput known.
func TestOwnScriptPlainEpochs(t *testing.T) {
	ns := newNamespace(t)
	copyPath := filepath.Join(t.TempDir(), "printed")
	create(t, tjtest.NewTJ(ns, "plain").Workers(1).GPUs(0).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Image = "me/plain:1"
		tj.Spec.Command = []string{"python3", "examples/python/plain_epochs.py", "--epochs=6", "--epoch-seconds=1", "--copy=" + copyPath}
	}).Obj())
	seen := waitStatus(t, ns, "plain", 2*time.Minute, func(tj *mlv1.TrainingJob) bool {
		return fromOutput(tj, "plain") && tj.Status.CurrentEpoch >= 2 && tj.Status.Metrics != nil && tj.Status.Metrics.Loss != nil
	})
	if want := fmt.Sprintf("%d%%", 100*seen.Status.CurrentEpoch/6); seen.Status.Progress != want {
		t.Errorf("progress %s at epoch %d of 6, want %s", seen.Status.Progress, seen.Status.CurrentEpoch, want)
	}
	// The operator's series (its manager runs in this process) follow the same figures.
	epoch := testutil.ToFloat64(metrics.CurrentEpoch.WithLabelValues(ns, "plain"))
	loss := testutil.ToFloat64(metrics.Loss.WithLabelValues(ns, "plain"))
	if epoch < 2 || loss <= 0 || loss >= 0.9 {
		t.Errorf("trainingjob_current_epoch %g, trainingjob_loss %g; want at least 2 and the loss printed", epoch, loss)
	}
	done := waitFinished(t, ns, "plain", 2*time.Minute)
	printed, err := os.ReadFile(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	if log := rankLogs(t, ns, "plain", 1)[0]; log != string(printed) {
		t.Errorf("the log is not what the script printed:\nlog     %q\nprinted %q", log, printed)
	}
	if g := goodputOf(done); g == "" || g == "0%" || strings.Contains(g, "unknown") {
		t.Errorf("goodput %q, want a figure", g)
	}
}

// TestOwnScriptExitCode: the program's exit code, not the supervisor's, fails the run.
func TestOwnScriptExitCode(t *testing.T) {
	ns := newNamespace(t)
	create(t, tjtest.NewTJ(ns, "exit").Workers(1).GPUs(0).BackoffLimit(0, mlv1.RestartGang).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Image = "me/exit:1"
		tj.Spec.Command = []string{"python3", "-c", "import sys; print('epoch 1/2 loss 0.5', flush=True); sys.exit(3)"}
	}).Obj())
	tj := waitStatus(t, ns, "exit", 2*time.Minute, func(tj *mlv1.TrainingJob) bool { return tj.Status.State == mlv1.StateFailed })
	if !strings.Contains(tj.Status.FailureReason, "exited with code 3") {
		t.Errorf("failure %q, want the program's exit code 3", tj.Status.FailureReason)
	}
}

// TestOwnScriptWithoutProgress: a script that prints nothing recognisable has no progress source: the
// status says so and how to give one, nothing is watched for a hang, and its goodput is unknown, not 0%.
func TestOwnScriptWithoutProgress(t *testing.T) {
	ns := newNamespace(t)
	create(t, tjtest.NewTJ(ns, "quiet").Workers(1).GPUs(0).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Image = "me/quiet:1"
		tj.Spec.Command = []string{"python3", "-c", "import time; print('loading', flush=True); time.sleep(6); print('done', flush=True)"}
	}).Obj())
	tj := waitStatus(t, ns, "quiet", 2*time.Minute, func(tj *mlv1.TrainingJob) bool {
		s := meta.FindStatusCondition(tj.Status.Conditions, mlv1.ConditionStalled)
		return derive.ConditionReason(tj.Status, mlv1.ConditionProgressReported) == derive.ReasonNoProgressSource &&
			s != nil && s.Reason == derive.ReasonNotWatched
	})
	c := meta.FindStatusCondition(tj.Status.Conditions, mlv1.ConditionProgressReported)
	if !strings.Contains(c.Message, "has printed no line the supervisor recognises") {
		t.Errorf("ProgressReported: %s", c.Message)
	}
	done := waitFinished(t, ns, "quiet", 2*time.Minute)
	if g := goodputOf(done); g != "unknown" {
		t.Errorf("goodput %q, want unknown", g)
	}
}

// waitStatus waits until ok holds for the job (while it runs), failing the test at timeout or if the job
// ends first (unless ok holds then).
func waitStatus(t *testing.T, ns, name string, timeout time.Duration, ok func(*mlv1.TrainingJob) bool) *mlv1.TrainingJob {
	t.Helper()
	tj := &mlv1.TrainingJob{}
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		if err := stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tj); err != nil {
			t.Fatal(err)
		}
		if ok(tj) {
			return tj
		}
		if tj.Status.State == mlv1.StateCompleted || tj.Status.State == mlv1.StateFailed || time.Now().After(deadline) {
			t.Fatalf("%s: %s before the status showed what was awaited; status %+v; rank 0's log:\n%s", name, tj.Status.State, tj.Status,
				rankLogs(t, ns, name, 1)[0])
		}
	}
}

// fromOutput reports whether the job's progress comes from its output, in format (any when "").
func fromOutput(tj *mlv1.TrainingJob, format string) bool {
	c := meta.FindStatusCondition(tj.Status.Conditions, mlv1.ConditionProgressReported)
	return c != nil && c.Reason == derive.ReasonFromOutput && (format == "" || strings.HasSuffix(c.Message, "("+format+")"))
}

// scrapeSupervisor reads rank 0's supervisor endpoint.
func scrapeSupervisor(t *testing.T, ns, name string) string {
	t.Helper()
	pods := &corev1.PodList{}
	if err := stack.Client.List(ctx, pods, client.InNamespace(ns),
		client.MatchingLabels{names.NameLabel: name, names.RankLabel: "0"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			body, err := stacktest.Scrape(fmt.Sprintf("%s:8084", p.Status.PodIP))
			if err != nil {
				t.Fatal(err)
			}
			return body
		}
	}
	t.Fatal("rank 0 has no running pod")
	return ""
}

func goodputOf(tj *mlv1.TrainingJob) string {
	if tj.Status.Goodput == nil {
		return ""
	}
	return tj.Status.Goodput.Percent
}

// printFile prints a recorded output file as its program did, piece by piece at each "\r" and "\n", then
// waits, so that the operator reads the end of it while the program still runs.
const printFile = `import re, sys, time
data = open(sys.argv[1], "rb").read()
for part in re.split(rb"(?<=[\r\n])", data):
    sys.stdout.buffer.write(part)
    sys.stdout.buffer.flush()
    time.sleep(0.005)
time.sleep(8)
`

// TestLibraryFormats: the lines of Hugging Face Trainer, Lightning and Keras as those libraries print them
// (recorded fixtures: the libraries cannot be installed here) go through the supervisor: the status
// shows their epoch and loss, and the log is the file byte for byte.
func TestLibraryFormats(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		file  string
		epoch int32
		loss  float64
	}{
		{file: "huggingface.txt", epoch: 3, loss: 0.5},
		{file: "lightning_tqdm.txt", epoch: 1, loss: 0.123},
		{file: "lightning_rich.txt", epoch: 9, loss: 0.05},
		{file: "keras2.txt", epoch: 3, loss: 0.1573},
		{file: "keras3.txt", epoch: 3, loss: 0.1573},
	}
	name := func(file string) string { return strings.ReplaceAll(strings.TrimSuffix(file, ".txt"), "_", "-") }
	for _, tc := range cases {
		create(t, tjtest.NewTJ(ns, name(tc.file)).Workers(1).GPUs(0).With(func(tj *mlv1.TrainingJob) {
			tj.Spec.Image = "me/formats:1"
			tj.Spec.Command = []string{"python3", "-c", printFile, filepath.Join("internal/supervisor/recognize/testdata", tc.file)}
		}).Obj())
	}
	// The jobs run side by side: each is read while it runs.
	seen := map[string]bool{}
	for deadline := time.Now().Add(2 * time.Minute); len(seen) < len(cases); time.Sleep(100 * time.Millisecond) {
		for _, tc := range cases {
			tj := &mlv1.TrainingJob{}
			if err := stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name(tc.file)}, tj); err != nil {
				t.Fatal(err)
			}
			m := tj.Status.Metrics
			if fromOutput(tj, "") && tj.Status.CurrentEpoch == tc.epoch && m != nil && m.Loss != nil && *m.Loss == tc.loss {
				seen[tc.file] = true
			}
			ended := tj.Status.State == mlv1.StateCompleted || tj.Status.State == mlv1.StateFailed
			if !seen[tc.file] && (ended || time.Now().After(deadline)) {
				t.Fatalf("%s: %s before the status showed epoch %d and loss %g from the output: %+v",
					tc.file, tj.Status.State, tc.epoch, tc.loss, tj.Status)
			}
		}
	}
	for _, tc := range cases {
		n := name(tc.file)
		waitFinished(t, ns, n, 2*time.Minute)
		want, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "internal/supervisor/recognize/testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		if log := rankLogs(t, ns, n, 1)[0]; log != string(want) {
			t.Errorf("%s: the log is not the file byte for byte:\nlog  %q\nfile %q", tc.file, log, want)
		}
	}
}
