package builders

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// The job's MLflow run (see package tracking and the TrackingController) reaches the workers through
// the ConfigMap: its run and experiment ids are keys the TrackingController alone writes, read by
// configMapKeyRef when a container starts, and it marks the ConfigMap with names.TrackingSettledAnnotation once
// it has tried to create the run. The JobController creates a tracked job's first Job only after that
// mark, so workers start with MLFLOW_RUN_ID whenever the tracking server answered in time; when it did
// not, they start without it (the training is never held up by the tracking server) and the workers of
// a later attempt get it.
// (The keys and the annotation are in package names: names.MLflowRunIDKey, names.MLflowExperimentIDKey,
// names.TrackingSettledAnnotation.)

// MLflow's own variables for credentials: the keys of monitoring.mlflowCredentialsSecret, and the
// workers' environment variables.
const (
	MLflowTokenKey    = "MLFLOW_TRACKING_TOKEN"
	MLflowUsernameKey = "MLFLOW_TRACKING_USERNAME"
	MLflowPasswordKey = "MLFLOW_TRACKING_PASSWORD"
)

// MLflowTrackingURI returns the tracking server of the job's run: monitoring.mlflowTrackingUri, else the
// operator's default; "" when the job is not tracked.
func MLflowTrackingURI(tj *mlv1.TrainingJob, opts Options) string {
	if m := tj.Spec.Monitoring; m.MLflowTrackingURI != "" {
		return m.MLflowTrackingURI
	}
	return opts.MLflowTrackingURI
}

// MLflowExperiment returns the experiment of the job's run: monitoring.mlflowExperiment, else the namespace.
func MLflowExperiment(tj *mlv1.TrainingJob) string {
	if m := tj.Spec.Monitoring; m.MLflowExperiment != "" {
		return m.MLflowExperiment
	}
	return tj.Namespace
}

// MLflowCredentialsSecret returns the Secret of the job's namespace holding its tracking credentials; "" for none.
func MLflowCredentialsSecret(tj *mlv1.TrainingJob) string {
	return tj.Spec.Monitoring.MLflowCredentialsSecret
}

// trackingEnv returns the variables that point the training program's own experiment-tracking calls at what
// monitoring names, so that they need no configuration of their own. MLflow: the tracking server, the
// experiment and run the operator keeps for the job (mlflow.start_run() then continues that run), and the
// credentials of mlflowCredentialsSecret. Weights & Biases: the project, every rank of the job in one group
// named after it, and a run per rank whose id is derived from the job's uid and the rank, so a restarted
// rank resumes its run instead of starting another. All are defaults: spec.env may set them.
func trackingEnv(tj *mlv1.TrainingJob, opts Options) []corev1.EnvVar {
	var env []corev1.EnvVar
	if uri := MLflowTrackingURI(tj, opts); uri != "" {
		env = append(env, value("MLFLOW_TRACKING_URI", uri), value("MLFLOW_EXPERIMENT_NAME", MLflowExperiment(tj)),
			configMapKeyEnv(tj, names.MLflowExperimentIDKey), configMapKeyEnv(tj, names.MLflowRunIDKey))
		if s := MLflowCredentialsSecret(tj); s != "" {
			for _, key := range []string{MLflowTokenKey, MLflowUsernameKey, MLflowPasswordKey} {
				env = append(env, corev1.EnvVar{Name: key, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: s}, Key: key, Optional: ptrTo(true)}}})
			}
		}
	}
	if m := tj.Spec.Monitoring; m.WandbProject != "" {
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

// configMapKeyEnv returns the variable key of the job's ConfigMap, read when a container starts; unset
// while the ConfigMap has no such key.
func configMapKeyEnv(tj *mlv1.TrainingJob, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: key, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: names.ConfigMapName(tj)}, Key: key, Optional: ptrTo(true),
	}}}
}
