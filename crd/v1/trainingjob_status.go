package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// State is the phase of a TrainingJob.
// +kubebuilder:validation:Enum=Pending;Initializing;Running;Completed;Failed;Suspended
// +kubebuilder:validation:MaxLength=16
type State string

// States of a TrainingJob.
const (
	StatePending      State = "Pending"
	StateInitializing State = "Initializing"
	StateRunning      State = "Running"
	StateCompleted    State = "Completed"
	StateFailed       State = "Failed"
	StateSuspended    State = "Suspended"
)

// Condition types of a TrainingJob.
const (
	// ConditionCreated is True once the Job, Service and ConfigMap exist.
	ConditionCreated = "Created"
	// ConditionRunning is True while every worker runs.
	ConditionRunning = "Running"
	// ConditionCompleted is True when the run succeeded.
	ConditionCompleted = "Completed"
	// ConditionFailed is True when the run failed; its message says why.
	ConditionFailed = "Failed"
	// ConditionSuspended is True while the run is suspended.
	ConditionSuspended = "Suspended"
	// ConditionCheckpointClaimBound is True once the checkpoint claim the operator created is bound to a
	// volume; False says why it is not, with the claim's latest event (no default StorageClass,
	// ReadWriteMany unsupported, a provisioning error).
	ConditionCheckpointClaimBound = "CheckpointClaimBound"
	// ConditionCheckpointStorageReady is True while rank 0's checkpoint agent reaches the storage; False names
	// the storage error (unreachable, credentials) without failing the job.
	ConditionCheckpointStorageReady = "CheckpointStorageReady"
	// ConditionSuccessPolicyMet is True once rank 0's metrics meet spec.successPolicy (a target, or early
	// stopping); its reason and message become the Completed condition's.
	ConditionSuccessPolicyMet = "SuccessPolicyMet"
	// ConditionRestarting is True while the operator restarts the whole set of workers after a retryable
	// failure; its message names the rank, exit code and attempt.
	ConditionRestarting = "Restarting"
	// ConditionProgressReported is True while rank 0's progress endpoint answers; False says since when
	// progress is stale and why.
	ConditionProgressReported = "ProgressReported"
	// ConditionExperimentTracked is True while the job's MLflow run is kept in step (reason RunActive, or
	// RunClosed once its end is recorded); False names why the tracking server cannot be reached or
	// refuses (TrackingServerUnavailable, TrackingCredentialsInvalid, TrackingCredentialsMissing,
	// TrackingRequestRejected, TrackingURIInvalid) while the training goes on and the operator retries.
	ConditionExperimentTracked = "ExperimentTracked"
	// ConditionStalled is True while the run is hung: its workers all run but rank 0 reported no progress
	// within failurePolicy.startupTimeoutSeconds (reason NoProgressSinceStart), or its epoch and step stood
	// still for the stall timeout (reason ProgressStalled); failurePolicy.onHang says what follows.
	ConditionStalled = "Stalled"
	// ConditionInputsReady is True once the model and dataset sources the init container fetches are in
	// the input cache (reason Fetched, or Reused when an earlier attempt's copy was still current); False
	// while rank 0 fetches them (Fetching) or when a source failed (InputsFailed, naming it: a missing
	// bucket, a 403, a hub's 404, a full cache), which fails the run.
	ConditionInputsReady = "InputsReady"
)

// TrainingJobStatus is what the operator observes of the run.
type TrainingJobStatus struct {
	// state is Pending, Initializing, Running, Completed, Failed or Suspended.
	// +optional
	State State `json:"state,omitempty"`

	// conditions are the latest observations of the run's state.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the spec generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// progress is the share of epochs done, for example "45%".
	// +optional
	// +kubebuilder:validation:MaxLength=8
	Progress string `json:"progress,omitempty"`

	// currentEpoch is the epoch rank 0 last reported.
	// +optional
	CurrentEpoch int32 `json:"currentEpoch,omitempty"`

	// totalEpochs is the number of epochs the run will do.
	// +optional
	TotalEpochs int32 `json:"totalEpochs,omitempty"`

	// eta is the estimated time left, for example "12m30s".
	// +optional
	// +kubebuilder:validation:MaxLength=32
	ETA string `json:"eta,omitempty"`

	// metrics are the training metrics rank 0 last reported.
	// +optional
	Metrics *TrainingMetrics `json:"metrics,omitempty"`

	// workers counts the worker pods by phase.
	// +optional
	Workers WorkerCounts `json:"workers,omitempty"`

	// checkpoint describes the newest checkpoint.
	// +optional
	Checkpoint *CheckpointStatus `json:"checkpoint,omitempty"`

	// checkpointStorage is the storage the operator chose for checkpoints when spec.checkpoint.storage names
	// none (its default storage, or a claim <name>-checkpoints it creates), chosen once and kept.
	// +optional
	CheckpointStorage *CheckpointStorage `json:"checkpointStorage,omitempty"`

	// runID names this run's checkpoint history, set once to the job's UID (on a MultiKueue worker, to one
	// every copy of the manager's job shares): its checkpoints live under <namespace>/<name>/<runID>, so a
	// job created again under a deleted one's name starts fresh. Empty for a job created before run IDs,
	// whose checkpoints stay under <namespace>/<name>.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[0-9a-z-]*$`
	RunID string `json:"runID,omitempty"`
	// clusterName is the cluster the job runs on, as the operator there is named (its --cluster-name); on a
	// MultiKueue manager, the worker's, mirrored with the rest of the status.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	ClusterName string `json:"clusterName,omitempty"`

	// startTime is when the workers' Job started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// completionTime is when the run completed or failed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// duration is completionTime - startTime, for example "1h2m3s".
	// +optional
	Duration string `json:"duration,omitempty"`

	// failureReason says why the run failed, naming the rank and its exit code when known.
	// +optional
	FailureReason string `json:"failureReason,omitempty"`

	// restartCount is the number of restarts counted against failurePolicy.backoffLimit: gang restarts
	// after a retryable failure (restartPolicy Gang), or container restarts plus replaced pods (OnFailure).
	// +optional
	RestartCount int32 `json:"restartCount,omitempty"`

	// attempt is the index of the current set of workers: 0 first, one more at every gang restart,
	// disruptions included. The Job and pods of an attempt carry it as the ml.example.com/attempt label.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`

	// lastFailure describes the failure that caused the latest gang restart.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	LastFailure string `json:"lastFailure,omitempty"`

	// lastProgressTime is when rank 0's progress last moved: a new epoch or step (any new figure when it
	// reports neither).
	// +optional
	LastProgressTime *metav1.Time `json:"lastProgressTime,omitempty"`

	// currentStep is the training step rank 0 reported last.
	// +optional
	CurrentStep int64 `json:"currentStep,omitempty"`

	// avoidedNodes are the nodes the workers of later attempts are kept off (node affinity NotIn), and why;
	// at most failurePolicy.maxAvoidedNodes, oldest first.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	AvoidedNodes []AvoidedNode `json:"avoidedNodes,omitempty"`

	// lastFailureNode is the node of the rank whose failure caused the latest gang restart: a node that
	// holds the failing rank in two failed attempts in a row, different ranks each time, is avoided.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	LastFailureNode string `json:"lastFailureNode,omitempty"`

	// lastFailureTime is when the rank whose exit caused the latest gang restart ended, as its kubelet
	// reported it (to the second); unset when the restart had no such exit (a hang, a lost node).
	// +optional
	LastFailureTime *metav1.Time `json:"lastFailureTime,omitempty"`

	// inputs are the model and dataset sources fetched into the input cache, as rank 0's init container
	// last reported them.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=2
	Inputs []InputStatus `json:"inputs,omitempty"`

	// mlflow is the job's MLflow run, when monitoring tracks it (see monitoring.mlflowTrackingUri).
	// +optional
	MLflow *MLflowStatus `json:"mlflow,omitempty"`

	// best is the best value of the metric successPolicy.earlyStoppingPatience tracks, and its epoch.
	// +optional
	Best *BestMetric `json:"best,omitempty"`

	// goodput is where the job's wall time went since its creation: productive training and each kind of
	// badput, kept up to date while the job lives (docs/goodput.md).
	// +optional
	Goodput *GoodputStatus `json:"goodput,omitempty"`
}

// BestMetric is the best value seen of a tracked metric.
type BestMetric struct {
	// metric is loss or accuracy.
	// +kubebuilder:validation:Enum=loss;accuracy
	Metric string `json:"metric"`
	// value is the best value seen.
	Value float64 `json:"value"`
	// epoch is the epoch it was seen at.
	Epoch int32 `json:"epoch"`
}

// TrainingMetrics are metrics reported by rank 0.
type TrainingMetrics struct {
	// loss is the latest training loss.
	// +optional
	Loss *float64 `json:"loss,omitempty"`
	// accuracy is the latest accuracy, 0 to 1.
	// +optional
	Accuracy *float64 `json:"accuracy,omitempty"`
	// learningRate is the current learning rate.
	// +optional
	LearningRate *float64 `json:"learningRate,omitempty"`
	// throughput is samples per second.
	// +optional
	Throughput *float64 `json:"throughput,omitempty"`
	// gpuUtilization is the GPU utilisation in percent.
	// +optional
	GPUUtilization *float64 `json:"gpuUtilization,omitempty"`
	// custom holds other metrics rank 0 exposes, formatted as strings, by their names cut to 64 bytes.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 64 && size(self[k]) <= 32)",message="metrics.custom: names of at most 64 bytes, values of at most 32"
	Custom map[string]string `json:"custom,omitempty"`
	// epoch is the epoch rank 0 had reported when these metrics were read (0 when it reports no epochs). A
	// finished run's currentEpoch may be past it: the run ended between two reads.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Epoch int32 `json:"epoch,omitempty"`
	// display is loss and accuracy as a person reads them, for kubectl get's columns: "0.1569", "93.7%".
	// +optional
	Display *MetricsDisplay `json:"display,omitempty"`
}

// MetricsDisplay holds rounded figures.
type MetricsDisplay struct {
	// loss to 4 significant digits.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Loss string `json:"loss,omitempty"`
	// accuracy in percent, to 0.1.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Accuracy string `json:"accuracy,omitempty"`
}

// WorkerCounts counts worker pods.
type WorkerCounts struct {
	// active is the number of pods not yet finished.
	// +optional
	Active int32 `json:"active,omitempty"`
	// ready is the number of pods passing their readiness checks.
	// +optional
	Ready int32 `json:"ready,omitempty"`
	// succeeded is the number of pods that finished successfully.
	// +optional
	Succeeded int32 `json:"succeeded,omitempty"`
	// failed is the number of pods that failed.
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// pending is the number of pods waiting to be scheduled or started.
	// +optional
	Pending int32 `json:"pending,omitempty"`
}

// CheckpointStatus describes checkpoints.
type CheckpointStatus struct {
	// latest is the URI or path of the newest complete checkpoint.
	// +optional
	Latest string `json:"latest,omitempty"`
	// latestEpoch is the epoch of the newest complete checkpoint.
	// +optional
	LatestEpoch int32 `json:"latestEpoch,omitempty"`
	// count is the number of complete checkpoints kept.
	// +optional
	Count int32 `json:"count,omitempty"`
	// lastTime is when the newest checkpoint was written (to the microsecond: the lost work of a restart is
	// measured from it).
	// +optional
	LastTime *metav1.MicroTime `json:"lastTime,omitempty"`
	// sizeBytes is the size of the newest checkpoint.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// resumedFrom is the checkpoint the current attempt's workers resumed from (RESUME_FROM).
	// +optional
	ResumedFrom string `json:"resumedFrom,omitempty"`
	// resumedFromMessage says what resumedFrom is, for example that it was written at preemption.
	// +optional
	ResumedFromMessage string `json:"resumedFromMessage,omitempty"`
	// resumedFromTime is when the checkpoint named by resumedFrom was written; unset when unknown.
	// +optional
	ResumedFromTime *metav1.MicroTime `json:"resumedFromTime,omitempty"`
	// resumedAttempt is the attempt whose workers resumed from resumedFrom.
	// +optional
	ResumedAttempt int32 `json:"resumedAttempt,omitempty"`
	// earlierRuns are the newest complete checkpoints of earlier runs under this job's name (deleted
	// TrainingJobs of the same name), newest first. A run never resumes from them on its own: set
	// spec.checkpoint.resumeFrom to one to continue it.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:validation:items:MaxLength=1024
	EarlierRuns []string `json:"earlierRuns,omitempty"`
}

// AvoidedNode is a node later attempts are kept off, and why.
type AvoidedNode struct {
	// name is the node's name.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// reason says what failed there.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Reason string `json:"reason,omitempty"`
	// attempt is the attempt that failed there.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
}

// MLflowStatus is the job's MLflow run as the operator keeps it.
type MLflowStatus struct {
	// trackingUri is the tracking server the run is on (kept: a later change of the operator's default
	// never moves a job's run).
	// +kubebuilder:validation:MaxLength=1024
	TrackingURI string `json:"trackingUri"`
	// experimentId is the run's experiment.
	// +kubebuilder:validation:MaxLength=256
	ExperimentID string `json:"experimentId"`
	// runId is the run's id, which workers get as MLFLOW_RUN_ID.
	// +kubebuilder:validation:MaxLength=256
	RunID string `json:"runId"`
	// url is the run's page in the MLflow UI.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url,omitempty"`
	// runStatus is the run's status as the operator last set it: RUNNING, then FINISHED, FAILED or KILLED.
	// +optional
	// +kubebuilder:validation:Enum=RUNNING;SCHEDULED;FINISHED;FAILED;KILLED
	RunStatus string `json:"runStatus,omitempty"`
	// loggedEpoch is the last epoch whose metrics were logged to the run (as step = epoch); later
	// epochs only are logged, so a restart of the operator or of the workers never logs one twice.
	// +optional
	LoggedEpoch int32 `json:"loggedEpoch,omitempty"`
}

// InputStatus is one fetched source.
type InputStatus struct {
	// name is model or dataset.
	// +kubebuilder:validation:Enum=model;dataset
	Name string `json:"name"`

	// source is the URI fetched.
	// +kubebuilder:validation:MaxLength=253
	Source string `json:"source"`

	// bytes is the size of the source, every file together.
	// +optional
	Bytes int64 `json:"bytes,omitempty"`

	// files is how many files the source has in the cache.
	// +optional
	Files int32 `json:"files,omitempty"`

	// fetchedBytes is what the last fetch read from the source: all of it the first time, 0 when an
	// attempt found the cache current.
	// +optional
	FetchedBytes int64 `json:"fetchedBytes,omitempty"`

	// readyTime is when the last fetch finished.
	// +optional
	ReadyTime *metav1.Time `json:"readyTime,omitempty"`
}
