package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
)

// TestTrainingCompletes runs the example trainer with 2 and 4 ranks to Completed: the ranks rendezvous
// through rank 0's DNS name, the loss falls every epoch, rank 0 serves progress on its pod IP while it
// trains, and checkpoints land on the claim every 2 epochs.
func TestTrainingCompletes(t *testing.T) {
	for _, workers := range []int32{2, 4} {
		t.Run(fmt.Sprintf("%d ranks", workers), func(t *testing.T) {
			ns, name := newNamespace(t), "lr"
			claim := &corev1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{Name: "checkpoints", Namespace: ns},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}
			tj := trainerJob(ns, name, workers, 6, "--epoch-delay=400ms").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Frequency: ptr.To[int32](2),
					Storage: &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "checkpoints"}}
			}).Obj()
			create(t, claim, tj)

			runningPIDs(t, ns, name, int(workers))
			pods := workerPods(t, ns, name)
			rank0 := net.JoinHostPort(pods[0].Status.PodIP, "8080")
			eventually(t, time.Minute, "rank 0 progress endpoint", func() error {
				body, err := stacktest.Scrape(rank0)
				if err == nil && !strings.Contains(body, "training_epochs_total 6\n") {
					err = fmt.Errorf("no training_epochs_total 6 in:\n%s", body)
				}
				return err
			})

			eventually(t, time.Minute, "progress in status while training", func() error {
				tj := getTJ(t, ns, name)
				if c := condition(tj, mlv1.ConditionProgressReported); tj.Status.State == mlv1.StateRunning &&
					(tj.Status.Progress == "" || tj.Status.Metrics == nil || tj.Status.Metrics.Loss == nil ||
						c == nil || c.Status != metav1.ConditionTrue) {
					return fmt.Errorf("progress %q metrics %+v condition %+v", tj.Status.Progress, tj.Status.Metrics, c)
				} else if tj.Status.State != mlv1.StateRunning && tj.Status.Progress == "" {
					return fmt.Errorf("finished (%s) without ever showing progress", tj.Status.State)
				}
				return nil
			})
			got := waitForState(t, ns, name, mlv1.StateCompleted, 3*time.Minute)
			if got.Status.Progress != "100%" || got.Status.TotalEpochs != 6 || got.Status.Metrics == nil {
				t.Errorf("completed status: progress %q totalEpochs %d metrics %+v", got.Status.Progress, got.Status.TotalEpochs, got.Status.Metrics)
			}
			if got.Status.Workers.Succeeded != workers {
				t.Errorf("workers succeeded = %d, want %d", got.Status.Workers.Succeeded, workers)
			}
			assertLossFalls(t, rankLog(t, ns, name, 0), 1, 6)
			dir := runDir(t, "checkpoints", ns, name)
			for _, e := range []int{2, 4, 6} {
				if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("checkpoint-epoch-%d", e), "_COMPLETE")); err != nil {
					t.Errorf("checkpoint of epoch %d: %v", e, err)
				}
			}
			nodes := map[string]bool{}
			for _, p := range workerPods(t, ns, name) {
				nodes[p.Spec.NodeName] = true
				if p.Status.Phase != corev1.PodSucceeded {
					t.Errorf("pod %s phase %s, want Succeeded", p.Name, p.Status.Phase)
				}
			}
			t.Logf("%d ranks ran on nodes %v", workers, nodes)
		})
	}
}

// TestKilledRankFailsTheJob: a rank's process killed with SIGKILL makes its pod Failed with exit code
// 137, and the TrainingJob Failed naming it (restarts are off: restartPolicy Never, backoffLimit 0).
func TestKilledRankFailsTheJob(t *testing.T) {
	ns, name := newNamespace(t), "killed"
	create(t, trainerJob(ns, name, 2, 100000, "--epoch-delay=50ms").BackoffLimit(0, mlv1.RestartNever).Obj())
	pids := runningPIDs(t, ns, name, 2)
	if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	tj := waitForState(t, ns, name, mlv1.StateFailed, 2*time.Minute)
	pod := workerPods(t, ns, name)[1]
	eventually(t, time.Minute, "rank 1 pod Failed", func() error {
		pod = workerPods(t, ns, name)[1]
		if pod.Status.Phase != corev1.PodFailed {
			return fmt.Errorf("phase %s", pod.Status.Phase)
		}
		return nil
	})
	term := pod.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 137 {
		t.Fatalf("rank 1 container state = %+v, want terminated with exit code 137", pod.Status.ContainerStatuses[0].State)
	}
	if !strings.Contains(tj.Status.FailureReason, "rank 1 (pod "+pod.Name+", container trainer) exited with code 137") {
		t.Errorf("failureReason %q does not name rank 1 and exit code 137 (rank 0 exits 1 after losing its peer)", tj.Status.FailureReason)
	}
	c := condition(tj, mlv1.ConditionFailed)
	if c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Failed condition = %+v", c)
	}
	t.Logf("failureReason: %s", tj.Status.FailureReason)
}

// TestCrashReasonQuotesTheError: a trainer that exits with an error has the end of its log in
// failureReason (terminationMessagePolicy FallbackToLogsOnError), so the user reads why without kubectl logs.
func TestCrashReasonQuotesTheError(t *testing.T) {
	ns, name := newNamespace(t), "crash"
	create(t, trainerJob(ns, name, 1, 5, "--epochs=many").BackoffLimit(0, mlv1.RestartNever).Obj())
	tj := waitForState(t, ns, name, mlv1.StateFailed, 2*time.Minute)
	r := tj.Status.FailureReason
	if !strings.Contains(r, `rank 0 (pod `+workerPods(t, ns, name)[0].Name+`, container trainer) exited with code 1: `) ||
		!strings.HasSuffix(r, "\n"+`trainer: invalid value "many" for flag -epochs: parse error`) {
		t.Errorf("failureReason %q does not end with the trainer's last log line", r)
	}
}

// TestDeletingTheJobKillsItsProcesses: deleting a running TrainingJob removes its Job, Service,
// ConfigMap and pods (garbage collector) and the process node kills the pods' processes.
func TestDeletingTheJobKillsItsProcesses(t *testing.T) {
	ns, name := newNamespace(t), "deleted"
	tj := trainerJob(ns, name, 2, 100000, "--epoch-delay=50ms").Obj()
	create(t, tj)
	pids := runningPIDs(t, ns, name, 2)
	waitForState(t, ns, name, mlv1.StateRunning, time.Minute)
	if err := stack.Client.Delete(ctx, tj); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "processes gone", func() error {
		for r, pid := range pids {
			if processAlive(pid) {
				return fmt.Errorf("rank %d (pid %d) still runs", r, pid)
			}
		}
		return nil
	})
	eventually(t, 2*time.Minute, "children gone", func() error {
		for _, o := range []client.Object{&batchv1.Job{}, &corev1.Service{}, &corev1.ConfigMap{}} {
			key := client.ObjectKey{Namespace: ns, Name: childName(name, o)}
			if err := stack.Client.Get(ctx, key, o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s still exists (%v)", o, key.Name, err)
			}
		}
		if n := len(workerPods(t, ns, name)); n != 0 {
			return fmt.Errorf("%d pods left", n)
		}
		return nil
	})
}

func childName(tj string, o client.Object) string {
	t := &mlv1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: tj}}
	switch o.(type) {
	case *batchv1.Job:
		return names.JobName(t)
	case *corev1.Service:
		return names.ServiceName(t)
	}
	return names.ConfigMapName(t)
}

func condition(tj *mlv1.TrainingJob, typ string) *metav1.Condition {
	for i := range tj.Status.Conditions {
		if tj.Status.Conditions[i].Type == typ {
			return &tj.Status.Conditions[i]
		}
	}
	return nil
}

// TestPythonProgressHelper runs examples/python/train.py as a 2-rank TrainingJob: rank 0 serves the
// progress series through trainingjob_progress.py and the loss falls.
func TestPythonProgressHelper(t *testing.T) {
	ns, name := newNamespace(t), "python"
	create(t, trainerJob(ns, name, 2, 5).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Command = []string{"python3", "examples/python/train.py"}
		tj.Spec.Args = []string{"--epoch-delay=0.5", "--samples=1000"}
		tj.Spec.Hyperparameters.LearningRate = ptr.To(0.0005)
	}).Obj())
	runningPIDs(t, ns, name, 2)
	rank0 := net.JoinHostPort(workerPods(t, ns, name)[0].Status.PodIP, "8080")
	var body string
	eventually(t, time.Minute, "python rank 0 progress", func() error {
		var err error
		body, err = stacktest.Scrape(rank0)
		if err == nil && !strings.Contains(body, "training_loss ") {
			err = fmt.Errorf("no training_loss yet:\n%s", body)
		}
		return err
	})
	for _, series := range []string{"training_epochs_total 5.0", "training_learning_rate 0.0005", "training_weight "} {
		if !strings.Contains(body, series) {
			t.Errorf("progress lacks %q:\n%s", series, body)
		}
	}
	waitForState(t, ns, name, mlv1.StateCompleted, 2*time.Minute)
	assertLossFalls(t, rankLog(t, ns, name, 0), 1, 5)
	if log := rankLog(t, ns, name, 1); strings.Contains(log, "epoch") {
		t.Errorf("rank 1 printed progress; only rank 0 should:\n%s", log)
	}
}
