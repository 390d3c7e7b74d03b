package v1

import (
	corev1 "k8s.io/api/core/v1"
)

// Framework is the training framework a TrainingJob runs.
// +kubebuilder:validation:Enum=pytorch;tensorflow;jax;xgboost;paddle
type Framework string

// Frameworks a TrainingJob can run.
const (
	FrameworkPyTorch    Framework = "pytorch"
	FrameworkTensorFlow Framework = "tensorflow"
	FrameworkJAX        Framework = "jax"
	FrameworkXGBoost    Framework = "xgboost"
	FrameworkPaddle     Framework = "paddle"
)

// Frameworks are all the frameworks, in the order the enum lists them.
var Frameworks = []Framework{FrameworkPyTorch, FrameworkTensorFlow, FrameworkJAX, FrameworkXGBoost, FrameworkPaddle}

// TrainingJobSpec is what the user asks for: one distributed training run.
// +kubebuilder:validation:XValidation:rule="!has(self.resources) || !has(self.resources.limits) || !((has(self.gpuResourceName) ? self.gpuResourceName : 'nvidia.com/gpu') in self.resources.limits) || self.resources.limits[(has(self.gpuResourceName) ? self.gpuResourceName : 'nvidia.com/gpu')] == self.gpusPerWorker || self.resources.limits[(has(self.gpuResourceName) ? self.gpuResourceName : 'nvidia.com/gpu')] == string(self.gpusPerWorker)",message="resources.limits[gpuResourceName] (nvidia.com/gpu unless gpuResourceName says otherwise) must be a whole number equal to gpusPerWorker",fieldPath=".resources.limits"
// +kubebuilder:validation:XValidation:rule="!has(self.resources) || !has(self.resources.requests) || !((has(self.gpuResourceName) ? self.gpuResourceName : 'nvidia.com/gpu') in self.resources.requests) || self.resources.requests[(has(self.gpuResourceName) ? self.gpuResourceName : 'nvidia.com/gpu')] == self.gpusPerWorker || self.resources.requests[(has(self.gpuResourceName) ? self.gpuResourceName : 'nvidia.com/gpu')] == string(self.gpusPerWorker)",message="resources.requests[gpuResourceName] (nvidia.com/gpu unless gpuResourceName says otherwise) must be a whole number equal to gpusPerWorker",fieldPath=".resources.requests"
// +kubebuilder:validation:XValidation:rule="!has(self.monitoring) || !has(self.networking) || self.monitoring.metricsPort != self.networking.masterPort",message="monitoring.metricsPort must differ from networking.masterPort",fieldPath=".monitoring.metricsPort"
// +gen-api:begin=sidecar-ports (hack/gen-api writes this rule from the default ports and the builders' port constants)
// +kubebuilder:validation:XValidation:rule="!has(self.workerPod) || !has(self.workerPod.sidecars) || self.workerPod.sidecars.all(c, !has(c.ports) || c.ports.all(p, !(p.containerPort in [has(self.networking) && has(self.networking.masterPort) ? self.networking.masterPort : 29500, has(self.monitoring) && has(self.monitoring.metricsPort) ? self.monitoring.metricsPort : 8080, 2222, 8082, 8084])))",message="workerPod.sidecars must not serve the trainer's, the checkpoint agent's or the supervisor's ports (networking.masterPort, monitoring.metricsPort, 2222 for MPI's SSH, 8082, 8084): the containers of a pod share its network",fieldPath=".workerPod.sidecars"
// +gen-api:end
// +kubebuilder:validation:XValidation:rule="!has(self.networking) || !has(self.networking.backend) || self.networking.backend != 'mpi' || has(self.command)",message="networking.backend mpi needs command: rank 0 runs it (typically mpirun) once every rank's SSH server answers",fieldPath=".command"
// +kubebuilder:validation:XValidation:rule="!has(self.elastic) || (self.numWorkers >= self.elastic.minWorkers && self.numWorkers <= self.elastic.maxWorkers)",message="numWorkers must lie within elastic.minWorkers and elastic.maxWorkers",fieldPath=".numWorkers"
// +kubebuilder:validation:XValidation:rule="!has(self.elastic) || !has(self.framework) || self.framework == 'pytorch'",message="elastic needs framework pytorch (torchrun's c10d rendezvous)",fieldPath=".elastic"
// +kubebuilder:validation:XValidation:rule="has(self.image) || !has(self.framework) || self.framework in ['pytorch', 'tensorflow', 'jax']",message="image is required with framework xgboost or paddle: the operator has no default image for them",fieldPath=".image"
// +kubebuilder:validation:XValidation:rule="!has(self.networking) || !has(self.networking.backend) || self.networking.backend != 'nccl' || self.gpusPerWorker > 0",message="networking.backend nccl needs gpusPerWorker > 0; use gloo for CPU-only jobs",fieldPath=".networking.backend"
// +kubebuilder:validation:XValidation:rule="!has(self.monitoring) || !has(self.monitoring.tensorboardEnabled) || !self.monitoring.tensorboardEnabled || (has(self.checkpoint) && has(self.checkpoint.enabled) && self.checkpoint.enabled)",message="monitoring.tensorboardEnabled needs checkpoint.enabled: TensorBoard's logs are kept on the job's checkpoint storage",fieldPath=".monitoring.tensorboardEnabled"
// +kubebuilder:validation:XValidation:rule="!has(self.managedBy) || self.managedBy != 'kueue.x-k8s.io/multikueue' || (has(self.gpusPerWorker) && self.gpusPerWorker > 0) || (has(self.resources) && ((has(self.resources.requests) && size(self.resources.requests) > 0) || (has(self.resources.limits) && size(self.resources.limits) > 0)))",message="resources.requests: a job MultiKueue dispatches (managedBy kueue.x-k8s.io/multikueue) must request something (gpusPerWorker or resources): Kueue admits a pod set that requests nothing without its admission checks, so MultiKueue would dispatch it nowhere",fieldPath=".resources"
// +kubebuilder:validation:XValidation:rule="has(self.managedBy) == has(oldSelf.managedBy)",message="managedBy is immutable: it cannot be set or removed after creation",fieldPath=".managedBy"
// +kubebuilder:validation:XValidation:rule="(has(self.model) && has(self.dataset)) || has(self.image) || has(self.command) || has(self.args)",message="model and dataset are required when the job names no image, command or args: the default runner trains model on dataset"
type TrainingJobSpec struct {
	// model is the model to train: a plain name, or a source (pvc://, nfs://, s3://, gs://, hf://, https://)
	// the operator delivers to every worker at MODEL_DIR. Required when the job names no image, command or
	// args.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.trim() != ''",message="model must not be blank"
	// +kubebuilder:validation:XValidation:rule="!self.contains('://') || (self.matches('^(pvc|nfs|s3|gs|hf|https?)://[^/]') && !self.contains('..') && !self.matches('%2[eE]') && !self.matches('/[.](/|$)'))",message="model must be a plain name or a source: pvc://CLAIM/PATH, nfs://SERVER/PATH, s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, hf://ORG/NAME[@REVISION] or https://HOST/PATH, with no '..' or '.' segment, encoded or not"
	Model string `json:"model,omitempty"`

	// dataset is the dataset to train on: a plain name, or a source delivered at DATASET_DIR as model's is.
	// Required as model is.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.trim() != ''",message="dataset must not be blank"
	// +kubebuilder:validation:XValidation:rule="!self.contains('://') || (self.matches('^(pvc|nfs|s3|gs|hf|https?)://[^/]') && !self.contains('..') && !self.matches('%2[eE]') && !self.matches('/[.](/|$)'))",message="dataset must be a plain name or a source: pvc://CLAIM/PATH, nfs://SERVER/PATH, s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, hf://ORG/NAME[@REVISION] or https://HOST/PATH, with no '..' or '.' segment, encoded or not"
	Dataset string `json:"dataset,omitempty"`

	// inputs says how model and dataset sources are reached (credentials, endpoints) and where fetched
	// sources are kept.
	// +optional
	Inputs *InputsSpec `json:"inputs,omitempty"`

	// numWorkers is the number of worker pods (ranks), each running one copy of the training program.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	NumWorkers int32 `json:"numWorkers"`

	// elastic lets a pytorch job run with any number of workers between minWorkers and maxWorkers
	// (torchrun's c10d rendezvous); numWorkers may then change while the job runs.
	// +optional
	Elastic *ElasticSpec `json:"elastic,omitempty"`

	// gpusPerWorker is the number of GPUs (of gpuResourceName) each worker requests; 0 means CPU-only.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16
	GPUsPerWorker *int32 `json:"gpusPerWorker,omitempty"`

	// gpuResourceName is the extended resource gpusPerWorker counts, for example nvidia.com/mig-1g.10gb or
	// amd.com/gpu; unset, the operator's --gpu-resource-name (nvidia.com/gpu unless it says otherwise).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z0-9]([-a-z0-9]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	GPUResourceName string `json:"gpuResourceName,omitempty"`

	// framework selects the rendezvous environment given to the workers: pytorch, tensorflow, jax, xgboost
	// or paddle.
	// +optional
	// +kubebuilder:default=pytorch
	Framework Framework `json:"framework,omitempty"`

	// image is the worker container image; the operator's default image for the framework when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self == self.trim() && !self.contains(' ')",message="image must not contain spaces"
	Image string `json:"image,omitempty"`

	// command overrides the image's entrypoint.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	// +listType=atomic
	Command []string `json:"command,omitempty"`

	// args are the arguments to the command.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=4096
	// +listType=atomic
	Args []string `json:"args,omitempty"`

	// env is extra environment for every worker. The reserved names of the environment contract
	// (docs/frameworks.md) are refused; a name the operator only defaults takes the value given here.
	// +optional
	// +kubebuilder:validation:MaxItems=128
	// +listType=map
	// +listMapKey=name
	// +gen-api:begin=reserved-env-names (hack/gen-api writes this rule from builders.ReservedEnvNames)
	// +kubebuilder:validation:XValidation:rule="self.all(e, !(e.name in ['TRAININGJOB_NAME','TRAININGJOB_NAMESPACE','MODEL_NAME','DATASET_NAME','TRAININGJOB_CONFIG','METRICS_PORT','POD_IP','RANK','NODE_RANK','WORLD_SIZE','LOCAL_RANK','LOCAL_WORLD_SIZE','MASTER_ADDR','MASTER_PORT','DIST_BACKEND','PET_MASTER_ADDR','PET_MASTER_PORT','PET_NNODES','PET_NODE_RANK','PET_NPROC_PER_NODE','PET_RDZV_BACKEND','PET_RDZV_ENDPOINT','PET_RDZV_ID','PET_MAX_RESTARTS','TF_CONFIG','JAX_COORDINATOR_ADDRESS','JAX_COORDINATOR_BIND_ADDRESS','JAX_NUM_PROCESSES','JAX_PROCESS_ID','DMLC_TRACKER_URI','DMLC_TRACKER_PORT','DMLC_NUM_WORKER','DMLC_TASK_ID','PADDLE_MASTER','PADDLE_NNODES','PADDLE_JOB_ID','CHECKPOINT_DIR','CHECKPOINT_URI','CHECKPOINT_FREQUENCY','RESUME_FROM','TRAININGJOB_CHECKPOINT_ON_SIGTERM','TENSORBOARD_LOG_DIR','MODEL_DIR','DATASET_DIR']))",message="env must not set a variable that carries the job's identity, rendezvous or checkpoint location (MASTER_ADDR, MASTER_PORT, RANK, NODE_RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, PET_*, TF_CONFIG, JAX_*, DMLC_*, PADDLE_*, TRAININGJOB_*, MODEL_NAME, DATASET_NAME, MODEL_DIR, DATASET_DIR, TENSORBOARD_LOG_DIR, METRICS_PORT, DIST_BACKEND, POD_IP, CHECKPOINT_*, RESUME_FROM); NCCL_*, PYTHONUNBUFFERED and other tuning variables may be set"
	// +gen-api:end
	Env []corev1.EnvVar `json:"env,omitempty"`

	// resources are each worker's compute requests and limits; an entry of the GPU resource must equal
	// gpusPerWorker (the operator adds it when absent).
	// +optional
	Resources *Resources `json:"resources,omitempty"`

	// hyperparameters are passed to workers in the config file mounted at /etc/trainingjob/config.json.
	// +optional
	Hyperparameters *Hyperparameters `json:"hyperparameters,omitempty"`

	// checkpoint configures where and how often checkpoints are written, kept and resumed.
	// +optional
	Checkpoint *CheckpointSpec `json:"checkpoint,omitempty"`

	// scheduling places the workers: priority, node selection, tolerations, scheduler and queue.
	// +optional
	Scheduling *SchedulingSpec `json:"scheduling,omitempty"`

	// monitoring configures how rank 0's progress is read and where the run is tracked.
	// +optional
	Monitoring *MonitoringSpec `json:"monitoring,omitempty"`

	// networking configures the collective-communication backend and rendezvous port.
	// +optional
	Networking *NetworkingSpec `json:"networking,omitempty"`

	// failurePolicy decides how worker failures are retried.
	// +optional
	FailurePolicy *FailurePolicy `json:"failurePolicy,omitempty"`

	// successPolicy ends the run early when a target metric is reached.
	// +optional
	SuccessPolicy *SuccessPolicy `json:"successPolicy,omitempty"`

	// securityContext is the user and groups the workers run as; unset, the image's user. Every container
	// is hardened regardless: no privilege escalation, no capabilities, the RuntimeDefault seccomp profile.
	// +optional
	SecurityContext *WorkerSecurityContext `json:"securityContext,omitempty"`

	// cleanup decides what is removed after the run ends; checkpoints never are.
	// +optional
	Cleanup *CleanupPolicy `json:"cleanup,omitempty"`

	// workerPod adds to the workers' pods what a team's job needs beyond the operator's own wiring: metadata,
	// identity, registry credentials, volumes, environment from Secrets, init and sidecar containers.
	// +optional
	WorkerPod *WorkerPodSpec `json:"workerPod,omitempty"`

	// suspend keeps (or stops) the workers from running while true; set it to false to start them.
	// +optional
	Suspend *bool `json:"suspend,omitempty"`

	// managedBy names the controller that runs this TrainingJob: unset or ml.example.com/trainingjob-operator
	// for this operator, which leaves a job with any other value alone. Immutable.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="managedBy is immutable"
	ManagedBy *string `json:"managedBy,omitempty"`
}
