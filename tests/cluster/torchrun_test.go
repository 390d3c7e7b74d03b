//go:build cluster

package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/images"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// allReduce is the script torchrun starts in every process: a gloo all-reduce of rank+1 over the whole
// world, whose sum every process prints and checks.
const allReduce = `import sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
sys.stdout.write(f"rank {rank} of {world}: all_reduce sum {t.item():g}\n")  # one write: the processes share stdout
assert t.item() == world * (world + 1) / 2, t
dist.destroy_process_group()
`

// TestTorchrunOnRunnerImage: torchrun, as a user writes it (no PET_REDIRECTS, PET_TEE or other variable of
// their own), on the default runner image: Debian's torch 1.13 on Python 3.11, whose torchrun dies at once
// unless hack/rootfs.sh patches its Std.from_str (see there). Two pods of two processes each, on two
// nodes (the operator's PET_* variables make the pods torchrun's nodes), all-reduce over gloo; the job
// completes and every one of the four processes printed the sum.
func TestTorchrunOnRunnerImage(t *testing.T) {
	ns := stacktest.NewNamespace(t, stack.Client, "torchrun")
	script, tj := scriptJob(ns, "torchrun", 2, "allreduce.py", allReduce, "torchrun", "--nproc_per_node=2", "/scripts/allreduce.py")
	spread(tj)
	stacktest.Create(t, stack.Client, script, tj)
	done := waitForEnd(t, ns, tj.Name, 4*time.Minute)
	pods := workerPods(t, ns, tj.Name, 0)
	var log string
	for _, p := range pods {
		for _, c := range p.Spec.Containers {
			for _, e := range c.Env {
				if c.Name == names.ContainerName && (e.Name == "PET_REDIRECTS" || e.Name == "PET_TEE") {
					t.Errorf("pod %s sets %s=%s: torchrun must run with its defaults", p.Name, e.Name, e.Value)
				}
			}
		}
		log += kubectl(t, "logs", "-n", ns, p.Name, "-c", names.ContainerName)
	}
	if done.Status.State != mlv1.StateCompleted {
		t.Fatalf("state %s: %s\n%s", done.Status.State, done.Status.FailureReason, log)
	}
	for rank := range 4 {
		if want := fmt.Sprintf("rank %d of 4: all_reduce sum 10\n", rank); !strings.Contains(log, want) {
			t.Errorf("the ranks' logs lack %q:\n%s", want, log)
		}
	}
}

// scriptJob returns a job of workers on the runner image running command on a script of one's own, file in a
// ConfigMap mounted at /scripts, with nothing else of its own: no checkpoints, no retry.
func scriptJob(ns, name string, workers int32, file, text string, command ...string) (*corev1.ConfigMap, *mlv1.TrainingJob) {
	script := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-script"}, Data: map[string]string{file: text}}
	tj := tjtest.NewTJ(ns, name).Workers(workers).GPUs(0).BackoffLimit(0, mlv1.RestartNever).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Image = images.Runner
		tj.Spec.Command, tj.Spec.Args = command, nil
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(false)}
		tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{
			Volumes: []corev1.Volume{{Name: "scripts", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: script.Name}}}}},
			VolumeMounts: []corev1.VolumeMount{{Name: "scripts", MountPath: "/scripts", ReadOnly: true}},
		}
	}).Obj()
	return script, tj
}
