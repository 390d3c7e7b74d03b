package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// TestWorkerPodOnProcessNodes: a job's workerPod works on the process nodes as on real nodes (tests/cluster's
// TestWorkerPodOverrides): a Secret's keys as environment, an init container preparing a volume the trainer
// mounts, and a sidecar that never exits by itself, which the node stops once the trainer is done.
func TestWorkerPodOnProcessNodes(t *testing.T) {
	ns := newNamespace(t)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wandb"},
		StringData: map[string]string{"WANDB_API_KEY": "key-of-team-b"}})
	tj := trainerJob(ns, "team", 1, 2, "--epoch-delay=10ms").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Command = []string{"sh", "-c", `echo "scratch $(cat /scratch/ready) key $WANDB_API_KEY" && exec trainer "$@"`, "sh"}
		scratch := []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
		tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{
			Labels:       map[string]string{"team": "b"},
			Volumes:      []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			VolumeMounts: scratch,
			EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "wandb"}}}},
			InitContainers: []mlv1.WorkerContainer{{Name: "warm", Image: "busybox:1.36",
				Command: []string{"sh", "-c", "echo warmed > /scratch/ready"}, VolumeMounts: scratch}},
			Sidecars: []mlv1.WorkerContainer{{Name: "shipper", Image: "busybox:1.36",
				Command: []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"}, VolumeMounts: scratch}},
		}
	}).Obj()
	create(t, tj)
	waitForState(t, ns, tj.Name, mlv1.StateCompleted, 2*time.Minute)
	if log := rankLog(t, ns, tj.Name, 0); !strings.Contains(log, "scratch warmed key key-of-team-b") {
		t.Errorf("rank 0's log lacks what the init container and the Secret gave it:\n%s", log)
	}
	if p := workerPods(t, ns, tj.Name)[0]; p == nil || p.Labels["team"] != "b" {
		t.Errorf("rank 0's pod %v lacks the job's label", p)
	}
}
