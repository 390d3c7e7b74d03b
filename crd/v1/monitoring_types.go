package v1

// MonitoringSpec configures progress reporting.
// +kubebuilder:validation:XValidation:rule="!has(self.metricsPort) || self.metricsPort != 8084 || (has(self.progressFromOutput) && !self.progressFromOutput)",message="monitoring.metricsPort 8084 is the supervisor's port (set progressFromOutput false to use it)"
type MonitoringSpec struct {
	// enabled turns on progress scraping from rank 0.
	// +optional
	// +kubebuilder:default=true
	Enabled *bool `json:"enabled,omitempty"`

	// metricsPort is the port on which rank 0 serves Prometheus metrics; passed to workers as METRICS_PORT.
	// +optional
	// +kubebuilder:default=8080
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	MetricsPort int32 `json:"metricsPort,omitempty"`

	// progressFromOutput runs the trainer's command under the operator's supervisor, which passes its
	// output through and recognises progress in it (tqdm bars, common frameworks' logs, progressPattern).
	// Rank 0's own endpoint on metricsPort wins when it serves one.
	// +optional
	// +kubebuilder:default=true
	ProgressFromOutput *bool `json:"progressFromOutput,omitempty"`

	// progressPattern is an RE2 expression tried on every line of rank 0's output before the built-in
	// formats, with named groups among epoch, epochs, step, steps, loss, accuracy, lr and throughput.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ProgressPattern string `json:"progressPattern,omitempty"`

	// scrapeIntervalSeconds is how often the operator reads rank 0's progress; the operator's
	// --progress-interval when unset.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	ScrapeIntervalSeconds *int32 `json:"scrapeIntervalSeconds,omitempty"`

	// tensorboardEnabled gives the workers TENSORBOARD_LOG_DIR, a directory on the job's checkpoint storage
	// for TensorBoard event files. It needs checkpoint.enabled.
	// +optional
	TensorboardEnabled *bool `json:"tensorboardEnabled,omitempty"`

	// mlflowTrackingUri is the MLflow tracking server where the operator keeps one run per TrainingJob, for
	// example http://mlflow.mlflow:5000; the operator's --mlflow-tracking-uri when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^https?://[^/?#@]+`
	// +kubebuilder:validation:XValidation:rule="!self.contains('?') && !self.contains('#') && !self.matches('^https?://[^/]*@')",message="monitoring.mlflowTrackingUri must be http(s)://HOST[:PORT][/PATH] with no query, fragment or user info"
	MLflowTrackingURI string `json:"mlflowTrackingUri,omitempty"`

	// mlflowExperiment is the MLflow experiment of the job's run; the job's namespace when empty. It is
	// created when it does not exist.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=500
	MLflowExperiment string `json:"mlflowExperiment,omitempty"`

	// mlflowCredentialsSecret names a Secret in the job's namespace with the tracking server's credentials
	// (MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD), for the operator
	// and the workers; the operator's --mlflow-credentials-secret when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	MLflowCredentialsSecret string `json:"mlflowCredentialsSecret,omitempty"`

	// wandbProject is the Weights & Biases project the workers log to (WANDB_PROJECT), one run group per
	// job.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	WandbProject string `json:"wandbProject,omitempty"`
}
