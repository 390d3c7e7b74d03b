package builders

import (
	corev1 "k8s.io/api/core/v1"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// trackingEnv points the training program's own experiment-tracking calls at what monitoring names, so
// that they need no configuration of their own. MLflow: the tracking server, and the experiment (the
// namespace) the operator's run of the job belongs to. Weights & Biases: the project, every rank of the
// job in one group named after it, and a run per rank whose id is derived from the job's uid and the rank,
// so a restarted rank resumes its run instead of starting another. All are defaults: spec.env may set them.
func trackingEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	m := tj.Spec.Monitoring
	if m == nil {
		return nil
	}
	var env []corev1.EnvVar
	if m.MLflowTrackingURI != "" {
		env = append(env, value("MLFLOW_TRACKING_URI", m.MLflowTrackingURI), value("MLFLOW_EXPERIMENT_NAME", tj.Namespace))
	}
	if m.WandbProject != "" {
		id := string(tj.UID)
		if id == "" { // an object not created yet (tests)
			id = tj.Namespace + "-" + tj.Name
		}
		env = append(env,
			value("WANDB_PROJECT", m.WandbProject),
			value("WANDB_RUN_GROUP", tj.Name),
			value("WANDB_RUN_ID", id+"-rank-$(RANK)"),
			value("WANDB_NAME", tj.Name+"-rank-$(RANK)"),
			value("WANDB_RESUME", "allow"),
		)
	}
	return env
}
