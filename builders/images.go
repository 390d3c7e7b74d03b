package builders

import mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"

// DefaultImages returns the images used when spec.image is empty, by framework (PyTorch, TensorFlow and
// JAX; the other frameworks have none), unless the manager's --default-image-<framework> flags say otherwise.
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

// runsDefault reports whether the workers run the framework's default image as it is (no image, command or args).
func runsDefault(tj *mlv1.TrainingJob) bool {
	return tj.Spec.Image == "" && len(tj.Spec.Command) == 0 && len(tj.Spec.Args) == 0
}

// UsesRunner reports whether the workers run the default runner (see RunnerCommand).
func UsesRunner(tj *mlv1.TrainingJob) bool {
	return runsDefault(tj) && tj.Spec.Framework == mlv1.FrameworkPyTorch
}

// NoTrainingProgram reports whether the workers run a default image that has no training program (every
// framework's but PyTorch's, whose image has the runner) with neither command nor args: its default
// command is a shell, which exits at once, so such a job would end "successfully" having trained nothing.
func NoTrainingProgram(tj *mlv1.TrainingJob) bool { return runsDefault(tj) && !UsesRunner(tj) }

// Image returns the worker image: spec.image, else the operator's default for the framework ("" when it has none).
func Image(tj *mlv1.TrainingJob, opts Options) string {
	if tj.Spec.Image != "" {
		return tj.Spec.Image
	}
	return opts.DefaultImages[tj.Spec.Framework]
}
