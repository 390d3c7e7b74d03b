package v1

// ElasticSpec bounds an elastic PyTorch job.
// +kubebuilder:validation:XValidation:rule="self.minWorkers <= self.maxWorkers",message="elastic.minWorkers must not exceed elastic.maxWorkers",fieldPath=".minWorkers"
type ElasticSpec struct {
	// minWorkers is the fewest workers the run goes on with (torchrun's --nnodes MIN:MAX).
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	MinWorkers int32 `json:"minWorkers"`

	// maxWorkers is the most workers that may join (torchrun's --nnodes MIN:MAX).
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	MaxWorkers int32 `json:"maxWorkers"`

	// maxRestarts is how often torchrun restarts its workers after a failure or a change of membership
	// before it gives up (PET_MAX_RESTARTS).
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	MaxRestarts *int32 `json:"maxRestarts,omitempty"`
}
