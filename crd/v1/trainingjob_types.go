package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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
// +kubebuilder:validation:XValidation:rule="!has(self.workerPod) || !has(self.workerPod.sidecars) || self.workerPod.sidecars.all(c, !has(c.ports) || c.ports.all(p, !(p.containerPort in [has(self.networking) && has(self.networking.masterPort) ? self.networking.masterPort : 29500, has(self.monitoring) && has(self.monitoring.metricsPort) ? self.monitoring.metricsPort : 8080, 2222, 8082, 8084])))",message="workerPod.sidecars must not serve the trainer's, the checkpoint agent's or the supervisor's ports (networking.masterPort, monitoring.metricsPort, 2222 for MPI's SSH, 8082, 8084): the containers of a pod share its network",fieldPath=".workerPod.sidecars"
// +kubebuilder:validation:XValidation:rule="!has(self.networking) || !has(self.networking.backend) || self.networking.backend != 'mpi' || has(self.command)",message="networking.backend mpi needs command: rank 0 runs it (typically mpirun) once every rank's SSH server answers",fieldPath=".command"
// +kubebuilder:validation:XValidation:rule="!has(self.elastic) || (self.numWorkers >= self.elastic.minWorkers && self.numWorkers <= self.elastic.maxWorkers)",message="numWorkers must lie within elastic.minWorkers and elastic.maxWorkers",fieldPath=".numWorkers"
// +kubebuilder:validation:XValidation:rule="!has(self.elastic) || !has(self.framework) || self.framework == 'pytorch'",message="elastic needs framework pytorch (torchrun's c10d rendezvous)",fieldPath=".elastic"
// +kubebuilder:validation:XValidation:rule="has(self.image) || !has(self.framework) || self.framework in ['pytorch', 'tensorflow', 'jax']",message="image is required with framework xgboost or paddle: the operator has no default image for them",fieldPath=".image"
// +kubebuilder:validation:XValidation:rule="!has(self.networking) || !has(self.networking.backend) || self.networking.backend != 'nccl' || self.gpusPerWorker > 0",message="networking.backend nccl needs gpusPerWorker > 0; use gloo for CPU-only jobs",fieldPath=".networking.backend"
// +kubebuilder:validation:XValidation:rule="!has(self.monitoring) || !has(self.monitoring.tensorboardEnabled) || !self.monitoring.tensorboardEnabled || (has(self.checkpoint) && has(self.checkpoint.enabled) && self.checkpoint.enabled)",message="monitoring.tensorboardEnabled needs checkpoint.enabled: TensorBoard's logs are kept on the job's checkpoint storage",fieldPath=".monitoring.tensorboardEnabled"
// +kubebuilder:validation:XValidation:rule="has(self.managedBy) == has(oldSelf.managedBy)",message="managedBy is immutable: it cannot be set or removed after creation",fieldPath=".managedBy"
// +kubebuilder:validation:XValidation:rule="(has(self.model) && has(self.dataset)) || has(self.image) || has(self.command) || has(self.args)",message="model and dataset are required when the job names no image, command or args: the default runner trains model on dataset"
type TrainingJobSpec struct {
	// model is the model to train: a plain name (passed to workers as MODEL_NAME and in the config file),
	// or a source the operator delivers to every worker at MODEL_DIR: pvc://CLAIM/PATH or
	// nfs://SERVER/PATH (mounted read-only where it is), s3://BUCKET/PREFIX, gs://BUCKET/PREFIX,
	// hf://ORG/NAME[@REVISION] (a Hugging Face Hub model repository) or https://HOST/PATH (one file, or a
	// .tar/.tar.gz archive unpacked), fetched once per TrainingJob into its input cache (see inputs).
	// Required when the job names no image, command or args (the default runner trains it); a script of
	// one's own may leave it out.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.trim() != ''",message="model must not be blank"
	// +kubebuilder:validation:XValidation:rule="!self.contains('://') || (self.matches('^(pvc|nfs|s3|gs|hf|https?)://[^/]') && !self.contains('..') && !self.matches('%2[eE]') && !self.matches('/[.](/|$)'))",message="model must be a plain name or a source: pvc://CLAIM/PATH, nfs://SERVER/PATH, s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, hf://ORG/NAME[@REVISION] or https://HOST/PATH, with no '..' or '.' segment, encoded or not"
	Model string `json:"model,omitempty"`

	// dataset is the dataset to train on: a plain name (passed to workers as DATASET_NAME and in the config
	// file), or a source delivered at DATASET_DIR as model's is (hf:// names a dataset repository).
	// Required as model is.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.trim() != ''",message="dataset must not be blank"
	// +kubebuilder:validation:XValidation:rule="!self.contains('://') || (self.matches('^(pvc|nfs|s3|gs|hf|https?)://[^/]') && !self.contains('..') && !self.matches('%2[eE]') && !self.matches('/[.](/|$)'))",message="dataset must be a plain name or a source: pvc://CLAIM/PATH, nfs://SERVER/PATH, s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, hf://ORG/NAME[@REVISION] or https://HOST/PATH, with no '..' or '.' segment, encoded or not"
	Dataset string `json:"dataset,omitempty"`

	// inputs says how a model or dataset source is reached and where fetched sources are kept: the
	// credentials, the S3 endpoint, the hub's address and the input cache's size.
	// +optional
	Inputs *InputsSpec `json:"inputs,omitempty"`

	// numWorkers is the number of worker pods (ranks). Each runs one copy of the training program.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	NumWorkers int32 `json:"numWorkers"`

	// elastic lets a pytorch job run with any number of workers between minWorkers and maxWorkers:
	// torchrun's c10d rendezvous admits workers as they come and go, and numWorkers may change while the
	// job runs (the Job's parallelism and completions follow). Start the workers with torchrun.
	// +optional
	Elastic *ElasticSpec `json:"elastic,omitempty"`

	// gpusPerWorker is the number of GPUs (of gpuResourceName) each worker requests. 0 means CPU-only: such
	// workers see no GPU even in a CUDA image (NVIDIA_VISIBLE_DEVICES=void).
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16
	GPUsPerWorker *int32 `json:"gpusPerWorker,omitempty"`

	// gpuResourceName is the extended resource gpusPerWorker counts: nvidia.com/gpu unless the operator's
	// --gpu-resource-name says otherwise; for example a MIG slice (nvidia.com/mig-1g.10gb) or amd.com/gpu.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z0-9]([-a-z0-9]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	GPUResourceName string `json:"gpuResourceName,omitempty"`

	// framework selects the rendezvous environment injected into workers: pytorch (torchrun's PET_*),
	// tensorflow (TF_CONFIG), jax, xgboost (the Rabit tracker's DMLC_*) or paddle (PADDLE_*).
	// +optional
	// +kubebuilder:default=pytorch
	Framework Framework `json:"framework,omitempty"`

	// image is the worker container image. When empty, the operator's default image for the framework is used.
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

	// env is extra environment for every worker, after the operator's. Names that carry the job's identity,
	// rendezvous and checkpoint location (see the environment contract in docs/frameworks.md) are rejected; a name the
	// operator only defaults (NCCL_IB_DISABLE, PYTHONUNBUFFERED, the storage identity variables) takes the
	// value given here, and every other name (NCCL_DEBUG, NCCL_SOCKET_IFNAME, OMP_NUM_THREADS, ...) is free.
	// +optional
	// +kubebuilder:validation:MaxItems=128
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:XValidation:rule="self.all(e, !(e.name in ['MASTER_ADDR','MASTER_PORT','RANK','NODE_RANK','WORLD_SIZE','LOCAL_RANK','LOCAL_WORLD_SIZE','PET_MASTER_ADDR','PET_MASTER_PORT','PET_NNODES','PET_NODE_RANK','PET_NPROC_PER_NODE','PET_RDZV_BACKEND','PET_RDZV_ENDPOINT','PET_RDZV_ID','PET_MAX_RESTARTS','TF_CONFIG','JAX_COORDINATOR_ADDRESS','JAX_COORDINATOR_BIND_ADDRESS','JAX_NUM_PROCESSES','JAX_PROCESS_ID','DMLC_TRACKER_URI','DMLC_TRACKER_PORT','DMLC_NUM_WORKER','DMLC_TASK_ID','PADDLE_MASTER','PADDLE_NNODES','PADDLE_JOB_ID','TRAININGJOB_NAME','TRAININGJOB_NAMESPACE','TRAININGJOB_CONFIG','MODEL_NAME','DATASET_NAME','METRICS_PORT','DIST_BACKEND','POD_IP','CHECKPOINT_DIR','CHECKPOINT_URI','CHECKPOINT_FREQUENCY','RESUME_FROM','TRAININGJOB_CHECKPOINT_ON_SIGTERM','MODEL_DIR','DATASET_DIR','TENSORBOARD_LOG_DIR']))",message="env must not set a variable that carries the job's identity, rendezvous or checkpoint location (MASTER_ADDR, MASTER_PORT, RANK, NODE_RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, PET_*, TF_CONFIG, JAX_*, DMLC_*, PADDLE_*, TRAININGJOB_*, MODEL_NAME, DATASET_NAME, MODEL_DIR, DATASET_DIR, TENSORBOARD_LOG_DIR, METRICS_PORT, DIST_BACKEND, POD_IP, CHECKPOINT_*, RESUME_FROM); NCCL_*, PYTHONUNBUFFERED and other tuning variables may be set"
	Env []corev1.EnvVar `json:"env,omitempty"`

	// resources are each worker's compute requests and limits. An entry of the GPU resource (gpuResourceName)
	// must equal gpusPerWorker; when absent the operator adds it.
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

	// monitoring configures how progress is exposed and tracked.
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

	// securityContext sets the identity the workers (and, on mounted checkpoint storage, the checkpoint
	// agent, which must delete what they write) run as. Unset: the image's user (framework images run as
	// root). Every container also gets no privilege escalation, all capabilities dropped (IPC_LOCK kept
	// with rdmaEnabled) and the RuntimeDefault seccomp profile.
	// +optional
	SecurityContext *WorkerSecurityContext `json:"securityContext,omitempty"`

	// cleanup decides what is removed after the run ends. Checkpoints are never removed by it.
	// +optional
	Cleanup *CleanupPolicy `json:"cleanup,omitempty"`

	// workerPod adds to the workers' pods what a team's job needs beyond the operator's own wiring: labels
	// and annotations, a ServiceAccount, image pull secrets, volumes mounted in the trainer (a dataset's
	// claim), environment from Secrets, a runtime class, init and sidecar containers. The cluster's worker
	// defaults (set by the platform team on the operator) apply beneath it, never over it.
	// +optional
	WorkerPod *WorkerPodSpec `json:"workerPod,omitempty"`

	// suspend keeps (or stops) the workers from running while true; set it to false to start them.
	// A queued job's suspend deactivates its Kueue Workload (its quota is released) and resuming queues
	// it again; Kueue's own decisions never touch this field.
	// +optional
	Suspend *bool `json:"suspend,omitempty"`

	// managedBy names the controller that runs this TrainingJob: unset or
	// ml.example.com/trainingjob-operator for this operator; any other value (kueue.x-k8s.io/multikueue,
	// which runs the job on a worker cluster and mirrors its status back) makes the operator leave it
	// alone: no children, no status. Immutable.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="managedBy is immutable"
	ManagedBy *string `json:"managedBy,omitempty"`
}

// InputsSpec is how the model and dataset sources are reached and cached.
type InputsSpec struct {
	// secretRef names a Secret in the job's namespace with the sources' credentials, given to the init
	// container that fetches them (never to the trainer): AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for
	// s3://, service-account.json for gs://, HF_TOKEN for hf://. Unset: the workers' identity (their
	// ServiceAccount's workload identity) and no hub token.
	// +optional
	SecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`

	// endpoint is an S3-compatible endpoint URL for s3:// sources, for example a MinIO server.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^https?://`
	Endpoint string `json:"endpoint,omitempty"`

	// region is the S3 region of s3:// sources.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Region string `json:"region,omitempty"`

	// hubEndpoint is the Hugging Face Hub (or a mirror of its API) that hf:// sources come from;
	// https://huggingface.co when unset.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^https?://`
	HubEndpoint string `json:"hubEndpoint,omitempty"`

	// cacheSize is the capacity of the shared input cache, the claim <trainingjob>-inputs the operator
	// creates (owned by the TrainingJob, deleted with it) when a source is fetched; 50Gi when unset. With
	// more than one worker it is ReadWriteMany: rank 0 fetches, every rank reads.
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="inputs.cacheSize must be greater than zero"
	CacheSize *resource.Quantity `json:"cacheSize,omitempty"`

	// storageClassName is the StorageClass of the input cache; the cluster's default when unset.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`

	// cache is where fetched sources are kept: Shared, the claim <trainingjob>-inputs that every rank mounts
	// (ReadWriteMany with more than one worker); or PerNode, a directory of the job's on each node under
	// the operator's node cache (--inputs-node-cache-dir, the chart's inputs.nodeCacheDir), for clusters
	// without ReadWriteMany storage: the first rank on each node fetches, the node's other ranks and later
	// attempts there reuse it. Unset: the operator's --inputs-cache (Shared unless the platform says
	// otherwise).
	// +optional
	Cache InputsCache `json:"cache,omitempty"`
}

// InputsCache is where fetched model and dataset sources are kept.
// +kubebuilder:validation:Enum=Shared;PerNode
type InputsCache string

// Input caches.
const (
	InputsCacheShared  InputsCache = "Shared"
	InputsCachePerNode InputsCache = "PerNode"
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

	// sharedMemory is the size of the in-memory volume every worker gets at /dev/shm, where a PyTorch
	// DataLoader's worker processes hand their batches to the trainer (a container runtime gives 64 MiB,
	// which fails with a bus error as soon as batches are larger). Unset: half the worker's memory limit,
	// or, without one, the cluster's default (8Gi unless the platform team set another). "0" turns it off
	// (the runtime's own /dev/shm). What the trainer writes there counts against the pod's memory, as the
	// kubelet counts any in-memory emptyDir: keep the memory limit above the model's needs plus this.
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('0')) >= 0",message="resources.sharedMemory must not be negative"
	SharedMemory *resource.Quantity `json:"sharedMemory,omitempty"`
}

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

// StorageType is where checkpoints are stored.
// +kubebuilder:validation:Enum=pvc;s3;gcs;nfs
type StorageType string

// Storage types for checkpoints.
const (
	StoragePVC StorageType = "pvc"
	StorageS3  StorageType = "s3"
	StorageGCS StorageType = "gcs"
	StorageNFS StorageType = "nfs"
)

// CheckpointSpec configures checkpoints.
// +kubebuilder:validation:XValidation:rule="!has(self.resumeFrom) || !has(self.storage) || (self.storage.type == 's3') == self.resumeFrom.startsWith('s3://') && (self.storage.type == 'gcs') == self.resumeFrom.startsWith('gs://')",message="resumeFrom must be in the checkpoint storage's kind: s3:// for s3, gs:// for gcs, a path (or pvc://, nfs://) for pvc and nfs: workers read it with the storage's identity",fieldPath=".resumeFrom"
type CheckpointSpec struct {
	// enabled turns checkpointing on.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// frequency is the number of epochs between checkpoints.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	Frequency *int32 `json:"frequency,omitempty"`

	// storage is where checkpoints are written. When it is absent the operator's default storage is used
	// (its --default-checkpoint-storage flag), else a PersistentVolumeClaim the operator creates for the job,
	// <name>-checkpoints; the choice is recorded in status.checkpointStorage and kept for the job's life.
	// +optional
	Storage *CheckpointStorage `json:"storage,omitempty"`

	// resumeFrom is a checkpoint URI (s3://, gs://) or path to resume from until this run has written a
	// checkpoint of its own; it is checked before workers start. A path (or pvc://, nfs://, relative to
	// the volume) names a checkpoint on the mounted volume.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.startsWith('s3://') || self.startsWith('gs://') || self.startsWith('/') || self.startsWith('pvc://') || self.startsWith('nfs://')",message="resumeFrom must be an s3://, gs://, pvc:// or nfs:// URI or an absolute path"
	ResumeFrom string `json:"resumeFrom,omitempty"`

	// retention is the number of newest complete checkpoints to keep; older ones are deleted.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Retention *int32 `json:"retention,omitempty"`

	// onPreemption gives rank 0 the chance to write a checkpoint when its worker is about to be stopped (a
	// preemption, an eviction, a node drain, a gang restart): the workers get preemptionGraceSeconds between
	// SIGTERM and SIGKILL and the environment variable TRAININGJOB_CHECKPOINT_ON_SIGTERM=1; a trainer that
	// follows the contract writes a complete checkpoint (checkpoint-epoch-<E>-step-<S>: after epoch E and S
	// steps of the next) on SIGTERM, then exits, and the next attempt resumes from it.
	// +optional
	OnPreemption bool `json:"onPreemption,omitempty"`

	// preemptionGraceSeconds is how long a worker has between SIGTERM and SIGKILL with onPreemption.
	// +optional
	// +kubebuilder:default=120
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	PreemptionGraceSeconds *int32 `json:"preemptionGraceSeconds,omitempty"`
}

// CheckpointStorage is a checkpoint location. Which fields apply depends on type.
// +kubebuilder:validation:XValidation:rule="self.type != 's3' || has(self.s3Bucket)",message="storage.s3Bucket is required for type s3",fieldPath=".s3Bucket"
// +kubebuilder:validation:XValidation:rule="self.type != 'gcs' || has(self.gcsBucket)",message="storage.gcsBucket is required for type gcs",fieldPath=".gcsBucket"
// +kubebuilder:validation:XValidation:rule="self.type != 'nfs' || has(self.nfs)",message="storage.nfs is required for type nfs",fieldPath=".nfs"
// +kubebuilder:validation:XValidation:rule="!has(self.s3Bucket) || self.type == 's3'",message="storage.s3Bucket is only valid for type s3",fieldPath=".s3Bucket"
// +kubebuilder:validation:XValidation:rule="!has(self.gcsBucket) || self.type == 'gcs'",message="storage.gcsBucket is only valid for type gcs",fieldPath=".gcsBucket"
// +kubebuilder:validation:XValidation:rule="!has(self.claimName) || self.type == 'pvc'",message="storage.claimName is only valid for type pvc",fieldPath=".claimName"
// +kubebuilder:validation:XValidation:rule="!has(self.endpoint) && !has(self.region) || self.type == 's3'",message="storage.endpoint and storage.region are only valid for type s3",fieldPath=".endpoint"
// +kubebuilder:validation:XValidation:rule="!has(self.size) || self.type == 'pvc' && !has(self.claimName)",message="storage.size is only valid for the claim the operator creates (type pvc without claimName)",fieldPath=".size"
// +kubebuilder:validation:XValidation:rule="!has(self.storageClassName) || self.type == 'pvc' && !has(self.claimName)",message="storage.storageClassName is only valid for the claim the operator creates (type pvc without claimName)",fieldPath=".storageClassName"
// +kubebuilder:validation:XValidation:rule="!has(self.claimRetentionPolicy) || self.type == 'pvc' && !has(self.claimName)",message="storage.claimRetentionPolicy is only valid for the claim the operator creates (type pvc without claimName)",fieldPath=".claimRetentionPolicy"
type CheckpointStorage struct {
	// type is pvc, s3, gcs or nfs.
	// +optional
	// +kubebuilder:default=pvc
	Type StorageType `json:"type,omitempty"`

	// claimName is the PersistentVolumeClaim mounted into every worker (type pvc). When empty the operator
	// creates the claim <trainingjob>-checkpoints (see size, storageClassName and claimRetentionPolicy).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	ClaimName string `json:"claimName,omitempty"`

	// s3Bucket is the S3 bucket (type s3).
	// +optional
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`
	S3Bucket string `json:"s3Bucket,omitempty"`

	// gcsBucket is the Google Cloud Storage bucket (type gcs).
	// +optional
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=222
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9._-]*[a-z0-9]$`
	GCSBucket string `json:"gcsBucket,omitempty"`

	// size is the capacity of the claim the operator creates (type pvc without claimName); 20Gi when unset.
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="storage.size must be greater than zero"
	Size *resource.Quantity `json:"size,omitempty"`

	// storageClassName is the StorageClass of the claim the operator creates; the cluster's default
	// StorageClass (or the operator's --default-checkpoint-storage-class) when unset. With more than one
	// worker the claim is ReadWriteMany, so the class must support it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`

	// claimRetentionPolicy decides what happens to the claim the operator created when the TrainingJob is
	// deleted: Retain (the default) keeps it, and the checkpoints, until a user deletes it; Delete deletes
	// it with the TrainingJob.
	// +optional
	ClaimRetentionPolicy ClaimRetentionPolicy `json:"claimRetentionPolicy,omitempty"`

	// nfs is the NFS export (type nfs).
	// +optional
	NFS *NFSStorage `json:"nfs,omitempty"`

	// prefix is prepended to checkpoint paths inside the bucket or volume.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.contains('..')",message="storage.prefix must not contain '..'"
	Prefix string `json:"prefix,omitempty"`

	// endpoint is an S3-compatible endpoint URL, for example a MinIO server (type s3).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^https?://`
	Endpoint string `json:"endpoint,omitempty"`

	// region is the S3 region (type s3).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Region string `json:"region,omitempty"`

	// secretRef names a Secret in the job's namespace holding storage credentials. When empty, the workers'
	// own identity (workload identity, instance role) is used.
	// +optional
	SecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`
}

// ClaimRetentionPolicy is what happens to an operator-created checkpoint claim when its TrainingJob is
// deleted.
// +kubebuilder:validation:Enum=Retain;Delete
type ClaimRetentionPolicy string

// Claim retention policies.
const (
	ClaimRetain ClaimRetentionPolicy = "Retain"
	ClaimDelete ClaimRetentionPolicy = "Delete"
)

// NFSStorage is an NFS export.
type NFSStorage struct {
	// server is the NFS server's host name or address.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Server string `json:"server"`

	// path is the exported path.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/`
	Path string `json:"path"`
}

// SchedulingSpec places the workers.
type SchedulingSpec struct {
	// priority is the name of a PriorityClass for the workers.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Priority string `json:"priority,omitempty"`

	// nodeSelector restricts workers to nodes with these labels.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// affinity is the workers' affinity.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// tolerations are the workers' tolerations.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// schedulerName is the scheduler for the workers, for example a gang scheduler.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SchedulerName string `json:"schedulerName,omitempty"`

	// queueName is the Kueue LocalQueue that admits the job (docs/kueue.md). The TrainingJob's
	// kueue.x-k8s.io/queue-name label, Kueue's convention, names one too and wins when both are set.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	QueueName string `json:"queueName,omitempty"`

	// gang asks for a PodGroup so that all workers are scheduled together or none is: Volcano's
	// (scheduling.volcano.sh) or the scheduler-plugins coscheduler's (scheduling.x-k8s.io). When unset, a
	// schedulerName of volcano or scheduler-plugins-scheduler implies it.
	// +optional
	Gang *GangScheduling `json:"gang,omitempty"`

	// schedulingTimeoutSeconds fails the TrainingJob with reason SchedulingTimeout when its workers cannot
	// all be scheduled and started (unschedulable, an image that cannot be pulled, a missing Secret) within
	// this time of the attempt's start; unset waits as long as it takes.
	// +optional
	// +kubebuilder:validation:Minimum=1
	SchedulingTimeoutSeconds *int64 `json:"schedulingTimeoutSeconds,omitempty"`
}

// GangScheduler is the PodGroup API a gang scheduler reads.
// +kubebuilder:validation:Enum=volcano;coscheduling
type GangScheduler string

// Gang schedulers.
const (
	GangVolcano      GangScheduler = "volcano"
	GangCoscheduling GangScheduler = "coscheduling"
)

// GangScheduling configures the PodGroup of the workers.
type GangScheduling struct {
	// scheduler is volcano (PodGroup scheduling.volcano.sh/v1beta1) or coscheduling (PodGroup
	// scheduling.x-k8s.io/v1alpha1 of the scheduler-plugins coscheduler).
	// +required
	Scheduler GangScheduler `json:"scheduler"`

	// scheduleTimeoutSeconds is how long the coscheduler waits for the whole group before it gives the
	// workers' resources back (coscheduling only).
	// +optional
	// +kubebuilder:validation:Minimum=1
	ScheduleTimeoutSeconds *int32 `json:"scheduleTimeoutSeconds,omitempty"`
}

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

	// progressFromOutput runs the trainer under the operator's supervisor (copied in by an init container),
	// which passes its output through unchanged and recognises progress in it: tqdm bars, Hugging Face
	// Trainer's logs, Lightning's and Keras's epoch lines, "epoch N/M" and "step N/M" lines, and
	// progressPattern. Rank 0's own endpoint on metricsPort wins when it serves one. A job with no command
	// keeps its image's entrypoint and runs without it.
	// +optional
	// +kubebuilder:default=true
	ProgressFromOutput *bool `json:"progressFromOutput,omitempty"`

	// progressPattern is an RE2 expression tried on every line of rank 0's output before the built-in
	// formats, with named groups among epoch, epochs, step, steps, loss, accuracy, lr and throughput, for
	// example `it (?P<step>\d+) of (?P<steps>\d+), cost (?P<loss>[0-9.]+)`.
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
	// (CHECKPOINT_DIR/tensorboard on a volume, CHECKPOINT_URI/tensorboard in a bucket) that outlives the
	// pods, where the training program writes TensorBoard event files (the default runner writes rank 0's
	// loss, accuracy and learning rate per epoch). It needs checkpoint.enabled.
	// +optional
	TensorboardEnabled *bool `json:"tensorboardEnabled,omitempty"`

	// mlflowTrackingUri is the MLflow tracking server, for example http://mlflow.mlflow:5000; the operator's
	// --mlflow-tracking-uri when empty. The operator keeps one MLflow run per TrainingJob there (found again
	// by its trainingjob.uid tag): tags, hyperparameters as params, rank 0's metrics with step = epoch, the
	// newest checkpoint, and the run's end. Workers get MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME,
	// MLFLOW_EXPERIMENT_ID and MLFLOW_RUN_ID, so mlflow.start_run() in the training program logs into that
	// run. A tracking server that does not answer never stops the training (see the ExperimentTracked
	// condition).
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

	// mlflowCredentialsSecret names a Secret in the job's namespace holding the tracking server's
	// credentials under MLflow's own variable names: MLFLOW_TRACKING_TOKEN (a bearer token), or
	// MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (basic authentication). The operator sends
	// them with its own calls; workers get them as those environment variables. Without it the operator
	// uses its --mlflow-credentials-secret (which workers do not get).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	MLflowCredentialsSecret string `json:"mlflowCredentialsSecret,omitempty"`

	// wandbProject is the Weights & Biases project. Workers get WANDB_PROJECT, WANDB_RUN_GROUP (the job's
	// name: all ranks in one group), WANDB_RUN_ID and WANDB_NAME per rank (a restarted rank resumes its
	// run) and WANDB_RESUME=allow.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	WandbProject string `json:"wandbProject,omitempty"`
}

// Backend is a collective-communication backend.
// +kubebuilder:validation:Enum=nccl;gloo;mpi
type Backend string

// Backends.
const (
	BackendNCCL Backend = "nccl"
	BackendGloo Backend = "gloo"
	BackendMPI  Backend = "mpi"
)

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

// NetworkingSpec configures rendezvous and collectives.
type NetworkingSpec struct {
	// backend is nccl, gloo or mpi. When empty: nccl with GPUs, gloo without.
	// +optional
	Backend Backend `json:"backend,omitempty"`

	// masterPort is the rendezvous port on rank 0 (MASTER_PORT).
	// +optional
	// +kubebuilder:default=29500
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	MasterPort int32 `json:"masterPort,omitempty"`

	// rdmaEnabled lets NCCL use InfiniBand/RoCE (NCCL_IB_DISABLE=0).
	// +optional
	RDMAEnabled *bool `json:"rdmaEnabled,omitempty"`
}

// RestartPolicy is how the workers are restarted after a failure.
// +kubebuilder:validation:Enum=Gang;OnFailure;Never
type RestartPolicy string

// Restart policies.
const (
	// RestartGang stops every worker and starts a fresh set (a new attempt) that resumes from the newest
	// checkpoint; no rank is left waiting at a dead rendezvous.
	RestartGang RestartPolicy = "Gang"
	// RestartOnFailure restarts a failed worker's container in place, for frameworks whose ranks rejoin
	// (torchrun elastic, a trainer that re-rendezvouses).
	RestartOnFailure RestartPolicy = "OnFailure"
	// RestartNever fails the TrainingJob at the first worker failure.
	RestartNever RestartPolicy = "Never"
)

// FailurePolicy decides how worker failures are retried.
// +kubebuilder:validation:XValidation:rule="!has(self.retryableExitCodes) || !has(self.nonRetryableExitCodes) || !self.retryableExitCodes.exists(c, c in self.nonRetryableExitCodes)",message="an exit code must not be both in retryableExitCodes and in nonRetryableExitCodes",fieldPath=".retryableExitCodes"
// +kubebuilder:validation:XValidation:rule="!has(self.restartPolicy) || self.restartPolicy == 'Gang' || !has(self.retryableExitCodes) && !has(self.nonRetryableExitCodes)",message="retryableExitCodes and nonRetryableExitCodes apply to restartPolicy Gang only",fieldPath=".restartPolicy"
type FailurePolicy struct {
	// restartPolicy is Gang (default: restart every worker together, from the newest checkpoint), OnFailure
	// (restart the failed worker's container in place, for frameworks whose ranks rejoin) or Never (fail at
	// the first worker failure).
	// +optional
	// +kubebuilder:default=Gang
	RestartPolicy RestartPolicy `json:"restartPolicy,omitempty"`

	// backoffLimit is how many restarts after a retryable failure the TrainingJob may use before it fails:
	// gang restarts with restartPolicy Gang (disruptions such as preemption, eviction and node loss are not
	// counted), container restarts and replaced pods with OnFailure.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`

	// activeDeadlineSeconds bounds the run's wall time, counted from the first start of its workers and not
	// reset by restarts or suspension; past it the workers are stopped and the TrainingJob fails with
	// reason DeadlineExceeded.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`

	// retryableExitCodes are trainer exit codes that restart the gang (counted against backoffLimit) in
	// addition to the default: 128-255, a death by signal such as OOM-kill (137) or SIGTERM (143).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=255
	RetryableExitCodes []int32 `json:"retryableExitCodes,omitempty"`

	// nonRetryableExitCodes are trainer exit codes that fail the TrainingJob at once, in addition to the
	// default: 1-127, an error the program reported itself (an exception, a bad argument, a missing file).
	// retryableExitCodes takes codes out of this default.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=255
	NonRetryableExitCodes []int32 `json:"nonRetryableExitCodes,omitempty"`

	// startupTimeoutSeconds is how long every worker may run without rank 0 reporting any progress before the
	// run counts as hung (condition Stalled, reason NoProgressSinceStart; onHang says what follows), counted
	// from when the last worker of the attempt started running. 0 turns the check off. Unset: 600 once rank 0
	// has a progress source (its endpoint, or lines its output shows); a run with none is never called hung
	// unless this is set (then its output's silence is what is watched).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=604800
	StartupTimeoutSeconds *int32 `json:"startupTimeoutSeconds,omitempty"`

	// stallTimeoutSeconds is how long rank 0's epoch and step may stand still, once it has reported progress,
	// before the run counts as hung (condition Stalled, reason ProgressStalled). Unset, it follows the run's
	// own pace: the longer of 10 minutes and 5 times the slowest epoch seen, and a run with no progress
	// source is not watched. Set, a run with no progress source counts as hung when its rank 0 prints nothing
	// for this long (reason OutputSilent). 0 turns the check off.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=604800
	StallTimeoutSeconds *int32 `json:"stallTimeoutSeconds,omitempty"`

	// onHang is what a hung run gets (no progress within startupTimeoutSeconds, or stalled for
	// stallTimeoutSeconds): Restart (default: a gang restart counted against backoffLimit), Fail (the run fails
	// with reason Hung) or None (the Stalled condition, an event and the metric only).
	// +optional
	// +kubebuilder:default=Restart
	OnHang HangAction `json:"onHang,omitempty"`

	// rules decide what a failure of restartPolicy Gang gets before the exit-code lists and the default
	// classes: the first rule that matches wins; a failure no rule matches is classified as without rules.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Rules []FailureRule `json:"rules,omitempty"`

	// maxAvoidedNodes is how many nodes the next attempts keep off at most: a node a failure is attributed to
	// (it was lost, it held the failing rank in two failed attempts in a row, or a rule with avoidNode matched)
	// is added to status.avoidedNodes and every worker of later attempts gets node affinity NotIn it; past the
	// cap the oldest is dropped, so a small cluster is never emptied. 0 turns avoidance off.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16
	MaxAvoidedNodes *int32 `json:"maxAvoidedNodes,omitempty"`
}

// HangAction is what a hung run gets.
// +kubebuilder:validation:Enum=Restart;Fail;None
type HangAction string

// Hang actions.
const (
	HangRestart HangAction = "Restart"
	HangFail    HangAction = "Fail"
	HangNone    HangAction = "None"
)

// FailureKind is a class of failure a rule can match.
// +kubebuilder:validation:Enum=Error;OOM;Disruption;Hang
type FailureKind string

// Failure kinds: Error is a trainer's non-zero exit other than an OOM kill; OOM an exit the kubelet reports
// OOMKilled; Disruption a preemption, eviction or lost node; Hang no progress (failurePolicy.onHang).
const (
	FailureError      FailureKind = "Error"
	FailureOOM        FailureKind = "OOM"
	FailureDisruption FailureKind = "Disruption"
	FailureHang       FailureKind = "Hang"
)

// RuleAction is what a matching failure rule does.
// +kubebuilder:validation:Enum=Restart;RestartWithoutCounting;Fail
type RuleAction string

// Rule actions.
const (
	// RuleRestart makes a gang restart counted against backoffLimit.
	RuleRestart RuleAction = "Restart"
	// RuleRestartWithoutCounting makes a gang restart that backoffLimit does not count.
	RuleRestartWithoutCounting RuleAction = "RestartWithoutCounting"
	// RuleFail fails the run.
	RuleFail RuleAction = "Fail"
)

// FailureRule matches a failure by what the operator sees of it; every field set must match.
// +kubebuilder:validation:XValidation:rule="has(self.onExitCodes) || has(self.onMessage) || has(self.onKinds)",message="a rule needs at least one of onExitCodes, onMessage and onKinds"
type FailureRule struct {
	// name names the rule in the status and events.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name,omitempty"`

	// action is Restart (counted against backoffLimit), RestartWithoutCounting or Fail.
	// +required
	Action RuleAction `json:"action"`

	// onExitCodes matches the exit code of the rank whose failure caused the others'.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=255
	OnExitCodes []int32 `json:"onExitCodes,omitempty"`

	// onMessage is a regular expression (RE2 syntax) searched in what explains the failure: the failing
	// container's termination message (its last log lines when it wrote none), or for a hang the ranks' last
	// log lines; for example NCCL.*[Tt]imeout or CUDA error: an illegal memory access.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="''.findAll(self).size() >= 0",message="onMessage must be a regular expression in RE2 syntax"
	OnMessage string `json:"onMessage,omitempty"`

	// onKinds matches the failure's kind: Error, OOM, Disruption or Hang.
	// +optional
	// +kubebuilder:validation:MaxItems=4
	// +listType=set
	OnKinds []FailureKind `json:"onKinds,omitempty"`

	// avoidNode keeps the next attempts off the node the failing rank ran on (see maxAvoidedNodes).
	// +optional
	AvoidNode bool `json:"avoidNode,omitempty"`
}

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
	// cleanPodPolicy is which worker pods are deleted when the run ends: Running (default: pods still
	// running are stopped; finished and failed pods stay for their logs), All, or None (pods still running
	// are stopped but none is deleted).
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
