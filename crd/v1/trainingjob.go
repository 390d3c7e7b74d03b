package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TrainingJob is one distributed training run: workers, rendezvous, hyperparameters, checkpoints and progress.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tj,categories=ml
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Progress",type=string,JSONPath=`.status.progress`
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.status.currentEpoch`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Workers",type=integer,JSONPath=`.status.workers.active`,priority=1
// +kubebuilder:printcolumn:name="Loss",type=string,JSONPath=`.status.metrics.display.loss`,priority=1
// +kubebuilder:printcolumn:name="Accuracy",type=string,JSONPath=`.status.metrics.display.accuracy`,priority=1
// +kubebuilder:printcolumn:name="ETA",type=string,JSONPath=`.status.eta`,priority=1
// +kubebuilder:printcolumn:name="Restarts",type=integer,JSONPath=`.status.restartCount`,priority=1
// +kubebuilder:printcolumn:name="Goodput",type=string,JSONPath=`.status.goodput.percent`,priority=1
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.status.clusterName`,priority=1
// +kubebuilder:printcolumn:name="MLflow",type=string,JSONPath=`.status.mlflow.url`,priority=1
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 52",message="metadata.name must be a DNS-1035 label of at most 52 characters (it names the workers' host names)"
// +gen-api:begin=immutable-while-running (hack/gen-api writes these rules from its table immutableWhileRunning)
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.state) || !(oldSelf.status.state in ['Initializing','Running']) || (has(self.spec.model) == has(oldSelf.spec.model) && (!has(self.spec.model) || self.spec.model == oldSelf.spec.model))",message="spec.model is immutable while the job is Initializing or Running; suspend it first",fieldPath=".spec.model"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.state) || !(oldSelf.status.state in ['Initializing','Running']) || (has(self.spec.dataset) == has(oldSelf.spec.dataset) && (!has(self.spec.dataset) || self.spec.dataset == oldSelf.spec.dataset))",message="spec.dataset is immutable while the job is Initializing or Running; suspend it first",fieldPath=".spec.dataset"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.state) || !(oldSelf.status.state in ['Initializing','Running']) || (self.spec.numWorkers == oldSelf.spec.numWorkers) || (has(self.spec.elastic) && has(oldSelf.spec.elastic))",message="spec.numWorkers is immutable while the job is Initializing or Running, unless it is elastic; suspend it first",fieldPath=".spec.numWorkers"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.state) || !(oldSelf.status.state in ['Initializing','Running']) || (has(self.spec.elastic) == has(oldSelf.spec.elastic) && (!has(self.spec.elastic) || self.spec.elastic == oldSelf.spec.elastic))",message="spec.elastic is immutable while the job is Initializing or Running; suspend it first",fieldPath=".spec.elastic"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.state) || !(oldSelf.status.state in ['Initializing','Running']) || (has(self.spec.gpusPerWorker) == has(oldSelf.spec.gpusPerWorker) && (!has(self.spec.gpusPerWorker) || self.spec.gpusPerWorker == oldSelf.spec.gpusPerWorker))",message="spec.gpusPerWorker is immutable while the job is Initializing or Running; suspend it first",fieldPath=".spec.gpusPerWorker"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.state) || !(oldSelf.status.state in ['Initializing','Running']) || (has(self.spec.framework) == has(oldSelf.spec.framework) && (!has(self.spec.framework) || self.spec.framework == oldSelf.spec.framework))",message="spec.framework is immutable while the job is Initializing or Running; suspend it first",fieldPath=".spec.framework"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.state) || !(oldSelf.status.state in ['Initializing','Running']) || (has(self.spec.image) == has(oldSelf.spec.image) && (!has(self.spec.image) || self.spec.image == oldSelf.spec.image))",message="spec.image is immutable while the job is Initializing or Running; suspend it first",fieldPath=".spec.image"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.state) || !(oldSelf.status.state in ['Initializing','Running']) || (has(self.spec.command) == has(oldSelf.spec.command) && (!has(self.spec.command) || self.spec.command == oldSelf.spec.command))",message="spec.command is immutable while the job is Initializing or Running; suspend it first",fieldPath=".spec.command"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.state) || !(oldSelf.status.state in ['Initializing','Running']) || (has(self.spec.args) == has(oldSelf.spec.args) && (!has(self.spec.args) || self.spec.args == oldSelf.spec.args))",message="spec.args is immutable while the job is Initializing or Running; suspend it first",fieldPath=".spec.args"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.state) || !(oldSelf.status.state in ['Initializing','Running']) || (has(self.spec.hyperparameters) == has(oldSelf.spec.hyperparameters) && (!has(self.spec.hyperparameters) || self.spec.hyperparameters == oldSelf.spec.hyperparameters))",message="spec.hyperparameters is immutable while the job is Initializing or Running; suspend it first",fieldPath=".spec.hyperparameters"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.state) || !(oldSelf.status.state in ['Initializing','Running']) || (has(self.spec.networking) == has(oldSelf.spec.networking) && (!has(self.spec.networking) || self.spec.networking == oldSelf.spec.networking))",message="spec.networking is immutable while the job is Initializing or Running; suspend it first",fieldPath=".spec.networking"
// +gen-api:end
type TrainingJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the training run the user asks for.
	// +required
	Spec TrainingJobSpec `json:"spec"`

	// status is what the operator observes of the run.
	// +optional
	Status TrainingJobStatus `json:"status,omitempty"`
}

// TrainingJobList is a list of TrainingJobs.
//
// +kubebuilder:object:root=true
type TrainingJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TrainingJob `json:"items"`
}
