package node

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// defaultGPUResource is the extended resource the node advertises for GPUs unless Options.GPUResource
// names another.
const defaultGPUResource corev1.ResourceName = "nvidia.com/gpu"

var nvidiaDevice = regexp.MustCompile(`^/dev/nvidia[0-9]+$`)

// hostGPUs counts the host's NVIDIA devices (/dev/nvidia0, /dev/nvidia1, ...).
func hostGPUs() int {
	matches, _ := filepath.Glob("/dev/nvidia*")
	n := 0
	for _, m := range matches {
		if nvidiaDevice.MatchString(m) {
			n++
		}
	}
	return n
}

// gpuAllocator hands GPU indices to containers that request the node's GPU resource, like a device
// plugin, and tells the process which ones through CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES. A
// container that requested none sees no GPU (both variables empty), as on a GPU node whose container
// runtime exposes only allocated devices: processes share the host, so without this a CPU-only job's
// framework would pick the host's GPUs.
type gpuAllocator struct {
	resource corev1.ResourceName
	mu       sync.Mutex
	owner    []string // pod UID per GPU index; "" when free
	held     map[string][]int
}

func newGPUAllocator(resource corev1.ResourceName, n int) *gpuAllocator {
	if resource == "" {
		resource = defaultGPUResource
	}
	return &gpuAllocator{resource: resource, owner: make([]string, n), held: map[string][]int{}}
}

// env allocates the container's GPUs (once per pod and container) and returns the visibility env.
func (g *gpuAllocator) env(podUID string, c *corev1.Container) map[string]string {
	q, ok := c.Resources.Limits[g.resource]
	if !ok || q.Value() == 0 {
		return map[string]string{"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "void"}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	key := podUID + "/" + c.Name
	ids := g.held[key]
	for i := range g.owner {
		if len(ids) >= int(q.Value()) {
			break
		}
		if g.owner[i] == "" {
			g.owner[i] = key
			ids = append(ids, i)
		}
	}
	g.held[key] = ids
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	v := strings.Join(s, ",")
	return map[string]string{"CUDA_VISIBLE_DEVICES": v, "NVIDIA_VISIBLE_DEVICES": v}
}

// release frees every GPU held by a pod's containers.
func (g *gpuAllocator) release(podUID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for key, ids := range g.held {
		if strings.HasPrefix(key, podUID+"/") {
			for _, i := range ids {
				g.owner[i] = ""
			}
			delete(g.held, key)
		}
	}
}

func (g *gpuAllocator) count() int { return len(g.owner) }
