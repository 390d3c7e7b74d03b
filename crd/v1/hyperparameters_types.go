package v1

// Optimizer is a training optimizer.
// +kubebuilder:validation:Enum=adam;sgd;adamw;rmsprop
type Optimizer string

// Hyperparameters of the training program.
type Hyperparameters struct {
	// learningRate is the optimizer's learning rate, a YAML number such as 0.001.
	// +optional
	// +kubebuilder:validation:ExclusiveMinimum=true
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	LearningRate *float64 `json:"learningRate,omitempty"`

	// batchSize is the per-worker batch size.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1048576
	BatchSize *int32 `json:"batchSize,omitempty"`

	// epochs is the number of passes over the dataset; progress is measured against it.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	Epochs *int32 `json:"epochs,omitempty"`

	// warmupSteps is the number of learning-rate warm-up steps.
	// +optional
	// +kubebuilder:validation:Minimum=0
	WarmupSteps *int32 `json:"warmupSteps,omitempty"`

	// gradientAccumulationSteps is the number of micro-batches accumulated per optimizer step.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	GradientAccumulationSteps *int32 `json:"gradientAccumulationSteps,omitempty"`

	// optimizer is one of adam, sgd, adamw or rmsprop.
	// +optional
	Optimizer Optimizer `json:"optimizer,omitempty"`

	// mixedPrecision turns on mixed-precision training.
	// +optional
	MixedPrecision *bool `json:"mixedPrecision,omitempty"`

	// additionalParams are free-form parameters passed through to the training program.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	AdditionalParams map[string]string `json:"additionalParams,omitempty"`
}
