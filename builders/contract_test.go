package builders_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestContractMatchesDocs: the "Environment contract" table of docs/frameworks.md lists exactly
// builders.Contract's names, each with its kind (reserved or default).
func TestContractMatchesDocs(t *testing.T) {
	data, err := os.ReadFile("../docs/frameworks.md")
	if err != nil {
		t.Fatal(err)
	}
	section, _, _ := strings.Cut(strings.SplitN(string(data), "## Environment contract", 2)[1], "\n## ")
	name := regexp.MustCompile("`([A-Z][A-Za-z0-9_]+)`")
	got := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.Contains(cells[1], "`") {
			continue
		}
		kind := strings.TrimSpace(cells[len(cells)-2])
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			got[m[1]] = kind
		}
	}
	want := map[string]string{}
	for _, v := range builders.Contract {
		want[v.Name] = map[bool]string{true: "reserved", false: "default"}[v.Reserved]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("docs/frameworks.md's contract table vs builders.Contract (-want +got):\n%s", diff)
	}
}

// TestWorkerEnvFollowsContract: for every framework, the injected names are the contract's names for that
// framework, each once, in the contract's order; every name of the contract is injected by some job.
func TestWorkerEnvFollowsContract(t *testing.T) {
	s3 := func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Storage: &mlv1.CheckpointStorage{
			Type: mlv1.StorageS3, S3Bucket: "b", Endpoint: "http://s3", Region: "r"}}
		tj.Spec.Monitoring = &mlv1.MonitoringSpec{MLflowTrackingURI: "http://mlflow:5000", MLflowCredentialsSecret: "mlflow", WandbProject: "p"}
	}
	gcs := func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Storage: &mlv1.CheckpointStorage{
			Type: mlv1.StorageGCS, GCSBucket: "b", SecretRef: &corev1.LocalObjectReference{Name: "key"}}}
	}
	pvc := func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), OnPreemption: true}
		tj.Spec.Monitoring = &mlv1.MonitoringSpec{TensorboardEnabled: ptr.To(true)}
	}
	chosen := func(tj *mlv1.TrainingJob) {
		tj.Status.CheckpointStorage = &mlv1.CheckpointStorage{Type: mlv1.StoragePVC}
	}
	nccl := func(tj *mlv1.TrainingJob) { tj.Spec.Networking = &mlv1.NetworkingSpec{Backend: mlv1.BackendNCCL} }
	mpi := func(tj *mlv1.TrainingJob) { tj.Spec.Networking = &mlv1.NetworkingSpec{Backend: mlv1.BackendMPI} }
	elastic := func(tj *mlv1.TrainingJob) { tj.Spec.Elastic = &mlv1.ElasticSpec{MinWorkers: 1, MaxWorkers: 4} }
	sources := func(tj *mlv1.TrainingJob) { tj.Spec.Model, tj.Spec.Dataset = "s3://models/bert", "pvc://coco/train" }
	order := map[string]int{}
	for i, v := range builders.Contract {
		order[v.Name] = i
	}
	seen := map[string]bool{}
	for _, fw := range mlv1.Frameworks {
		for _, tj := range []*mlv1.TrainingJob{
			tjtest.NewTJ("ns", "x").Framework(fw).GPUs(0).With(s3).Obj(),
			tjtest.NewTJ("ns", "x").Framework(fw).GPUs(2).With(gcs).With(nccl).Obj(),
			tjtest.NewTJ("ns", "x").Framework(fw).Workers(1).GPUs(1).With(pvc).With(chosen).Obj(),
			tjtest.NewTJ("ns", "x").Framework(fw).GPUs(0).With(mpi).Obj(),
			tjtest.NewTJ("ns", "x").Framework(fw).With(elastic).With(sources).Obj(),
		} {
			last := -1
			for _, e := range builders.WorkerEnv(tj, builders.Options{}) {
				i, ok := order[e.Name]
				switch {
				case !ok:
					t.Errorf("%s: injected %s is not in builders.Contract", fw, e.Name)
				case i <= last:
					t.Errorf("%s: %s out of the contract's order, or twice", fw, e.Name)
				case len(builders.Contract[i].Frameworks) > 0 && !slices.Contains(builders.Contract[i].Frameworks, fw):
					t.Errorf("%s: injected %s, which the contract gives only to %v", fw, e.Name, builders.Contract[i].Frameworks)
				case builders.Contract[i].Backend != "" && (tj.Spec.Networking == nil || tj.Spec.Networking.Backend != builders.Contract[i].Backend):
					t.Errorf("%s: injected %s, which the contract gives only to backend %s", fw, e.Name, builders.Contract[i].Backend)
				}
				last, seen[e.Name] = i, true
			}
		}
	}
	for _, v := range builders.Contract {
		if !seen[v.Name] {
			t.Errorf("%s is in the contract but no job gets it", v.Name)
		}
	}
}

// TestFrameworkEnv: the values each framework's launcher reads, and names that must be absent.
func TestFrameworkEnv(t *testing.T) {
	cases := []struct {
		name   string
		tj     *mlv1.TrainingJob
		want   map[string]string
		absent []string
	}{
		{
			name:   "one process per pod",
			tj:     tjtest.NewTJ("ml", "a").Obj(),
			want:   map[string]string{"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "WORLD_SIZE": "2"},
			absent: nil,
		},
		{
			name: "jax: JAX's own names and Kubeflow's",
			tj:   tjtest.NewTJ("ml", "a").Framework(mlv1.FrameworkJAX).Obj(),
			want: map[string]string{
				"JAX_COORDINATOR_ADDRESS": "$(MASTER_ADDR):$(MASTER_PORT)", "JAX_COORDINATOR_BIND_ADDRESS": "$(POD_IP):$(MASTER_PORT)",
				"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "$(RANK)", "COORDINATOR_ADDRESS": "$(MASTER_ADDR)",
				"COORDINATOR_PORT": "$(MASTER_PORT)", "NUM_PROCESSES": "2", "PROCESS_ID": "$(RANK)"},
			absent: []string{"PET_NNODES"},
		},
		{
			name: "xgboost: the tracker on rank 0, the other ranks for LightGBM",
			tj:   tjtest.NewTJ("ml", "a").Workers(3).Framework(mlv1.FrameworkXGBoost).Obj(),
			want: map[string]string{
				"DMLC_TRACKER_URI": "$(MASTER_ADDR)", "DMLC_TRACKER_PORT": "$(MASTER_PORT)", "DMLC_NUM_WORKER": "3", "DMLC_TASK_ID": "$(RANK)",
				"WORKER_ADDRS": "a-worker-1.a-headless.ml.svc,a-worker-2.a-headless.ml.svc", "WORKER_PORT": "$(MASTER_PORT)"},
			absent: nil,
		},
		{
			name: "xgboost alone has no other ranks",
			tj:   tjtest.NewTJ("ml", "a").Workers(1).Framework(mlv1.FrameworkXGBoost).Obj(),
			want: map[string]string{
				"DMLC_TRACKER_URI": "$(MASTER_ADDR)", "DMLC_TRACKER_PORT": "$(MASTER_PORT)", "DMLC_NUM_WORKER": "1", "DMLC_TASK_ID": "$(RANK)"},
			absent: []string{"WORKER_ADDRS", "WORKER_PORT"},
		},
		{
			name: "elastic pytorch: c10d at rank 0's fully qualified name, no fixed size",
			tj: tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Elastic = &mlv1.ElasticSpec{MinWorkers: 2, MaxWorkers: 8, MaxRestarts: ptr.To[int32](5)}
			}).Obj(),
			want: map[string]string{"PET_NNODES": "2:8", "PET_RDZV_BACKEND": "c10d",
				"PET_RDZV_ENDPOINT": "a-worker-0.a-headless.ml.svc.cluster.local:$(MASTER_PORT)",
				"PET_RDZV_ID":       "a", "PET_MAX_RESTARTS": "5"},
			absent: []string{"WORLD_SIZE", "PET_MASTER_ADDR", "PET_NODE_RANK"},
		},
		{
			name: "paddle: collective mode",
			tj:   tjtest.NewTJ("ml", "a").Framework(mlv1.FrameworkPaddle).Obj(),
			want: map[string]string{
				"PADDLE_MASTER": "$(MASTER_ADDR):$(MASTER_PORT)", "PADDLE_NNODES": "2", "PADDLE_JOB_ID": "a"},
			absent: nil,
		},
		{
			name: "tracking: MLflow's server and experiment, one W&B group with a run per rank",
			tj: tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
				tj.UID = "u-1"
				tj.Spec.Monitoring = &mlv1.MonitoringSpec{MLflowTrackingURI: "http://mlflow:5000", WandbProject: "vision"}
			}).Obj(),
			want: map[string]string{"MLFLOW_TRACKING_URI": "http://mlflow:5000", "MLFLOW_EXPERIMENT_NAME": "ml", "WANDB_PROJECT": "vision",
				"WANDB_RUN_GROUP": "a", "WANDB_RUN_ID": "u-1-rank-$(RANK)", "WANDB_NAME": "a-rank-$(RANK)", "WANDB_RESUME": "allow",
				"MLFLOW_RUN_ID": "", "MLFLOW_EXPERIMENT_ID": ""},
			absent: []string{"MLFLOW_TRACKING_TOKEN"},
		},
		{
			name:   "no tracking configured",
			tj:     tjtest.NewTJ("ml", "a").Obj(),
			want:   map[string]string{},
			absent: []string{"MLFLOW_TRACKING_URI", "WANDB_PROJECT"},
		},
		{
			name:   "CPU-only workers see no GPU",
			tj:     tjtest.NewTJ("ml", "a").GPUs(0).Obj(),
			want:   map[string]string{"NVIDIA_VISIBLE_DEVICES": "void"},
			absent: nil,
		},
		{
			name:   "GPU workers see theirs",
			tj:     tjtest.NewTJ("ml", "a").GPUs(1).Obj(),
			want:   map[string]string{},
			absent: []string{"NVIDIA_VISIBLE_DEVICES"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]string{}
			for _, e := range builders.WorkerEnv(tc.tj, builders.Options{}) {
				if _, ok := tc.want[e.Name]; ok || slices.Contains(tc.absent, e.Name) {
					got[e.Name] = e.Value
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTrackingEnv: the operator's default tracking server applies to jobs that name none; the job's own
// wins; the run's ids come from the ConfigMap and the credentials from the named Secret, both optional.
func TestTrackingEnv(t *testing.T) {
	opts := builders.Options{MLflowTrackingURI: "http://default:5000"}
	cmKey := func(key string) string { return "configMapKeyRef:a-config/" + key }
	secretKey := func(key string) string { return "secretKeyRef:creds/" + key }
	cases := []struct {
		name string
		mon  *mlv1.MonitoringSpec
		want map[string]string
	}{
		{
			name: "the operator's default, the namespace's experiment",
			mon:  nil,
			want: map[string]string{
				"MLFLOW_TRACKING_URI": "http://default:5000", "MLFLOW_EXPERIMENT_NAME": "ml",
				"MLFLOW_EXPERIMENT_ID": cmKey("MLFLOW_EXPERIMENT_ID"), "MLFLOW_RUN_ID": cmKey("MLFLOW_RUN_ID")},
		},
		{
			name: "the job's server, experiment and credentials",
			mon:  &mlv1.MonitoringSpec{MLflowTrackingURI: "https://mine", MLflowExperiment: "vision", MLflowCredentialsSecret: "creds"},
			want: map[string]string{"MLFLOW_TRACKING_URI": "https://mine", "MLFLOW_EXPERIMENT_NAME": "vision",
				"MLFLOW_EXPERIMENT_ID": cmKey("MLFLOW_EXPERIMENT_ID"), "MLFLOW_RUN_ID": cmKey("MLFLOW_RUN_ID"),
				"MLFLOW_TRACKING_TOKEN": secretKey("MLFLOW_TRACKING_TOKEN"), "MLFLOW_TRACKING_USERNAME": secretKey("MLFLOW_TRACKING_USERNAME"),
				"MLFLOW_TRACKING_PASSWORD": secretKey("MLFLOW_TRACKING_PASSWORD")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) { tj.Spec.Monitoring = tc.mon }).Obj()
			got := map[string]string{}
			for _, e := range builders.WorkerEnv(tj, opts) {
				if !strings.HasPrefix(e.Name, "MLFLOW_") {
					continue
				}
				switch {
				case e.ValueFrom == nil:
					got[e.Name] = e.Value
				case e.ValueFrom.ConfigMapKeyRef != nil && *e.ValueFrom.ConfigMapKeyRef.Optional:
					got[e.Name] = "configMapKeyRef:" + e.ValueFrom.ConfigMapKeyRef.Name + "/" + e.ValueFrom.ConfigMapKeyRef.Key
				case e.ValueFrom.SecretKeyRef != nil && *e.ValueFrom.SecretKeyRef.Optional:
					got[e.Name] = "secretKeyRef:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("MLflow env (-want +got):\n%s", diff)
			}
		})
	}
}
