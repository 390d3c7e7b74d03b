//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/images"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// dataLoader is a PyTorch DataLoader with 2 worker processes handing the trainer 96 MiB batches, more than
// a container runtime's 64 MiB /dev/shm holds.
const dataLoader = `
import os, torch
from torch.utils.data import DataLoader, Dataset
st = os.statvfs('/dev/shm')
print('shm MiB', st.f_blocks * st.f_frsize // 2**20, flush=True)
class Big(Dataset):
    def __len__(self): return 6
    def __getitem__(self, i): return torch.full((24 * 2**20,), float(i))  # 96 MiB of float32
total = 0.0
for batch in DataLoader(Big(), batch_size=None, num_workers=2):
    total += float(batch[0])
print('loaded 6 batches of 96 MiB, sum', total, flush=True)
`

// TestSharedMemoryForDataLoaders: a DataLoader with worker processes and 96 MiB batches completes with the
// /dev/shm every worker gets, and with it turned off (resources.sharedMemory 0: the runtime's 64 MiB) dies
// of a bus error, which the failure names with the field that fixes it.
func TestSharedMemoryForDataLoaders(t *testing.T) {
	ns := stacktest.NewNamespace(t, stack.Client, "shm")
	job := func(name string, shm *resource.Quantity) *mlv1.TrainingJob {
		return tjtest.NewTJ(ns, name).Workers(1).GPUs(0).With(func(tj *mlv1.TrainingJob) {
			tj.Spec.Image, tj.Spec.Command, tj.Spec.Args = images.MPIExamples, []string{"python3", "-c", dataLoader}, nil
			tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(false)}
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{BackoffLimit: ptr.To[int32](0)}
			tj.Spec.Resources = &mlv1.Resources{SharedMemory: shm}
		}).Obj()
	}
	zero := resource.MustParse("0")
	stacktest.Create(t, stack.Client, job("with-shm", nil), job("without-shm", &zero))
	with := waitForEnd(t, ns, "with-shm", 4*time.Minute)
	if with.Status.State != mlv1.StateCompleted {
		t.Errorf("with /dev/shm: state %s: %s", with.Status.State, with.Status.FailureReason)
	}
	log := kubectl(t, "logs", "-n", ns, workerPods(t, ns, "with-shm", 0)["0"].Name, "-c", names.ContainerName)
	if !strings.Contains(log, "shm MiB 8192") || !strings.Contains(log, "loaded 6 batches") {
		t.Errorf("with /dev/shm, want 8 GiB of it and every batch loaded:\n%s", log)
	}
	without := waitForEnd(t, ns, "without-shm", 4*time.Minute)
	if without.Status.State != mlv1.StateFailed || !strings.Contains(without.Status.FailureReason, "raise resources.sharedMemory") {
		t.Errorf("without /dev/shm: state %s, reason %q: want Failed, naming resources.sharedMemory",
			without.Status.State, without.Status.FailureReason)
	}
	if note := eventNote(t, ns, "without-shm", string(mlv1.StateFailed)); !strings.Contains(note, "raise resources.sharedMemory") {
		t.Errorf("the Failed event %q does not name resources.sharedMemory", note)
	}
}

// eventNote returns the note of the newest event of reason about the TrainingJob ns/name, "" when none.
func eventNote(t *testing.T, ns, name, reason string) string {
	t.Helper()
	events := &eventsv1.EventList{}
	if err := stack.Client.List(context.Background(), events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var note string
	for _, e := range events.Items {
		if e.Reason == reason && e.Regarding.Name == name {
			note = e.Note
		}
	}
	return note
}

// readDataset reads the dataset the filler wrote, the W&B key from the Secret, and the ServiceAccount of
// the token mounted in the pod.
const readDataset = `
import base64, hashlib, json, os
data = open('/data/coco/annotations.json', 'rb').read()
print('dataset sha256', hashlib.sha256(data).hexdigest(), 'uid', os.getuid(), flush=True)
print('wandb key', os.environ.get('WANDB_API_KEY'), 'proxy', os.environ.get('TEAM_PROXY'), flush=True)
print('scratch', open('/scratch/ready').read().strip(), flush=True)
token = open('/var/run/secrets/kubernetes.io/serviceaccount/token').read().split('.')[1]
print('token subject', json.loads(base64.urlsafe_b64decode(token + '=' * (-len(token) % 4)))['sub'], flush=True)
try:
    open('/data/coco/new', 'w')
    print('dataset writable', flush=True)
except OSError as e:
    print('dataset read-only:', e.strerror, flush=True)
`

// TestWorkerPodOverrides: a team's job on real nodes, as the Kubeflow guides write it: it reads, as a
// non-root user, a dataset from a claim a previous pod filled (mounted read-only at /data), its W&B key from
// a Secret, and runs as its ServiceAccount (its pods carry it, read from the API and from the token the
// kubelet mounted) with the Istio annotation; the cluster's worker defaults (the chart's workerDefaults)
// apply beneath its own label and are named in an event. Its init container prepares a volume as that user;
// its sidecar, which never exits by itself, does not keep the pod from completing.
func TestWorkerPodOverrides(t *testing.T) {
	ctx := context.Background()
	ns := stacktest.NewNamespace(t, stack.Client, "team")
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coco"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	filler := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fill-coco"}, Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "fill", Image: images.MPIExamples, ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"bash", "-c",
				"mkdir -p /data/coco && head -c 1048576 /dev/zero > /data/coco/annotations.json && chmod -R a+rX /data/coco"},
			VolumeMounts: []corev1.VolumeMount{{Name: "coco", MountPath: "/data"}}}},
		Volumes: []corev1.Volume{{Name: "coco", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "coco"}}}}}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wandb"},
		StringData: map[string]string{"WANDB_API_KEY": "key-of-team-a"}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "trainer"}}
	stacktest.Create(t, stack.Client, claim, secret, sa, filler)
	stacktest.Eventually(t, 3*time.Minute, "the filler pod succeeds", func() error {
		p := &corev1.Pod{}
		if err := stack.Client.Get(ctx, client.ObjectKeyFromObject(filler), p); err != nil || p.Status.Phase != corev1.PodSucceeded {
			return fmt.Errorf("filler %s (%v)", p.Status.Phase, err)
		}
		return nil
	})

	tj := tjtest.NewTJ(ns, "detector").Workers(1).GPUs(0).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Image, tj.Spec.Command, tj.Spec.Args = images.MPIExamples, []string{"python3", "-c", readDataset}, nil
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(false)}
		tj.Spec.SecurityContext = &mlv1.WorkerSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000),
			RunAsGroup: ptr.To[int64](1000)}
		tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{
			Labels:             map[string]string{"cost-center": "vision"},
			Annotations:        map[string]string{"sidecar.istio.io/inject": "false"},
			ServiceAccountName: "trainer",
			Volumes: []corev1.Volume{{Name: "coco", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "coco", ReadOnly: true}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			VolumeMounts: []corev1.VolumeMount{{Name: "coco", MountPath: "/data", ReadOnly: true}, {Name: "scratch", MountPath: "/scratch"}},
			// An init container prepares the scratch volume; a sidecar runs until the trainer is done (it
			// never exits by itself: the pod completes only because the kubelet stops a native sidecar).
			InitContainers: []mlv1.WorkerContainer{{Name: "warm", Image: images.MPIExamples,
				Command:      []string{"bash", "-c", "echo warmed as $(id -u) > /scratch/ready"},
				VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}},
			Sidecars: []mlv1.WorkerContainer{{Name: "shipper", Image: images.MPIExamples,
				Command:      []string{"bash", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"},
				VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}},
			EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "wandb"}}}},
		}
	}).Obj()
	stacktest.Create(t, stack.Client, tj)
	done := waitForEnd(t, ns, tj.Name, 4*time.Minute)
	if done.Status.State != mlv1.StateCompleted {
		t.Fatalf("state %s: %s", done.Status.State, done.Status.FailureReason)
	}
	pod := workerPods(t, ns, tj.Name, 0)["0"]
	log := kubectl(t, "logs", "-n", ns, pod.Name, "-c", names.ContainerName)
	for _, want := range []string{
		"dataset sha256 30e14955ebf1352266dc2ff8067e68104607e750abb9d3b36582b8af909fcb58 uid 1000", // 1 MiB of zeros
		"wandb key key-of-team-a proxy " + defaultProxy, "token subject system:serviceaccount:" + ns + ":trainer",
		"dataset read-only: Read-only file system",
		"scratch warmed as 1000",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the trainer's log lacks %q:\n%s", want, log)
		}
	}
	type workerPod struct {
		ServiceAccountName, IstioInject, CostCenter, Billing string
	}
	gotPod := workerPod{
		ServiceAccountName: pod.Spec.ServiceAccountName,
		IstioInject:        pod.Annotations["sidecar.istio.io/inject"],
		CostCenter:         pod.Labels["cost-center"],
		Billing:            pod.Labels["billing"],
	}
	wantPod := workerPod{ServiceAccountName: "trainer", IstioInject: "false", CostCenter: "vision", Billing: "gpu"}
	if diff := cmp.Diff(wantPod, gotPod); diff != "" {
		t.Errorf("pod: annotations %v, labels %v: want trainer, the Istio annotation, the job's cost-center over the "+
			"cluster's, and the cluster's billing label (-want +got):\n%s", pod.Annotations, pod.Labels, diff)
	}
	applied := eventNote(t, ns, tj.Name, derive.ReasonWorkerDefaultsApplied)
	if !strings.Contains(applied, "labels billing") || !strings.Contains(applied, "env TEAM_PROXY") ||
		strings.Contains(applied, "cost-center") {
		t.Errorf("event %s: %q, want the cluster's billing label and TEAM_PROXY, not cost-center (the job's own)",
			derive.ReasonWorkerDefaultsApplied, applied)
	}
}
