package builders

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// WorkerEnv returns the environment of every worker container: the injected contract (documented in
// docs/frameworks.md) followed by spec.env, whose entries replace the operator's defaults of the same name
// (admission keeps spec.env off the reserved names). Entries may refer to earlier ones with $(NAME), which
// the kubelet expands, so spec.env may use every injected variable.
func WorkerEnv(tj *mlv1.TrainingJob, opts Options) []corev1.EnvVar {
	env := identityEnv(tj)
	env = append(env, rendezvousEnv(tj)...)
	env = append(env, frameworkEnv(tj)...)
	env = append(env, backendEnv(tj)...)
	env = append(env, mpiEnv(tj)...)
	env = append(env, gpuVisibilityEnv(tj)...)
	env = append(env, trackingEnv(tj, opts)...)
	env = append(env, checkpointEnv(tj)...)
	env = append(env, inputsEnv(tj)...)
	return overrideEnv(env, tj.Spec.Env)
}

// overrideEnv returns env without the names user sets, followed by user: one entry per name.
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
		value("TRAININGJOB_CONFIG", names.ConfigMountPath+"/"+names.ConfigFileName),
		value("METRICS_PORT", itoa(tj.MetricsPort())),
		value("PYTHONUNBUFFERED", "1"),
		podIPEnv(),
	}
}

// podIPEnv returns POD_IP, read from the pod's status.
func podIPEnv() corev1.EnvVar {
	return corev1.EnvVar{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}
}

// rankEnv returns RANK, read from the pod's completion index.
func rankEnv() corev1.EnvVar {
	return corev1.EnvVar{Name: "RANK", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		FieldPath: fmt.Sprintf("metadata.annotations['%s']", names.RankAnnotation),
	}}}
}

// rendezvousEnv returns the rendezvous variables, following Kubeflow's PyTorchJob: one process per pod, so
// RANK is the pod's index and LOCAL_RANK 0 (a launcher such as torchrun sets its own children's RANK,
// LOCAL_RANK and WORLD_SIZE).
func rendezvousEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	env := []corev1.EnvVar{rankEnv(), value("NODE_RANK", "$(RANK)")}
	if tj.Spec.Elastic == nil { // an elastic job's size changes under its immutable pod template
		env = append(env, value("WORLD_SIZE", itoa(tj.Spec.NumWorkers)))
	}
	return append(env,
		value("LOCAL_RANK", "0"),
		value("LOCAL_WORLD_SIZE", "1"),
		value("MASTER_ADDR", names.WorkerDNSName(tj, 0)),
		value("MASTER_PORT", itoa(tj.Spec.Networking.MasterPort)),
		value("DIST_BACKEND", string(tj.Backend())),
	)
}

func frameworkEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	switch tj.Spec.Framework {
	case mlv1.FrameworkTensorFlow:
		return []corev1.EnvVar{value("TF_CONFIG", tfConfig(tj))}
	case mlv1.FrameworkJAX:
		return jaxEnv(tj)
	case mlv1.FrameworkXGBoost:
		return xgboostEnv(tj)
	case mlv1.FrameworkPaddle:
		return []corev1.EnvVar{
			value("PADDLE_MASTER", "$(MASTER_ADDR):$(MASTER_PORT)"),
			value("PADDLE_NNODES", itoa(tj.Spec.NumWorkers)),
			value("PADDLE_JOB_ID", tj.Name),
		}
	default:
		return torchrunEnv(tj)
	}
}

// ClusterDomain is the cluster's DNS domain, which an elastic job's rendezvous endpoint names (see
// torchrunEnv).
const ClusterDomain = "cluster.local"

// torchrunEnv returns what torchrun reads. A fixed-size job: rank 0 is the master, each pod a node of
// PET_NPROC_PER_NODE processes. An elastic one: c10d rendezvous at rank 0's fully qualified name (the
// name rank 0's /etc/hosts gives as its own canonical name, which is how torchrun's agent on rank 0 knows
// it must host the rendezvous store), between minWorkers and maxWorkers nodes, ranks assigned by the
// rendezvous.
func torchrunEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	nproc := max(tj.GPUsPerWorker(), 1)
	if e := tj.Spec.Elastic; e != nil {
		return []corev1.EnvVar{
			value("PET_NNODES", fmt.Sprintf("%d:%d", e.MinWorkers, e.MaxWorkers)),
			value("PET_NPROC_PER_NODE", itoa(nproc)),
			value("PET_RDZV_BACKEND", "c10d"),
			value("PET_RDZV_ENDPOINT", names.WorkerDNSName(tj, 0)+"."+ClusterDomain+":$(MASTER_PORT)"),
			value("PET_RDZV_ID", tj.Name),
			value("PET_MAX_RESTARTS", itoa(*e.MaxRestarts)),
		}
	}
	return []corev1.EnvVar{
		value("PET_MASTER_ADDR", "$(MASTER_ADDR)"),
		value("PET_MASTER_PORT", "$(MASTER_PORT)"),
		value("PET_NNODES", itoa(tj.Spec.NumWorkers)),
		value("PET_NODE_RANK", "$(RANK)"),
		value("PET_NPROC_PER_NODE", itoa(nproc)),
	}
}

// jaxEnv returns JAX's variables. jax.distributed.initialize reads JAX_COORDINATOR_ADDRESS and
// JAX_COORDINATOR_BIND_ADDRESS itself (rank 0's coordinator then listens on its own pod address only), but
// not the process count or id: scripts pass JAX_NUM_PROCESSES and JAX_PROCESS_ID (see docs/frameworks.md).
// COORDINATOR_ADDRESS, COORDINATOR_PORT, NUM_PROCESSES and PROCESS_ID are what Kubeflow's JAXJob sets, so
// its scripts run unchanged.
func jaxEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	return []corev1.EnvVar{
		value("JAX_COORDINATOR_ADDRESS", "$(MASTER_ADDR):$(MASTER_PORT)"),
		value("JAX_COORDINATOR_BIND_ADDRESS", "$(POD_IP):$(MASTER_PORT)"),
		value("JAX_NUM_PROCESSES", itoa(tj.Spec.NumWorkers)),
		value("JAX_PROCESS_ID", "$(RANK)"),
		value("COORDINATOR_ADDRESS", "$(MASTER_ADDR)"),
		value("COORDINATOR_PORT", "$(MASTER_PORT)"),
		value("NUM_PROCESSES", itoa(tj.Spec.NumWorkers)),
		value("PROCESS_ID", "$(RANK)"),
	}
}

// xgboostEnv returns XGBoost's variables: rank 0 runs the Rabit tracker on MASTER_PORT and every rank
// (rank 0 too) joins it as a worker through the DMLC_* variables. WORKER_ADDRS and WORKER_PORT (the other
// ranks, set with more than one worker) are what Kubeflow's XGBoostJob sets for LightGBM.
func xgboostEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	env := []corev1.EnvVar{
		value("DMLC_TRACKER_URI", "$(MASTER_ADDR)"),
		value("DMLC_TRACKER_PORT", "$(MASTER_PORT)"),
		value("DMLC_NUM_WORKER", itoa(tj.Spec.NumWorkers)),
		value("DMLC_TASK_ID", "$(RANK)"),
	}
	if tj.Spec.NumWorkers < 2 {
		return env
	}
	others := make([]string, tj.Spec.NumWorkers-1)
	for i := range others {
		others[i] = names.WorkerDNSName(tj, int32(i+1))
	}
	return append(env, value("WORKER_ADDRS", strings.Join(others, ",")), value("WORKER_PORT", "$(MASTER_PORT)"))
}

// tfConfig returns TF_CONFIG for MultiWorkerMirroredStrategy: every worker's address, and this worker's index
// through $(RANK) expansion (the task index is the only per-pod part).
func tfConfig(tj *mlv1.TrainingJob) string {
	workers := make([]string, tj.Spec.NumWorkers)
	for i := range workers {
		workers[i] = names.WorkerDNSName(tj, int32(i)) + ":" + itoa(tj.Spec.Networking.MasterPort)
	}
	cluster, _ := json.Marshal(map[string][]string{"worker": workers}) // a map of strings always marshals
	return `{"cluster":` + string(cluster) + `,"task":{"type":"worker","index":$(RANK)}}`
}

func backendEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	if tj.Backend() != mlv1.BackendNCCL {
		return nil
	}
	disable := "1"
	if tj.RDMAEnabled() {
		disable = "0"
	}
	return []corev1.EnvVar{value("NCCL_IB_DISABLE", disable)}
}

// gpuVisibilityEnv returns NVIDIA_VISIBLE_DEVICES=void for workers that asked for no GPU, which hides
// every GPU from them: CUDA images set NVIDIA_VISIBLE_DEVICES=all, with which the NVIDIA container runtime
// (in its default configuration) hands all of a node's GPUs to a container that requested no GPU resource;
// "void" makes it expose none. A default: spec.env may set it. Nil for workers with GPUs.
func gpuVisibilityEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	if tj.GPUsPerWorker() > 0 {
		return nil
	}
	return []corev1.EnvVar{value("NVIDIA_VISIBLE_DEVICES", "void")}
}

func value(name, v string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: v} }

func itoa(i int32) string { return strconv.Itoa(int(i)) }
