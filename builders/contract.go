package builders

import (
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// ContractVar is one variable of the worker environment contract. The "Environment contract"
// table of docs/frameworks.md lists each (a test checks the two against each other), and WorkerEnv sets
// only these.
type ContractVar struct {
	Name string
	// Frameworks that get it; empty: every framework.
	Frameworks []mlv1.Framework
	// Backend: only jobs with this networking.backend get it; empty: any.
	Backend mlv1.Backend
	// Reserved names carry the job's identity, the rendezvous or the checkpoint location: spec.env may not
	// set them (the CRD's CEL rule on spec.env lists the same names). The others are defaults that an
	// entry of spec.env of the same name replaces.
	Reserved bool
}

// Contract is the worker environment contract, in the order WorkerEnv sets it.
var Contract = []ContractVar{
	reserved("TRAININGJOB_NAME"), reserved("TRAININGJOB_NAMESPACE"), reserved("MODEL_NAME"), reserved("DATASET_NAME"),
	reserved("TRAININGJOB_CONFIG"), reserved("METRICS_PORT"), {Name: "PYTHONUNBUFFERED"}, reserved("POD_IP"),
	reserved("RANK"), reserved("NODE_RANK"), reserved("WORLD_SIZE"), reserved("LOCAL_RANK"), reserved("LOCAL_WORLD_SIZE"),
	reserved("MASTER_ADDR"), reserved("MASTER_PORT"), reserved("DIST_BACKEND"),
	reserved("PET_MASTER_ADDR", mlv1.FrameworkPyTorch), reserved("PET_MASTER_PORT", mlv1.FrameworkPyTorch),
	reserved("PET_NNODES", mlv1.FrameworkPyTorch), reserved("PET_NODE_RANK", mlv1.FrameworkPyTorch),
	reserved("PET_NPROC_PER_NODE", mlv1.FrameworkPyTorch), reserved("PET_RDZV_BACKEND", mlv1.FrameworkPyTorch),
	reserved("PET_RDZV_ENDPOINT", mlv1.FrameworkPyTorch), reserved("PET_RDZV_ID", mlv1.FrameworkPyTorch),
	reserved("PET_MAX_RESTARTS", mlv1.FrameworkPyTorch),
	reserved("TF_CONFIG", mlv1.FrameworkTensorFlow),
	reserved("JAX_COORDINATOR_ADDRESS", mlv1.FrameworkJAX), reserved("JAX_COORDINATOR_BIND_ADDRESS", mlv1.FrameworkJAX),
	reserved("JAX_NUM_PROCESSES", mlv1.FrameworkJAX), reserved("JAX_PROCESS_ID", mlv1.FrameworkJAX),
	defaulted("COORDINATOR_ADDRESS", mlv1.FrameworkJAX), defaulted("COORDINATOR_PORT", mlv1.FrameworkJAX),
	defaulted("NUM_PROCESSES", mlv1.FrameworkJAX), defaulted("PROCESS_ID", mlv1.FrameworkJAX),
	reserved("DMLC_TRACKER_URI", mlv1.FrameworkXGBoost), reserved("DMLC_TRACKER_PORT", mlv1.FrameworkXGBoost),
	reserved("DMLC_NUM_WORKER", mlv1.FrameworkXGBoost), reserved("DMLC_TASK_ID", mlv1.FrameworkXGBoost),
	defaulted("WORKER_ADDRS", mlv1.FrameworkXGBoost), defaulted("WORKER_PORT", mlv1.FrameworkXGBoost),
	reserved("PADDLE_MASTER", mlv1.FrameworkPaddle), reserved("PADDLE_NNODES", mlv1.FrameworkPaddle),
	reserved("PADDLE_JOB_ID", mlv1.FrameworkPaddle),
	{Name: "NCCL_IB_DISABLE"},
	mpi("MPI_HOSTS"), mpi("MPI_SSH_DIR"), mpi("MPI_RUN_DIR"), mpi("OMPI_MCA_orte_default_hostfile"), mpi("OMPI_MCA_plm_rsh_args"),
	mpi("OMPI_MCA_orte_keep_fqdn_hostnames"),
	mpi("OMPI_ALLOW_RUN_AS_ROOT"), mpi("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"), mpi("I_MPI_HYDRA_HOST_FILE"), mpi("I_MPI_HYDRA_BOOTSTRAP"),
	mpi("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS"), mpi("HYDRA_HOST_FILE"), mpi("HYDRA_LAUNCHER_EXTRA_ARGS"),
	{Name: "NVIDIA_VISIBLE_DEVICES"},
	{Name: "MLFLOW_TRACKING_URI"}, {Name: "MLFLOW_EXPERIMENT_NAME"}, {Name: names.MLflowExperimentIDKey}, {Name: names.MLflowRunIDKey},
	{Name: MLflowTokenKey}, {Name: MLflowUsernameKey}, {Name: MLflowPasswordKey}, {Name: "WANDB_PROJECT"}, {Name: "WANDB_RUN_GROUP"},
	{Name: "WANDB_RUN_ID"}, {Name: "WANDB_NAME"}, {Name: "WANDB_RESUME"},
	reserved("CHECKPOINT_DIR"), reserved("CHECKPOINT_URI"), reserved("CHECKPOINT_FREQUENCY"), reserved("RESUME_FROM"),
	reserved(CheckpointOnSigtermEnv), reserved("TENSORBOARD_LOG_DIR"),
	{Name: "AWS_ENDPOINT_URL_S3"}, {Name: "AWS_REGION"}, {Name: "GOOGLE_APPLICATION_CREDENTIALS"},
	reserved("MODEL_DIR"), reserved("DATASET_DIR"),
}

func reserved(name string, fw ...mlv1.Framework) ContractVar {
	return ContractVar{Name: name, Frameworks: fw, Reserved: true}
}

// mpi returns the contract variable name, set (as a default) only with networking.backend mpi.
func mpi(name string) ContractVar { return ContractVar{Name: name, Backend: mlv1.BackendMPI} }

func defaulted(name string, fw ...mlv1.Framework) ContractVar {
	return ContractVar{Name: name, Frameworks: fw}
}

// ReservedEnvNames are the contract's reserved names: spec.env may not set them; the CRD's CEL rule on
// spec.env lists the same names (a test keeps the two equal).
var ReservedEnvNames = contractNames(true)

// DefaultEnvNames are the variables the operator sets only as defaults: when spec.env names one, the
// user's entry replaces the operator's.
var DefaultEnvNames = contractNames(false)

func contractNames(reserved bool) []string {
	var out []string
	for _, v := range Contract {
		if v.Reserved == reserved {
			out = append(out, v.Name)
		}
	}
	return out
}
