package v1

// SuccessPolicy ends a run early when a target is reached.
type SuccessPolicy struct {
	// targetAccuracy completes the run when rank 0 reports accuracy at or above it (0 to 1).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	TargetAccuracy *float64 `json:"targetAccuracy,omitempty"`

	// targetLoss completes the run when rank 0 reports loss at or below it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TargetLoss *float64 `json:"targetLoss,omitempty"`

	// earlyStoppingPatience completes the run after this many epochs without improvement.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	EarlyStoppingPatience *int32 `json:"earlyStoppingPatience,omitempty"`
}
