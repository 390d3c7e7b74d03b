package node

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestGPUAllocator: containers get the node's GPUs by its resource name, one owner per GPU, and a
// container that asked for none (or for another resource) sees no GPU at all.
func TestGPUAllocator(t *testing.T) {
	limit := func(name corev1.ResourceName, n int64) *corev1.Container {
		return &corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{name: *resource.NewQuantity(n, resource.DecimalSI)},
		}}
	}
	none := map[string]string{"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "void"}
	g := newGPUAllocator("amd.com/gpu", 3)
	got := []map[string]string{
		g.env("pod-a", limit("amd.com/gpu", 2)),
		g.env("pod-a", limit("amd.com/gpu", 2)), // asked again (a restart): the same GPUs
		g.env("pod-b", limit("amd.com/gpu", 1)),
		g.env("pod-c", &corev1.Container{Name: "c"}),
		g.env("pod-d", limit("nvidia.com/gpu", 1)),
	}
	want := []map[string]string{
		{"CUDA_VISIBLE_DEVICES": "0,1", "NVIDIA_VISIBLE_DEVICES": "0,1"},
		{"CUDA_VISIBLE_DEVICES": "0,1", "NVIDIA_VISIBLE_DEVICES": "0,1"},
		{"CUDA_VISIBLE_DEVICES": "2", "NVIDIA_VISIBLE_DEVICES": "2"},
		none,
		none,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("visibility env (-want +got):\n%s", diff)
	}
	g.release("pod-a")
	wantAfter := map[string]string{"CUDA_VISIBLE_DEVICES": "0", "NVIDIA_VISIBLE_DEVICES": "0"}
	if diff := cmp.Diff(wantAfter, g.env("pod-e", limit("amd.com/gpu", 1))); diff != "" {
		t.Errorf("after release (-want +got):\n%s", diff)
	}
	if newGPUAllocator("", 1).resource != "nvidia.com/gpu" {
		t.Error("the default resource is not nvidia.com/gpu")
	}
}
