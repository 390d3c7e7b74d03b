package v1

// CleanPodPolicy decides which worker pods are deleted when the run ends.
// +kubebuilder:validation:Enum=All;Running;None
type CleanPodPolicy string

// Clean pod policies.
const (
	CleanPodsAll     CleanPodPolicy = "All"
	CleanPodsRunning CleanPodPolicy = "Running"
	CleanPodsNone    CleanPodPolicy = "None"
)

// CleanupPolicy decides what is removed after the run ends.
type CleanupPolicy struct {
	// cleanPodPolicy is which worker pods are deleted when the run ends: Running (default: those still
	// running; finished ones stay for their logs), All or None.
	// +optional
	// +kubebuilder:default=Running
	CleanPodPolicy CleanPodPolicy `json:"cleanPodPolicy,omitempty"`

	// ttlSecondsAfterFinished removes the run's Job, pods, Service and ConfigMap this long after it
	// completed or failed; unset keeps them. The checkpoint claim and the checkpoints stay.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// deleteTrainingJob also deletes the TrainingJob itself when ttlSecondsAfterFinished has passed.
	// +optional
	DeleteTrainingJob bool `json:"deleteTrainingJob,omitempty"`
}
