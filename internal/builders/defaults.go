package builders

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"time"

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
	// AgentInterval is the agent's time between two rotations (default 30 s).
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
}

// DefaultImages are the images used when spec.image is empty, unless the manager's
// --default-image-<framework> flags say otherwise.
func DefaultImages() map[mlv1.Framework]string {
	return map[mlv1.Framework]string{
		mlv1.FrameworkPyTorch:    DefaultRunnerImage,
		mlv1.FrameworkTensorFlow: "tensorflow/tensorflow:2.18.0-gpu",
		mlv1.FrameworkJAX:        "ghcr.io/nvidia/jax:jax-2025-01-01",
	}
}

// DefaultRunnerImage is the default PyTorch image: the framework's image with the default runner
// (runner/, Dockerfile.runner), which trains spec.model on spec.dataset with spec.hyperparameters.
const DefaultRunnerImage = "ghcr.io/trainingjob-operator/runner:v0.1.0"

// RunnerCommand starts the default runner: the command of workers of a pytorch job that names neither
// image nor command nor args.
var RunnerCommand = []string{"python3", "-m", "trainingjob_runner"}

// runsDefault: the workers run the framework's default image as it is (no image, command or args).
func runsDefault(tj *mlv1.TrainingJob) bool {
	return tj.Spec.Image == "" && len(tj.Spec.Command) == 0 && len(tj.Spec.Args) == 0
}

// UsesRunner is true when the workers run the default runner (see RunnerCommand).
func UsesRunner(tj *mlv1.TrainingJob) bool {
	return runsDefault(tj) && framework(tj) == mlv1.FrameworkPyTorch
}

// NoTrainingProgram is true when the workers run a default image that has no training program (every
// framework's but PyTorch's, whose image has the runner) with neither command nor args: its default
// command is a shell, which exits at once, so such a job would end "successfully" having trained nothing.
func NoTrainingProgram(tj *mlv1.TrainingJob) bool { return runsDefault(tj) && !UsesRunner(tj) }

// The accessors below read spec fields of a defaulted TrainingJob (mlv1.TrainingJob.Default: the controllers
// default every TrainingJob they read, once), and say what a field means.

// GPUsPerWorker is spec.gpusPerWorker with its default.
func GPUsPerWorker(tj *mlv1.TrainingJob) int32 { return gpusPerWorker(tj) }

func gpusPerWorker(tj *mlv1.TrainingJob) int32 { return *tj.Spec.GPUsPerWorker }

func framework(tj *mlv1.TrainingJob) mlv1.Framework { return tj.Spec.Framework }

// Framework is spec.framework, pytorch when empty.
func Framework(tj *mlv1.TrainingJob) mlv1.Framework { return framework(tj) }

func masterPort(tj *mlv1.TrainingJob) int32 { return tj.Spec.Networking.MasterPort }

// MonitoringEnabled is monitoring.enabled, true by default: the operator reads rank 0's progress.
func MonitoringEnabled(tj *mlv1.TrainingJob) bool { return *tj.Spec.Monitoring.Enabled }

// MetricsPort is the port rank 0 serves progress on.
func MetricsPort(tj *mlv1.TrainingJob) int32 { return metricsPort(tj) }

func metricsPort(tj *mlv1.TrainingJob) int32 { return tj.Spec.Monitoring.MetricsPort }

func backend(tj *mlv1.TrainingJob) mlv1.Backend {
	if n := tj.Spec.Networking; n != nil && n.Backend != "" {
		return n.Backend
	}
	if gpusPerWorker(tj) > 0 {
		return mlv1.BackendNCCL
	}
	return mlv1.BackendGloo
}

func rdmaEnabled(tj *mlv1.TrainingJob) bool {
	n := tj.Spec.Networking
	return n != nil && n.RDMAEnabled != nil && *n.RDMAEnabled
}

// RestartPolicy is failurePolicy.restartPolicy, Gang when unset.
func RestartPolicy(tj *mlv1.TrainingJob) mlv1.RestartPolicy {
	return tj.Spec.FailurePolicy.RestartPolicy
}

// BackoffLimit is failurePolicy.backoffLimit, 3 when unset.
func BackoffLimit(tj *mlv1.TrainingJob) int32 { return *tj.Spec.FailurePolicy.BackoffLimit }

// OnHang is failurePolicy.onHang, Restart when unset.
func OnHang(tj *mlv1.TrainingJob) mlv1.HangAction {
	if f := tj.Spec.FailurePolicy; f != nil && f.OnHang != "" {
		return f.OnHang
	}
	return mlv1.DefaultOnHang
}

// Image is the worker image: spec.image, else the operator's default for the framework.
func Image(tj *mlv1.TrainingJob, opts Options) string {
	if tj.Spec.Image != "" {
		return tj.Spec.Image
	}
	return opts.DefaultImages[framework(tj)]
}

// Suspended reports whether spec.suspend is true.
func Suspended(tj *mlv1.TrainingJob) bool {
	return tj.Spec.Suspend != nil && *tj.Spec.Suspend
}

// CleanPodPolicy is spec.cleanup.cleanPodPolicy, Running when unset.
func CleanPodPolicy(tj *mlv1.TrainingJob) mlv1.CleanPodPolicy { return tj.Spec.Cleanup.CleanPodPolicy }
