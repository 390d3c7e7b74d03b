package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Resources are a worker's compute requests and limits, as in a container's resources.
type Resources struct {
	// limits are the most a worker may use, for example cpu, memory and nvidia.com/gpu.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Limits map[corev1.ResourceName]resource.Quantity `json:"limits,omitempty"`

	// requests are what a worker is guaranteed and scheduled by.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Requests map[corev1.ResourceName]resource.Quantity `json:"requests,omitempty"`

	// sharedMemory is the size of the in-memory volume every worker gets at /dev/shm; "0" turns it off.
	// Unset: half the worker's memory limit, or without one the cluster's default. It counts against the
	// pod's memory.
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('0')) >= 0",message="resources.sharedMemory must not be negative"
	SharedMemory *resource.Quantity `json:"sharedMemory,omitempty"`
}
