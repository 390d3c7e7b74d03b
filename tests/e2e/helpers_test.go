package e2e

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/node"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

var ctx = context.Background()

func newNamespace(t *testing.T) string {
	t.Helper()
	return stacktest.NewNamespace(t, stack.Client, "e2e-")
}

// trainerJob returns a TrainingJob running the example trainer on CPU.
func trainerJob(ns, name string, workers int32, epochs int32, args ...string) *tjtest.TJ {
	return tjtest.NewTJ(ns, name).Workers(workers).GPUs(0).Epochs(epochs).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Image = "example-trainer:local"
		tj.Spec.Command = []string{"trainer"}
		tj.Spec.Args = append([]string{"--samples=4096", "--features=8", "--rendezvous-timeout=1m"}, args...)
		tj.Spec.Hyperparameters.LearningRate = ptr.To(0.2)
	})
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	stacktest.Create(t, stack.Client, objs...)
}

// eventually returns stacktest.Eventually.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	stacktest.Eventually(t, timeout, what, cond)
}

func getTJ(t *testing.T, ns, name string) *mlv1.TrainingJob {
	t.Helper()
	tj := &mlv1.TrainingJob{}
	if err := stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tj); err != nil {
		t.Fatal(err)
	}
	return tj
}

func waitForState(t *testing.T, ns, name string, want mlv1.State, timeout time.Duration) *mlv1.TrainingJob {
	t.Helper()
	var tj *mlv1.TrainingJob
	eventually(t, timeout, fmt.Sprintf("TrainingJob %s/%s %s", ns, name, want), func() error {
		tj = getTJ(t, ns, name)
		if tj.Status.State != want {
			return fmt.Errorf("state %q (failure %q)", tj.Status.State, tj.Status.FailureReason)
		}
		return nil
	})
	return tj
}

// workerPods returns the TrainingJob's pods by rank (the newest pod of each rank).
func workerPods(t *testing.T, ns, name string) map[int]*corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := stack.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{names.NameLabel: name}); err != nil {
		t.Fatal(err)
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].CreationTimestamp.Before(&pods.Items[j].CreationTimestamp) })
	out := map[int]*corev1.Pod{}
	for i := range pods.Items {
		r, _ := strconv.Atoi(pods.Items[i].Labels[names.RankLabel])
		out[r] = &pods.Items[i]
	}
	return out
}

// runningPIDs waits until every rank's trainer runs and returns the process IDs by rank.
func runningPIDs(t *testing.T, ns, name string, workers int) map[int]int {
	t.Helper()
	pids := map[int]int{}
	eventually(t, 2*time.Minute, "every rank running", func() error {
		for r, p := range workerPods(t, ns, name) {
			if len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil {
				pid, err := strconv.Atoi(strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, node.ContainerIDPrefix))
				if err != nil {
					return err
				}
				pids[r] = pid
			}
		}
		if len(pids) != workers {
			return fmt.Errorf("%d of %d ranks running", len(pids), workers)
		}
		return nil
	})
	return pids
}

// rankLog returns the trainer log of a rank's newest pod.
func rankLog(t *testing.T, ns, name string, rank int) string {
	t.Helper()
	return readLog(t, ns, fmt.Sprintf("%s-worker-%d-*", name, rank), names.ContainerName)
}

// readLog returns a container's log on the process nodes; pod may be a glob.
func readLog(t *testing.T, ns, pod, container string) string {
	t.Helper()
	path, err := node.LogPath(stack.DataRoot, ns, pod, container)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

var lossLine = regexp.MustCompile(`(?m)^epoch (\d+)/\d+ loss=([0-9.]+)`)

// losses returns the per-epoch losses rank 0 logged, by epoch.
func losses(log string) map[int]float64 {
	out := map[int]float64{}
	for _, m := range lossLine.FindAllStringSubmatch(log, -1) {
		e, _ := strconv.Atoi(m[1])
		out[e], _ = strconv.ParseFloat(m[2], 64)
	}
	return out
}

// assertLossFalls checks every epoch from first to last was logged and each lowered the loss.
func assertLossFalls(t *testing.T, log string, first, last int) {
	t.Helper()
	l := losses(log)
	for e := first; e <= last; e++ {
		if _, ok := l[e]; !ok {
			t.Fatalf("epoch %d missing from the rank 0 log:\n%s", e, log)
		}
		if e > first && !(l[e] < l[e-1]) {
			t.Errorf("loss did not fall at epoch %d: %v -> %v", e, l[e-1], l[e])
		}
	}
}

func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil
}
