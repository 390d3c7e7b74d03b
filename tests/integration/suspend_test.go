package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

func patchTJ(t *testing.T, key client.ObjectKey, f func(*mlv1.TrainingJob)) {
	t.Helper()
	eventually(t, "patching the TrainingJob", func(ctx context.Context) error {
		tj := &mlv1.TrainingJob{}
		if err := env.Client.Get(ctx, key, tj); err != nil {
			return err
		}
		patch := client.MergeFrom(tj.DeepCopy())
		f(tj)
		return env.Client.Patch(ctx, tj, patch)
	})
}

func getJob(t *testing.T, tj *mlv1.TrainingJob) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{}
	eventually(t, "the workers' Job", func(ctx context.Context) error {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: tj.Namespace, Name: names.JobName(tj)}, job)
	})
	return job
}

// TestQueuedWithoutKueue: a job that names a queue in a cluster without Kueue's API stays Pending and
// says why (CreateRejected naming Kueue and what to do), with no Job: it never runs unadmitted, and never
// waits in silence. The jobs admitted by a real Kueue are tested in tests/kueue.
func TestQueuedWithoutKueue(t *testing.T) {
	ctx := context.Background()
	ns := startStack(t)
	tj := tjtest.NewTJ(ns, "queued").GPUs(0).Image("busybox:1.36", "train").Label(names.QueueLabel, "team-a").Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tj)
	eventually(t, "Created=False CreateRejected naming Kueue", func(ctx context.Context) error {
		got := &mlv1.TrainingJob{}
		if err := env.Client.Get(ctx, key, got); err != nil {
			return err
		}
		c := condition(got, mlv1.ConditionCreated)
		const want = `queue "team-a" named, but this cluster does not serve Kueue's Workload API`
		if got.Status.State != mlv1.StatePending || c.Reason != "CreateRejected" || !strings.Contains(c.Message, want) {
			return fmt.Errorf("state %s, Created %s: %s", got.Status.State, c.Reason, c.Message)
		}
		return nil
	})
	job := &batchv1.Job{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: names.JobName(tj)}, job); err == nil {
		t.Errorf("a Job exists for a job no queue admitted")
	}
}

// TestEditWhileSuspendedAppliesOnResume: a running job is suspended (its pods go), edited, and resumed:
// the workers run the edited spec.
func TestEditWhileSuspendedAppliesOnResume(t *testing.T) {
	ns := startStack(t)
	tj := tjtest.NewTJ(ns, "edit").GPUs(0).Epochs(5).Image("busybox:1.36", "train").Obj()
	if err := env.Client.Create(context.Background(), tj); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tj)
	for _, p := range workerPods(t, tj, 2) {
		setPodStatus(t, &p, corev1.PodRunning, running(), 0)
	}
	waitForState(t, key, mlv1.StateRunning)

	patchTJ(t, key, func(tj *mlv1.TrainingJob) { tj.Spec.Suspend = ptr.To(true) })
	waitForState(t, key, mlv1.StateSuspended)
	workerPods(t, tj, 0)
	patchTJ(t, key, func(tj *mlv1.TrainingJob) {
		tj.Spec.NumWorkers = 3
		tj.Spec.Hyperparameters.Epochs = ptr.To[int32](7)
	})
	patchTJ(t, key, func(tj *mlv1.TrainingJob) { tj.Spec.Suspend = ptr.To(false) })
	workerPods(t, tj, 3)
	waitForState(t, key, mlv1.StateInitializing)
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: names.ConfigMapName(tj)}, cm); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cm.Data[names.ConfigFileName], `"epochs": 7`) {
		t.Errorf("config.json not updated: %s", cm.Data[names.ConfigFileName])
	}
}

// TestWhyWorkersDoNotRun: the Running condition names why workers wait (unschedulable, a missing Secret),
// as the kubelet and scheduler report it on the pods.
func TestWhyWorkersDoNotRun(t *testing.T) {
	ns := startStack(t)
	for _, tc := range []struct {
		name, reason, inMessage string
		status                  func(*corev1.PodStatus)
	}{
		{name: "unschedulable", reason: "Unschedulable", inMessage: "Insufficient nvidia.com/gpu", status: func(s *corev1.PodStatus) {
			s.Phase = corev1.PodPending
			s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: corev1.PodReasonUnschedulable, Message: "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}}
		}},
		{
			name:      "missing-secret",
			reason:    "CreateContainerConfigError",
			inMessage: `secret "hf" not found`,
			status: func(s *corev1.PodStatus) {
				s.Phase = corev1.PodPending
				s.ContainerStatuses = []corev1.ContainerStatus{{Name: names.ContainerName, Image: "busybox:1.36",
					State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError",
						Message: `secret "hf" not found`}}}}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ(ns, tc.name).Workers(1).GPUs(0).Image("busybox:1.36", "train").Obj()
			if err := env.Client.Create(context.Background(), tj); err != nil {
				t.Fatal(err)
			}
			pod := workerPods(t, tj, 1)[0]
			eventually(t, "pod status", func(ctx context.Context) error {
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(&pod), &pod); err != nil {
					return err
				}
				tc.status(&pod.Status)
				return env.Client.Status().Update(ctx, &pod)
			})
			eventually(t, "the reason in the Running condition", func(ctx context.Context) error {
				got := &mlv1.TrainingJob{}
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tj), got); err != nil {
					return err
				}
				c := condition(got, mlv1.ConditionRunning)
				r, m := c.Reason, c.Message
				if got.Status.State != mlv1.StateInitializing || r != tc.reason || !strings.Contains(m, tc.inMessage) {
					return fmt.Errorf("state %s, Running condition %s: %s", got.Status.State, r, m)
				}
				reasons, err := eventReasons(ctx, got)
				if err != nil || !slices.Contains(reasons, "Warning/"+tc.reason) {
					return fmt.Errorf("events %v (%v), want a Warning %s", reasons, err, tc.reason)
				}
				return nil
			})
		})
	}
}
