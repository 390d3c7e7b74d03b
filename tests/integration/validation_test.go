package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

type change = func(*mlv1.TrainingJob)

func hp(f func(*mlv1.Hyperparameters)) change {
	return func(tj *mlv1.TrainingJob) {
		if tj.Spec.Hyperparameters == nil {
			tj.Spec.Hyperparameters = &mlv1.Hyperparameters{}
		}
		f(tj.Spec.Hyperparameters)
	}
}

func storage(s mlv1.CheckpointStorage) change {
	return func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Storage: &s}
	}
}

func ckpt(f func(*mlv1.CheckpointSpec)) change {
	return func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Storage: &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "ckpt"}}
		f(tj.Spec.Checkpoint)
	}
}

func gpuResources(list string, qty string) change {
	return func(tj *mlv1.TrainingJob) {
		rl := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(qty)}
		tj.Spec.Resources = &mlv1.Resources{}
		if list == "limits" {
			tj.Spec.Resources.Limits = rl
		} else {
			tj.Spec.Resources.Requests = rl
		}
	}
}

func envVar(name string) change {
	return func(tj *mlv1.TrainingJob) { tj.Spec.Env = append(tj.Spec.Env, corev1.EnvVar{Name: name, Value: "x"}) }
}

func TestAdmissionRejectsInvalid(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name  string
		tj    change
		field string
	}{
		{"no model for the default runner", func(tj *mlv1.TrainingJob) { tj.Spec.Model, tj.Spec.Command = "", nil }, "spec"},
		{"blank model", func(tj *mlv1.TrainingJob) { tj.Spec.Model = "   " }, "spec.model"},
		{"no dataset for the default runner", func(tj *mlv1.TrainingJob) { tj.Spec.Dataset, tj.Spec.Command = "", nil }, "spec"},
		{"model from an unknown scheme", func(tj *mlv1.TrainingJob) { tj.Spec.Model = "ftp://host/bert" }, "spec.model"},
		{"model source leaving its prefix", func(tj *mlv1.TrainingJob) { tj.Spec.Model = "s3://models/../secrets" }, "spec.model"},
		{"dataset source with no host", func(tj *mlv1.TrainingJob) { tj.Spec.Dataset = "s3:///squad" }, "spec.dataset"},
		{"dataset URL with an encoded ..", func(tj *mlv1.TrainingJob) { tj.Spec.Dataset = "https://host/x/%2e%2e" }, "spec.dataset"},
		{"model URL with a . segment", func(tj *mlv1.TrainingJob) { tj.Spec.Model = "https://host/a/./b.tgz" }, "spec.model"},
		{"input cache of zero", func(tj *mlv1.TrainingJob) {
			tj.Spec.Inputs = &mlv1.InputsSpec{CacheSize: ptr.To(resource.MustParse("0"))}
		}, "spec.inputs.cacheSize"},
		{"inputs endpoint without a scheme", func(tj *mlv1.TrainingJob) { tj.Spec.Inputs = &mlv1.InputsSpec{Endpoint: "minio:9000"} }, "spec.inputs.endpoint"},
		{"MODEL_DIR in env", envVar("MODEL_DIR"), "spec.env"},
		{"tensorboard without checkpoints", func(tj *mlv1.TrainingJob) {
			tj.Spec.Monitoring = &mlv1.MonitoringSpec{TensorboardEnabled: ptr.To(true)}
		}, "spec.monitoring.tensorboardEnabled"},
		{"zero workers", func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 0 }, "spec.numWorkers"},
		{"too many workers", func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 1025 }, "spec.numWorkers"},
		{"negative gpus", func(tj *mlv1.TrainingJob) { tj.Spec.GPUsPerWorker = ptr.To[int32](-1) }, "spec.gpusPerWorker"},
		{"too many gpus", func(tj *mlv1.TrainingJob) { tj.Spec.GPUsPerWorker = ptr.To[int32](17) }, "spec.gpusPerWorker"},
		{"unknown framework", func(tj *mlv1.TrainingJob) { tj.Spec.Framework = "mxnet" }, "spec.framework"},
		{"image with space", func(tj *mlv1.TrainingJob) { tj.Spec.Image = "my image:1" }, "spec.image"},
		{"env overrides RANK", envVar("RANK"), "spec.env"},
		{"env overrides MASTER_ADDR", envVar("MASTER_ADDR"), "spec.env"},
		{"env overrides TF_CONFIG", envVar("TF_CONFIG"), "spec.env"},
		{"env overrides PET_NNODES", envVar("PET_NNODES"), "spec.env"},
		{"env overrides RESUME_FROM", envVar("RESUME_FROM"), "spec.env"},
		{"env overrides CHECKPOINT_DIR", envVar("CHECKPOINT_DIR"), "spec.env"},
		{"env overrides POD_IP", envVar("POD_IP"), "spec.env"},
		{"gpu limit disagrees", gpuResources("limits", "2"), "spec.resources.limits"},
		{"gpu request disagrees", gpuResources("requests", "4"), "spec.resources.requests"},
		{"gpu limit of the named resource disagrees", func(tj *mlv1.TrainingJob) {
			tj.Spec.GPUResourceName = "amd.com/gpu"
			tj.Spec.Resources = &mlv1.Resources{Limits: corev1.ResourceList{"amd.com/gpu": resource.MustParse("3")}}
		}, "spec.resources.limits"},
		{"gpu resource name without a domain", func(tj *mlv1.TrainingJob) { tj.Spec.GPUResourceName = "gpu" }, "spec.gpuResourceName"},
		{"xgboost without an image", func(tj *mlv1.TrainingJob) { tj.Spec.Framework = mlv1.FrameworkXGBoost }, "spec.image"},
		{"numWorkers outside the elastic range", func(tj *mlv1.TrainingJob) { tj.Spec.Elastic = &mlv1.ElasticSpec{MinWorkers: 3, MaxWorkers: 4} }, "spec.numWorkers"},
		{"elastic bounds reversed", func(tj *mlv1.TrainingJob) { tj.Spec.Elastic = &mlv1.ElasticSpec{MinWorkers: 4, MaxWorkers: 2} }, "spec.elastic.minWorkers"},
		{"elastic tensorflow", func(tj *mlv1.TrainingJob) {
			tj.Spec.Framework, tj.Spec.Elastic = mlv1.FrameworkTensorFlow, &mlv1.ElasticSpec{MinWorkers: 1, MaxWorkers: 4}
		}, "spec.elastic"},
		{"mpi without a command", func(tj *mlv1.TrainingJob) {
			tj.Spec.Command, tj.Spec.Networking = nil, &mlv1.NetworkingSpec{Backend: mlv1.BackendMPI}
		}, "spec.command"},
		{"paddle without an image", func(tj *mlv1.TrainingJob) { tj.Spec.Framework = mlv1.FrameworkPaddle }, "spec.image"},
		{"env overrides LOCAL_RANK", envVar("LOCAL_RANK"), "spec.env"},
		{"env overrides DMLC_TASK_ID", envVar("DMLC_TASK_ID"), "spec.env"},
		{"env overrides PADDLE_MASTER", envVar("PADDLE_MASTER"), "spec.env"},
		{"zero learning rate", hp(func(h *mlv1.Hyperparameters) { h.LearningRate = ptr.To(0.0) }), "spec.hyperparameters.learningRate"},
		{"negative learning rate", hp(func(h *mlv1.Hyperparameters) { h.LearningRate = ptr.To(-0.1) }), "spec.hyperparameters.learningRate"},
		{"zero batch size", hp(func(h *mlv1.Hyperparameters) { h.BatchSize = ptr.To[int32](0) }), "spec.hyperparameters.batchSize"},
		{"zero epochs", hp(func(h *mlv1.Hyperparameters) { h.Epochs = ptr.To[int32](0) }), "spec.hyperparameters.epochs"},
		{"unknown optimizer", hp(func(h *mlv1.Hyperparameters) { h.Optimizer = "lion" }), "spec.hyperparameters.optimizer"},
		{"zero accumulation", hp(func(h *mlv1.Hyperparameters) { h.GradientAccumulationSteps = ptr.To[int32](0) }), "spec.hyperparameters.gradientAccumulationSteps"},
		{"s3 without bucket", storage(mlv1.CheckpointStorage{Type: mlv1.StorageS3}), "spec.checkpoint.storage.s3Bucket"},
		{"gcs without bucket", storage(mlv1.CheckpointStorage{Type: mlv1.StorageGCS}), "spec.checkpoint.storage.gcsBucket"},
		{"size on a user's claim", storage(mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "mine", Size: ptr.To(resource.MustParse("1Gi"))}), "spec.checkpoint.storage.size"},
		{"size on s3 storage", storage(mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "b-1", Size: ptr.To(resource.MustParse("1Gi"))}), "spec.checkpoint.storage.size"},
		{"zero claim size", storage(mlv1.CheckpointStorage{Type: mlv1.StoragePVC, Size: ptr.To(resource.MustParse("0"))}), "spec.checkpoint.storage.size"},
		{"storage class on a user's claim", storage(mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "mine", StorageClassName: ptr.To("fast")}), "spec.checkpoint.storage.storageClassName"},
		{"claim retention on gcs storage", storage(mlv1.CheckpointStorage{Type: mlv1.StorageGCS, GCSBucket: "g-1", ClaimRetentionPolicy: mlv1.ClaimDelete}), "spec.checkpoint.storage.claimRetentionPolicy"},
		{"unknown claim retention", storage(mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimRetentionPolicy: "Archive"}), "spec.checkpoint.storage.claimRetentionPolicy"},
		{"nfs without export", storage(mlv1.CheckpointStorage{Type: mlv1.StorageNFS}), "spec.checkpoint.storage.nfs"},
		{"unknown storage type", storage(mlv1.CheckpointStorage{Type: "azure"}), "spec.checkpoint.storage.type"},
		{"s3 bucket on gcs storage", storage(mlv1.CheckpointStorage{Type: mlv1.StorageGCS, GCSBucket: "g-bucket", S3Bucket: "s-bucket"}), "spec.checkpoint.storage.s3Bucket"},
		{"endpoint on gcs storage", storage(mlv1.CheckpointStorage{Type: mlv1.StorageGCS, GCSBucket: "g-bucket", Endpoint: "http://x"}), "spec.checkpoint.storage.endpoint"},
		{"relative nfs path", storage(mlv1.CheckpointStorage{Type: mlv1.StorageNFS, NFS: &mlv1.NFSStorage{Server: "nfs", Path: "exports"}}), "spec.checkpoint.storage.nfs.path"},
		{"bucket with upper case", storage(mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "MyBucket"}), "spec.checkpoint.storage.s3Bucket"},
		{"prefix escaping", storage(mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "b-1", Prefix: "../other"}), "spec.checkpoint.storage.prefix"},
		{"zero frequency", ckpt(func(c *mlv1.CheckpointSpec) { c.Frequency = ptr.To[int32](0) }), "spec.checkpoint.frequency"},
		{"zero retention", ckpt(func(c *mlv1.CheckpointSpec) { c.Retention = ptr.To[int32](0) }), "spec.checkpoint.retention"},
		{"relative resumeFrom", ckpt(func(c *mlv1.CheckpointSpec) { c.ResumeFrom = "checkpoints/epoch-3" }), "spec.checkpoint.resumeFrom"},
		{"s3 resumeFrom on pvc storage", ckpt(func(c *mlv1.CheckpointSpec) { c.ResumeFrom = "s3://b/ml/a/checkpoint-epoch-3" }), "spec.checkpoint.resumeFrom"},
		{"path resumeFrom on gcs storage", func(tj *mlv1.TrainingJob) {
			storage(mlv1.CheckpointStorage{Type: mlv1.StorageGCS, GCSBucket: "g-bucket"})(tj)
			tj.Spec.Checkpoint.ResumeFrom = "/checkpoints/ml/a/checkpoint-epoch-3"
		}, "spec.checkpoint.resumeFrom"},
		{"metrics port out of range", func(tj *mlv1.TrainingJob) { tj.Spec.Monitoring = &mlv1.MonitoringSpec{MetricsPort: 70000} }, "spec.monitoring.metricsPort"},
		{"metrics port is master port", func(tj *mlv1.TrainingJob) {
			tj.Spec.Monitoring = &mlv1.MonitoringSpec{MetricsPort: 29500}
			tj.Spec.Networking = &mlv1.NetworkingSpec{MasterPort: 29500}
		}, "spec.monitoring.metricsPort"},
		{"mlflow not http", func(tj *mlv1.TrainingJob) {
			tj.Spec.Monitoring = &mlv1.MonitoringSpec{MLflowTrackingURI: "ftp://mlflow"}
		}, "spec.monitoring.mlflowTrackingUri"},
		{"an MLflow URI with a query", func(tj *mlv1.TrainingJob) {
			tj.Spec.Monitoring = &mlv1.MonitoringSpec{MLflowTrackingURI: "http://mlflow.ml:5000/?"}
		}, "spec.monitoring.mlflowTrackingUri"},
		{"an MLflow URI with a fragment", func(tj *mlv1.TrainingJob) {
			tj.Spec.Monitoring = &mlv1.MonitoringSpec{MLflowTrackingURI: "http://mlflow.ml:5000/#x"}
		}, "spec.monitoring.mlflowTrackingUri"},
		{"an MLflow URI with user info", func(tj *mlv1.TrainingJob) {
			tj.Spec.Monitoring = &mlv1.MonitoringSpec{MLflowTrackingURI: "http://user:pw@mlflow.ml:5000"}
		}, "spec.monitoring.mlflowTrackingUri"},
		{"unknown backend", func(tj *mlv1.TrainingJob) { tj.Spec.Networking = &mlv1.NetworkingSpec{Backend: "tcp"} }, "spec.networking.backend"},
		{"nccl without gpus", func(tj *mlv1.TrainingJob) {
			tj.Spec.GPUsPerWorker = ptr.To[int32](0)
			tj.Spec.Networking = &mlv1.NetworkingSpec{Backend: mlv1.BackendNCCL}
		}, "spec.networking.backend"},
		{"master port out of range", func(tj *mlv1.TrainingJob) { tj.Spec.Networking = &mlv1.NetworkingSpec{MasterPort: 65536} }, "spec.networking.masterPort"},
		{"restart policy Always", func(tj *mlv1.TrainingJob) { tj.Spec.FailurePolicy = &mlv1.FailurePolicy{RestartPolicy: "Always"} }, "spec.failurePolicy.restartPolicy"},
		{"negative backoff", func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{BackoffLimit: ptr.To[int32](-1)}
		}, "spec.failurePolicy.backoffLimit"},
		{"zero deadline", func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{ActiveDeadlineSeconds: ptr.To[int64](0)}
		}, "spec.failurePolicy.activeDeadlineSeconds"},
		{"exit code both retryable and not", func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{RetryableExitCodes: []int32{1, 2}, NonRetryableExitCodes: []int32{2}}
		}, "spec.failurePolicy.retryableExitCodes"},
		{"exit code 0", func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{RetryableExitCodes: []int32{0}}
		}, "spec.failurePolicy.retryableExitCodes[0]"},
		{"exit code above 255", func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{NonRetryableExitCodes: []int32{256}}
		}, "spec.failurePolicy.nonRetryableExitCodes[0]"},
		{"exit codes with in-place restarts", func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{RestartPolicy: mlv1.RestartOnFailure, RetryableExitCodes: []int32{1}}
		}, "spec.failurePolicy.restartPolicy"},
		{"a failure rule whose pattern is not RE2", func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{Rules: []mlv1.FailureRule{{Action: mlv1.RuleFail, OnMessage: "NCCL (timeout"}}}
		}, "spec.failurePolicy.rules[0].onMessage"},
		{"a failure rule that matches nothing", func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{Rules: []mlv1.FailureRule{{Name: "empty", Action: mlv1.RuleRestart}}}
		}, "spec.failurePolicy.rules[0]"},
		{"a failure rule on an unknown kind", func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{Rules: []mlv1.FailureRule{{Action: mlv1.RuleFail, OnKinds: []mlv1.FailureKind{"Timeout"}}}}
		}, "spec.failurePolicy.rules[0].onKinds[0]"},
		{"an unknown onHang", func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{OnHang: "Ignore"}
		}, "spec.failurePolicy.onHang"},
		{"a preemption grace over an hour", func(tj *mlv1.TrainingJob) {
			tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), OnPreemption: true, PreemptionGraceSeconds: ptr.To[int32](7200)}
		}, "spec.checkpoint.preemptionGraceSeconds"},
		{"exit code listed twice", func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{RetryableExitCodes: []int32{137, 137}}
		}, "spec.failurePolicy.retryableExitCodes[1]"},
		{"zero scheduling timeout", func(tj *mlv1.TrainingJob) {
			tj.Spec.Scheduling = &mlv1.SchedulingSpec{SchedulingTimeoutSeconds: ptr.To[int64](0)}
		}, "spec.scheduling.schedulingTimeoutSeconds"},
		{"unknown gang scheduler", func(tj *mlv1.TrainingJob) {
			tj.Spec.Scheduling = &mlv1.SchedulingSpec{Gang: &mlv1.GangScheduling{Scheduler: "yunikorn"}}
		}, "spec.scheduling.gang.scheduler"},
		{"zero gang schedule timeout", func(tj *mlv1.TrainingJob) {
			tj.Spec.Scheduling = &mlv1.SchedulingSpec{Gang: &mlv1.GangScheduling{Scheduler: mlv1.GangCoscheduling, ScheduleTimeoutSeconds: ptr.To[int32](0)}}
		}, "spec.scheduling.gang.scheduleTimeoutSeconds"},
		{"root and runAsNonRoot", func(tj *mlv1.TrainingJob) {
			tj.Spec.SecurityContext = &mlv1.WorkerSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](0)}
		}, "spec.securityContext.runAsUser"},
		{"negative fsGroup", func(tj *mlv1.TrainingJob) {
			tj.Spec.SecurityContext = &mlv1.WorkerSecurityContext{FSGroup: ptr.To[int64](-1)}
		}, "spec.securityContext.fsGroup"},
		{"unknown clean pod policy", func(tj *mlv1.TrainingJob) { tj.Spec.Cleanup = &mlv1.CleanupPolicy{CleanPodPolicy: "Some"} }, "spec.cleanup.cleanPodPolicy"},
		{"negative ttl", func(tj *mlv1.TrainingJob) {
			tj.Spec.Cleanup = &mlv1.CleanupPolicy{TTLSecondsAfterFinished: ptr.To[int32](-1)}
		}, "spec.cleanup.ttlSecondsAfterFinished"},
		{"accuracy above 1", func(tj *mlv1.TrainingJob) { tj.Spec.SuccessPolicy = &mlv1.SuccessPolicy{TargetAccuracy: ptr.To(1.5)} }, "spec.successPolicy.targetAccuracy"},
		{"negative target loss", func(tj *mlv1.TrainingJob) { tj.Spec.SuccessPolicy = &mlv1.SuccessPolicy{TargetLoss: ptr.To(-1.0)} }, "spec.successPolicy.targetLoss"},
		{"zero patience", func(tj *mlv1.TrainingJob) {
			tj.Spec.SuccessPolicy = &mlv1.SuccessPolicy{EarlyStoppingPatience: ptr.To[int32](0)}
		}, "spec.successPolicy.earlyStoppingPatience"},
		{"bad queue name", func(tj *mlv1.TrainingJob) { tj.Spec.Scheduling = &mlv1.SchedulingSpec{QueueName: "Team_Queue"} }, "spec.scheduling.queueName"},
		{"name too long", func(tj *mlv1.TrainingJob) { tj.Name = strings.Repeat("a", 53) }, "metadata.name"},
		{"name starts with digit", func(tj *mlv1.TrainingJob) { tj.Name = "1-resnet" }, "metadata.name"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ(ns, fmt.Sprintf("invalid-%d", i)).With(tc.tj).Obj()
			err := env.Client.Create(context.Background(), tj)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("Create() error = %v, want Invalid", err)
			}
			if fields := causeFields(err); !slices.Contains(fields, tc.field) {
				t.Errorf("rejection names fields %q, want %q; error: %v", fields, tc.field, err)
			}
		})
	}
	if len(cases) < 30 {
		t.Fatalf("only %d invalid cases", len(cases))
	}
}

// TestAdmissionRejectsWhatUsersWriteWrong: YAML as people really get it wrong, sent as YAML with strict
// field validation (what kubectl apply does by default): the error names the field.
func TestAdmissionRejectsWhatUsersWriteWrong(t *testing.T) {
	ns := newNamespace(t)
	const head = "apiVersion: ml.example.com/v1\nkind: TrainingJob\nmetadata: {name: %s, namespace: %s}\nspec:\n  model: resnet50\n  dataset: imagenet\n"
	cases := []struct {
		name, spec, want string
	}{
		{"a string where a number goes", "  numWorkers: \"2\"\n", "spec.numWorkers"},
		{"a word where a number goes", "  numWorkers: two\n", "spec.numWorkers"},
		{"a fraction of a GPU", "  numWorkers: 1\n  gpusPerWorker: 0.5\n", "spec.gpusPerWorker"},
		{"a misspelt field", "  numWorkers: 1\n  numworkers: 2\n", "spec.numworkers"},
		{"a field at the wrong level", "  numWorkers: 1\n  epochs: 10\n", "spec.epochs"},
		{"a list where an object goes", "  numWorkers: 1\n  hyperparameters: [lr]\n", "spec.hyperparameters"},
		{"yes for a boolean", "  numWorkers: 1\n  suspend: \"yes\"\n", "spec.suspend"},
		{"exit codes as one string", "  numWorkers: 1\n  failurePolicy: {retryableExitCodes: \"137,143\"}\n", "spec.failurePolicy.retryableExitCodes"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Sprintf(head, fmt.Sprintf("wrong-%d", i), ns) + tc.spec
			cs, err := kubernetes.NewForConfig(env.Config)
			if err != nil {
				t.Fatal(err)
			}
			res := cs.RESTClient().Post().AbsPath("/apis/ml.example.com/v1/namespaces", ns, "trainingjobs").
				Param("fieldValidation", "Strict").SetHeader("Content-Type", "application/yaml").Body([]byte(body)).Do(context.Background())
			err = res.Error()
			if err == nil {
				t.Fatalf("accepted:\n%s", body)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not name %s: %v", tc.want, err)
			}
		})
	}
}

// causeFields are the fields an Invalid error names. A rule on the object's root (metadata.name) has
// no field path, so its message must name the field instead.
func causeFields(err error) []string {
	var fields []string
	if se, ok := err.(apierrors.APIStatus); ok && se.Status().Details != nil {
		for _, c := range se.Status().Details.Causes {
			f := strings.TrimSuffix(c.Field, "[nvidia.com/gpu]")
			if f == "" || f == "<nil>" {
				f, _, _ = strings.Cut(strings.TrimPrefix(c.Message, "Invalid value: "), " ")
			}
			fields = append(fields, f)
		}
	}
	return fields
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tj-test-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}
