package builders

import (
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// ReservedEnvNames are the environment variables that carry a worker's identity, the rendezvous and the
// checkpoint location. spec.env may not set them; the CRD's CEL rule on spec.env lists the same names (a
// test keeps the two equal).
var ReservedEnvNames = []string{
	"MASTER_ADDR", "MASTER_PORT", "RANK", "NODE_RANK", "WORLD_SIZE",
	"PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE",
	"TF_CONFIG", "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID",
	"TRAININGJOB_NAME", "TRAININGJOB_NAMESPACE", "TRAININGJOB_CONFIG", "MODEL_NAME", "DATASET_NAME",
	"METRICS_PORT", "DIST_BACKEND", "POD_IP",
	"CHECKPOINT_DIR", "CHECKPOINT_URI", "CHECKPOINT_FREQUENCY", "RESUME_FROM",
}

// DefaultEnvNames are the variables the operator sets only as defaults: when spec.env names one, the
// user's entry replaces the operator's.
var DefaultEnvNames = []string{
	"PYTHONUNBUFFERED", "NCCL_IB_DISABLE", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "GOOGLE_APPLICATION_CREDENTIALS",
}

// WorkerEnv is the environment of every worker container: the injected contract (documented in the
// README) followed by spec.env, whose entries replace the operator's defaults of the same name (admission
// keeps spec.env off the reserved names). Entries may refer to earlier ones with $(NAME), which the
// kubelet expands, so spec.env may use every injected variable.
func WorkerEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	env := identityEnv(tj)
	env = append(env, rendezvousEnv(tj)...)
	env = append(env, frameworkEnv(tj)...)
	env = append(env, backendEnv(tj)...)
	env = append(env, checkpointEnv(tj)...)
	return overrideEnv(env, tj.Spec.Env)
}

// overrideEnv is env without the names user sets, followed by user: one entry per name.
func overrideEnv(env, user []corev1.EnvVar) []corev1.EnvVar {
	set := make(map[string]bool, len(user))
	for _, e := range user {
		set[e.Name] = true
	}
	out := make([]corev1.EnvVar, 0, len(env)+len(user))
	for _, e := range env {
		if !set[e.Name] {
			out = append(out, e)
		}
	}
	return append(out, user...)
}

func identityEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	return []corev1.EnvVar{
		value("TRAININGJOB_NAME", tj.Name),
		value("TRAININGJOB_NAMESPACE", tj.Namespace),
		value("MODEL_NAME", tj.Spec.Model),
		value("DATASET_NAME", tj.Spec.Dataset),
		value("TRAININGJOB_CONFIG", ConfigMountPath+"/"+ConfigFileName),
		value("METRICS_PORT", itoa(metricsPort(tj))),
		value("PYTHONUNBUFFERED", "1"),
		podIPEnv(),
	}
}

// rendezvousEnv follows Kubeflow's PyTorchJob: one process per pod, RANK is the pod's index.
// podIPEnv is POD_IP from the pod's status.
func podIPEnv() corev1.EnvVar {
	return corev1.EnvVar{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}
}

// rankEnv is RANK from the pod's completion index.
func rankEnv() corev1.EnvVar {
	return corev1.EnvVar{Name: "RANK", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		FieldPath: fmt.Sprintf("metadata.annotations['%s']", RankAnnotation),
	}}}
}

func rendezvousEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	return []corev1.EnvVar{
		rankEnv(),
		value("NODE_RANK", "$(RANK)"),
		value("WORLD_SIZE", itoa(tj.Spec.NumWorkers)),
		value("MASTER_ADDR", WorkerDNSName(tj, 0)),
		value("MASTER_PORT", itoa(masterPort(tj))),
		value("DIST_BACKEND", string(backend(tj))),
	}
}

func frameworkEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	switch framework(tj) {
	case mlv1.FrameworkTensorFlow:
		return []corev1.EnvVar{value("TF_CONFIG", tfConfig(tj))}
	case mlv1.FrameworkJAX:
		return []corev1.EnvVar{
			value("JAX_COORDINATOR_ADDRESS", "$(MASTER_ADDR):$(MASTER_PORT)"),
			value("JAX_NUM_PROCESSES", itoa(tj.Spec.NumWorkers)),
			value("JAX_PROCESS_ID", "$(RANK)"),
		}
	default:
		nproc := gpusPerWorker(tj)
		if nproc == 0 {
			nproc = 1
		}
		return []corev1.EnvVar{
			value("PET_MASTER_ADDR", "$(MASTER_ADDR)"),
			value("PET_MASTER_PORT", "$(MASTER_PORT)"),
			value("PET_NNODES", itoa(tj.Spec.NumWorkers)),
			value("PET_NODE_RANK", "$(RANK)"),
			value("PET_NPROC_PER_NODE", itoa(nproc)),
		}
	}
}

// tfConfig is TF_CONFIG for MultiWorkerMirroredStrategy: every worker's address, and this worker's index
// through $(RANK) expansion (the task index is the only per-pod part).
func tfConfig(tj *mlv1.TrainingJob) string {
	workers := make([]string, tj.Spec.NumWorkers)
	for i := range workers {
		workers[i] = WorkerDNSName(tj, int32(i)) + ":" + itoa(masterPort(tj))
	}
	cluster, _ := json.Marshal(map[string][]string{"worker": workers}) // a map of strings always marshals
	return `{"cluster":` + string(cluster) + `,"task":{"type":"worker","index":$(RANK)}}`
}

func backendEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	if backend(tj) != mlv1.BackendNCCL {
		return nil
	}
	disable := "1"
	if rdmaEnabled(tj) {
		disable = "0"
	}
	return []corev1.EnvVar{value("NCCL_IB_DISABLE", disable)}
}

func value(name, v string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: v} }

func itoa(i int32) string { return strconv.Itoa(int(i)) }
