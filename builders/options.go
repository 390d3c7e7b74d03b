package builders

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// Options are operator-wide settings that shape the built objects.
type Options struct {
	// DefaultImages maps a framework to the image used when spec.image is empty.
	DefaultImages map[mlv1.Framework]string
	// AgentImage and AgentCommand run the checkpoint agent (default: the operator's image, /manager).
	AgentImage   string
	AgentCommand []string
	// SupervisorCommand is the supervisor in AgentImage (default DefaultSupervisorCommand).
	SupervisorCommand []string
	// AgentInterval is the agent's time between two rotations; zero (or less) passes no --interval, leaving the
	// agent's own default (30 s).
	AgentInterval time.Duration
	// AgentTokenKey is the operator's secret key from which each job's checkpoint agent token is derived
	// (AgentToken); the manager reads it from a Secret in its own namespace. Empty: agents get no token
	// and accept PUT /resume-from from anyone (as before tokens). It prints as <redacted>.
	AgentTokenKey SecretKey
	// DefaultCheckpointStorage is the storage of jobs that enable checkpoints without naming one; nil
	// means a claim the operator creates per job with the defaults of CheckpointClaim (see StorageChoice).
	DefaultCheckpointStorage *mlv1.CheckpointStorage
	// GPUResource is the extended resource gpusPerWorker counts when spec.gpuResourceName is empty
	// (default nvidia.com/gpu).
	GPUResource corev1.ResourceName
	// MLflowTrackingURI is the tracking server of jobs whose monitoring names none; "" tracks only those
	// that name one.
	MLflowTrackingURI string
	// WorkerDefaults are the cluster's worker defaults, applied beneath each job's own settings.
	WorkerDefaults WorkerDefaults
	// InputsCache is the input cache of jobs whose inputs.cache is unset ("": Shared).
	InputsCache mlv1.InputsCache
	// InputsNodeCacheDir is the directory on each node that holds PerNode input caches, one directory per
	// job (its UID); "" means the cluster offers no node cache.
	InputsNodeCacheDir string
	// InputsNodeCacheMaxSize is the most a PerNode job's inputs may take on a node (its inputs.cacheSize,
	// default DefaultInputsCacheSize, no more than this); nil: inputs.cacheSize alone.
	InputsNodeCacheMaxSize *resource.Quantity
	// InPlaceRestart: the cluster restarts every container of a pod in place on a container's exit code
	// (RestartAllContainers, found out by a dry run when the manager starts), so a gang restart of a job
	// whose restartStrategy is InPlace keeps the pods (InPlace).
	InPlaceRestart bool
}
