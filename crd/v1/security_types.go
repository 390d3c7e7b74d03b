package v1

// WorkerSecurityContext is the identity of the workers.
// +kubebuilder:validation:XValidation:rule="!has(self.runAsNonRoot) || !self.runAsNonRoot || !has(self.runAsUser) || self.runAsUser != 0",message="securityContext.runAsUser 0 is root, which runAsNonRoot forbids",fieldPath=".runAsUser"
type WorkerSecurityContext struct {
	// runAsUser is the user ID the workers run as.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RunAsUser *int64 `json:"runAsUser,omitempty"`

	// runAsGroup is the group ID the workers run as.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RunAsGroup *int64 `json:"runAsGroup,omitempty"`

	// runAsNonRoot refuses to start a worker whose user is root (the Pod Security "restricted" level needs it).
	// +optional
	RunAsNonRoot *bool `json:"runAsNonRoot,omitempty"`

	// fsGroup owns the pods' volumes (the checkpoint claim included), so a non-root user can write them.
	// +optional
	// +kubebuilder:validation:Minimum=0
	FSGroup *int64 `json:"fsGroup,omitempty"`
}
