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
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true),
			Storage: &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "ckpt"}}
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
		{name: "no model for the default runner", tj: func(tj *mlv1.TrainingJob) { tj.Spec.Model, tj.Spec.Command = "", nil }, field: "spec"},
		{name: "blank model", tj: func(tj *mlv1.TrainingJob) { tj.Spec.Model = "   " }, field: "spec.model"},
		{name: "no dataset for the default runner", tj: func(tj *mlv1.TrainingJob) { tj.Spec.Dataset, tj.Spec.Command = "", nil }, field: "spec"},
		{name: "model from an unknown scheme", tj: func(tj *mlv1.TrainingJob) { tj.Spec.Model = "ftp://host/bert" }, field: "spec.model"},
		{
			name:  "model source leaving its prefix",
			tj:    func(tj *mlv1.TrainingJob) { tj.Spec.Model = "s3://models/../secrets" },
			field: "spec.model",
		},
		{name: "dataset source with no host", tj: func(tj *mlv1.TrainingJob) { tj.Spec.Dataset = "s3:///squad" }, field: "spec.dataset"},
		{
			name:  "dataset URL with an encoded ..",
			tj:    func(tj *mlv1.TrainingJob) { tj.Spec.Dataset = "https://host/x/%2e%2e" },
			field: "spec.dataset",
		},
		{name: "model URL with a . segment", tj: func(tj *mlv1.TrainingJob) { tj.Spec.Model = "https://host/a/./b.tgz" }, field: "spec.model"},
		{name: "input cache of zero", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Inputs = &mlv1.InputsSpec{CacheSize: ptr.To(resource.MustParse("0"))}
		}, field: "spec.inputs.cacheSize"},
		{
			name:  "inputs endpoint without a scheme",
			tj:    func(tj *mlv1.TrainingJob) { tj.Spec.Inputs = &mlv1.InputsSpec{Endpoint: "minio:9000"} },
			field: "spec.inputs.endpoint",
		},
		{
			name:  "a cache group that is no DNS label (a path into the node cache)",
			tj:    func(tj *mlv1.TrainingJob) { tj.Spec.Inputs = &mlv1.InputsSpec{CacheGroup: "../ml_other"} },
			field: "spec.inputs.cacheGroup",
		},
		{
			name:  "a cache group of 64 characters",
			tj:    func(tj *mlv1.TrainingJob) { tj.Spec.Inputs = &mlv1.InputsSpec{CacheGroup: strings.Repeat("a", 64)} },
			field: "spec.inputs.cacheGroup",
		},
		{name: "MODEL_DIR in env", tj: envVar("MODEL_DIR"), field: "spec.env"},
		{name: "tensorboard without checkpoints", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Monitoring = &mlv1.MonitoringSpec{TensorboardEnabled: ptr.To(true)}
		}, field: "spec.monitoring.tensorboardEnabled"},
		{name: "zero workers", tj: func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 0 }, field: "spec.numWorkers"},
		{name: "too many workers", tj: func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 1025 }, field: "spec.numWorkers"},
		{name: "negative gpus", tj: func(tj *mlv1.TrainingJob) { tj.Spec.GPUsPerWorker = ptr.To[int32](-1) }, field: "spec.gpusPerWorker"},
		{name: "too many gpus", tj: func(tj *mlv1.TrainingJob) { tj.Spec.GPUsPerWorker = ptr.To[int32](17) }, field: "spec.gpusPerWorker"},
		{name: "unknown framework", tj: func(tj *mlv1.TrainingJob) { tj.Spec.Framework = "mxnet" }, field: "spec.framework"},
		{name: "image with space", tj: func(tj *mlv1.TrainingJob) { tj.Spec.Image = "my image:1" }, field: "spec.image"},
		{name: "env overrides RANK", tj: envVar("RANK"), field: "spec.env"},
		{name: "env overrides MASTER_ADDR", tj: envVar("MASTER_ADDR"), field: "spec.env"},
		{name: "env overrides TF_CONFIG", tj: envVar("TF_CONFIG"), field: "spec.env"},
		{name: "env overrides PET_NNODES", tj: envVar("PET_NNODES"), field: "spec.env"},
		{name: "env overrides RESUME_FROM", tj: envVar("RESUME_FROM"), field: "spec.env"},
		{name: "env overrides CHECKPOINT_DIR", tj: envVar("CHECKPOINT_DIR"), field: "spec.env"},
		{name: "env overrides POD_IP", tj: envVar("POD_IP"), field: "spec.env"},
		{name: "gpu limit disagrees", tj: gpuResources("limits", "2"), field: "spec.resources.limits"},
		{name: "gpu request disagrees", tj: gpuResources("requests", "4"), field: "spec.resources.requests"},
		{name: "gpu limit of the named resource disagrees", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.GPUResourceName = "amd.com/gpu"
			tj.Spec.Resources = &mlv1.Resources{Limits: corev1.ResourceList{"amd.com/gpu": resource.MustParse("3")}}
		}, field: "spec.resources.limits"},
		{
			name:  "gpu resource name without a domain",
			tj:    func(tj *mlv1.TrainingJob) { tj.Spec.GPUResourceName = "gpu" },
			field: "spec.gpuResourceName",
		},
		{name: "xgboost without an image", tj: func(tj *mlv1.TrainingJob) { tj.Spec.Framework = mlv1.FrameworkXGBoost }, field: "spec.image"},
		{
			name:  "numWorkers outside the elastic range",
			tj:    func(tj *mlv1.TrainingJob) { tj.Spec.Elastic = &mlv1.ElasticSpec{MinWorkers: 3, MaxWorkers: 4} },
			field: "spec.numWorkers",
		},
		{
			name:  "elastic bounds reversed",
			tj:    func(tj *mlv1.TrainingJob) { tj.Spec.Elastic = &mlv1.ElasticSpec{MinWorkers: 4, MaxWorkers: 2} },
			field: "spec.elastic.minWorkers",
		},
		{name: "elastic tensorflow", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Framework, tj.Spec.Elastic = mlv1.FrameworkTensorFlow, &mlv1.ElasticSpec{MinWorkers: 1, MaxWorkers: 4}
		}, field: "spec.elastic"},
		{name: "mpi without a command", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Command, tj.Spec.Networking = nil, &mlv1.NetworkingSpec{Backend: mlv1.BackendMPI}
		}, field: "spec.command"},
		{name: "paddle without an image", tj: func(tj *mlv1.TrainingJob) { tj.Spec.Framework = mlv1.FrameworkPaddle }, field: "spec.image"},
		{name: "env overrides LOCAL_RANK", tj: envVar("LOCAL_RANK"), field: "spec.env"},
		{name: "env overrides DMLC_TASK_ID", tj: envVar("DMLC_TASK_ID"), field: "spec.env"},
		{name: "env overrides PADDLE_MASTER", tj: envVar("PADDLE_MASTER"), field: "spec.env"},
		{
			name:  "zero learning rate",
			tj:    hp(func(h *mlv1.Hyperparameters) { h.LearningRate = ptr.To(0.0) }),
			field: "spec.hyperparameters.learningRate",
		},
		{
			name:  "negative learning rate",
			tj:    hp(func(h *mlv1.Hyperparameters) { h.LearningRate = ptr.To(-0.1) }),
			field: "spec.hyperparameters.learningRate",
		},
		{
			name:  "zero batch size",
			tj:    hp(func(h *mlv1.Hyperparameters) { h.BatchSize = ptr.To[int32](0) }),
			field: "spec.hyperparameters.batchSize",
		},
		{name: "zero epochs", tj: hp(func(h *mlv1.Hyperparameters) { h.Epochs = ptr.To[int32](0) }), field: "spec.hyperparameters.epochs"},
		{name: "unknown optimizer", tj: hp(func(h *mlv1.Hyperparameters) { h.Optimizer = "lion" }), field: "spec.hyperparameters.optimizer"},
		{
			name:  "zero accumulation",
			tj:    hp(func(h *mlv1.Hyperparameters) { h.GradientAccumulationSteps = ptr.To[int32](0) }),
			field: "spec.hyperparameters.gradientAccumulationSteps",
		},
		{name: "s3 without bucket", tj: storage(mlv1.CheckpointStorage{Type: mlv1.StorageS3}), field: "spec.checkpoint.storage.s3Bucket"},
		{name: "gcs without bucket", tj: storage(mlv1.CheckpointStorage{Type: mlv1.StorageGCS}), field: "spec.checkpoint.storage.gcsBucket"},
		{
			name:  "size on a user's claim",
			tj:    storage(mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "mine", Size: ptr.To(resource.MustParse("1Gi"))}),
			field: "spec.checkpoint.storage.size",
		},
		{
			name:  "size on s3 storage",
			tj:    storage(mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "b-1", Size: ptr.To(resource.MustParse("1Gi"))}),
			field: "spec.checkpoint.storage.size",
		},
		{
			name:  "zero claim size",
			tj:    storage(mlv1.CheckpointStorage{Type: mlv1.StoragePVC, Size: ptr.To(resource.MustParse("0"))}),
			field: "spec.checkpoint.storage.size",
		},
		{
			name:  "storage class on a user's claim",
			tj:    storage(mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "mine", StorageClassName: ptr.To("fast")}),
			field: "spec.checkpoint.storage.storageClassName",
		},
		{
			name:  "claim retention on gcs storage",
			tj:    storage(mlv1.CheckpointStorage{Type: mlv1.StorageGCS, GCSBucket: "g-1", ClaimRetentionPolicy: mlv1.ClaimDelete}),
			field: "spec.checkpoint.storage.claimRetentionPolicy",
		},
		{
			name:  "unknown claim retention",
			tj:    storage(mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimRetentionPolicy: "Archive"}),
			field: "spec.checkpoint.storage.claimRetentionPolicy",
		},
		{name: "nfs without export", tj: storage(mlv1.CheckpointStorage{Type: mlv1.StorageNFS}), field: "spec.checkpoint.storage.nfs"},
		{name: "unknown storage type", tj: storage(mlv1.CheckpointStorage{Type: "azure"}), field: "spec.checkpoint.storage.type"},
		{
			name:  "s3 bucket on gcs storage",
			tj:    storage(mlv1.CheckpointStorage{Type: mlv1.StorageGCS, GCSBucket: "g-bucket", S3Bucket: "s-bucket"}),
			field: "spec.checkpoint.storage.s3Bucket",
		},
		{
			name:  "endpoint on gcs storage",
			tj:    storage(mlv1.CheckpointStorage{Type: mlv1.StorageGCS, GCSBucket: "g-bucket", Endpoint: "http://x"}),
			field: "spec.checkpoint.storage.endpoint",
		},
		{
			name:  "relative nfs path",
			tj:    storage(mlv1.CheckpointStorage{Type: mlv1.StorageNFS, NFS: &mlv1.NFSStorage{Server: "nfs", Path: "exports"}}),
			field: "spec.checkpoint.storage.nfs.path",
		},
		{
			name:  "bucket with upper case",
			tj:    storage(mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "MyBucket"}),
			field: "spec.checkpoint.storage.s3Bucket",
		},
		{
			name:  "prefix escaping",
			tj:    storage(mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "b-1", Prefix: "../other"}),
			field: "spec.checkpoint.storage.prefix",
		},
		{name: "zero frequency", tj: ckpt(func(c *mlv1.CheckpointSpec) { c.Frequency = ptr.To[int32](0) }), field: "spec.checkpoint.frequency"},
		{name: "zero retention", tj: ckpt(func(c *mlv1.CheckpointSpec) { c.Retention = ptr.To[int32](0) }), field: "spec.checkpoint.retention"},
		{
			name:  "relative resumeFrom",
			tj:    ckpt(func(c *mlv1.CheckpointSpec) { c.ResumeFrom = "checkpoints/epoch-3" }),
			field: "spec.checkpoint.resumeFrom",
		},
		{
			name:  "s3 resumeFrom on pvc storage",
			tj:    ckpt(func(c *mlv1.CheckpointSpec) { c.ResumeFrom = "s3://b/ml/a/checkpoint-epoch-3" }),
			field: "spec.checkpoint.resumeFrom",
		},
		{name: "path resumeFrom on gcs storage", tj: func(tj *mlv1.TrainingJob) {
			storage(mlv1.CheckpointStorage{Type: mlv1.StorageGCS, GCSBucket: "g-bucket"})(tj)
			tj.Spec.Checkpoint.ResumeFrom = "/checkpoints/ml/a/checkpoint-epoch-3"
		}, field: "spec.checkpoint.resumeFrom"},
		{
			name:  "metrics port out of range",
			tj:    func(tj *mlv1.TrainingJob) { tj.Spec.Monitoring = &mlv1.MonitoringSpec{MetricsPort: 70000} },
			field: "spec.monitoring.metricsPort",
		},
		{name: "metrics port is master port", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Monitoring = &mlv1.MonitoringSpec{MetricsPort: 29500}
			tj.Spec.Networking = &mlv1.NetworkingSpec{MasterPort: 29500}
		}, field: "spec.monitoring.metricsPort"},
		{name: "mlflow not http", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Monitoring = &mlv1.MonitoringSpec{MLflowTrackingURI: "ftp://mlflow"}
		}, field: "spec.monitoring.mlflowTrackingUri"},
		{name: "an MLflow URI with a query", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Monitoring = &mlv1.MonitoringSpec{MLflowTrackingURI: "http://mlflow.ml:5000/?"}
		}, field: "spec.monitoring.mlflowTrackingUri"},
		{name: "an MLflow URI with a fragment", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Monitoring = &mlv1.MonitoringSpec{MLflowTrackingURI: "http://mlflow.ml:5000/#x"}
		}, field: "spec.monitoring.mlflowTrackingUri"},
		{name: "an MLflow URI with user info", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Monitoring = &mlv1.MonitoringSpec{MLflowTrackingURI: "http://user:pw@mlflow.ml:5000"}
		}, field: "spec.monitoring.mlflowTrackingUri"},
		{
			name:  "unknown backend",
			tj:    func(tj *mlv1.TrainingJob) { tj.Spec.Networking = &mlv1.NetworkingSpec{Backend: "tcp"} },
			field: "spec.networking.backend",
		},
		{name: "nccl without gpus", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.GPUsPerWorker = ptr.To[int32](0)
			tj.Spec.Networking = &mlv1.NetworkingSpec{Backend: mlv1.BackendNCCL}
		}, field: "spec.networking.backend"},
		{
			name:  "master port out of range",
			tj:    func(tj *mlv1.TrainingJob) { tj.Spec.Networking = &mlv1.NetworkingSpec{MasterPort: 65536} },
			field: "spec.networking.masterPort",
		},
		{
			name:  "restart policy Always",
			tj:    func(tj *mlv1.TrainingJob) { tj.Spec.FailurePolicy = &mlv1.FailurePolicy{RestartPolicy: "Always"} },
			field: "spec.failurePolicy.restartPolicy",
		},
		{name: "negative backoff", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{BackoffLimit: ptr.To[int32](-1)}
		}, field: "spec.failurePolicy.backoffLimit"},
		{name: "zero deadline", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{ActiveDeadlineSeconds: ptr.To[int64](0)}
		}, field: "spec.failurePolicy.activeDeadlineSeconds"},
		{name: "exit code both retryable and not", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{RetryableExitCodes: []int32{1, 2}, NonRetryableExitCodes: []int32{2}}
		}, field: "spec.failurePolicy.retryableExitCodes"},
		{name: "exit code 0", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{RetryableExitCodes: []int32{0}}
		}, field: "spec.failurePolicy.retryableExitCodes[0]"},
		{name: "exit code above 255", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{NonRetryableExitCodes: []int32{256}}
		}, field: "spec.failurePolicy.nonRetryableExitCodes[0]"},
		{name: "exit codes with in-place restarts", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{RestartPolicy: mlv1.RestartOnFailure, RetryableExitCodes: []int32{1}}
		}, field: "spec.failurePolicy.restartPolicy"},
		{name: "a failure rule whose pattern is too long", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{Rules: []mlv1.FailureRule{{Action: mlv1.RuleFail, OnMessage: strings.Repeat("a", 1025)}}}
		}, field: "spec.failurePolicy.rules[0].onMessage"},
		{name: "a failure rule that matches nothing", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{Rules: []mlv1.FailureRule{{Name: "empty", Action: mlv1.RuleRestart}}}
		}, field: "spec.failurePolicy.rules[0]"},
		{name: "a failure rule on an unknown kind", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{Rules: []mlv1.FailureRule{{Action: mlv1.RuleFail, OnKinds: []mlv1.FailureKind{"Timeout"}}}}
		}, field: "spec.failurePolicy.rules[0].onKinds[0]"},
		{name: "an unknown onHang", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{OnHang: "Ignore"}
		}, field: "spec.failurePolicy.onHang"},
		{name: "a preemption grace over an hour", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), OnPreemption: true, PreemptionGraceSeconds: ptr.To[int32](7200)}
		}, field: "spec.checkpoint.preemptionGraceSeconds"},
		{name: "exit code listed twice", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{RetryableExitCodes: []int32{137, 137}}
		}, field: "spec.failurePolicy.retryableExitCodes[1]"},
		{name: "zero scheduling timeout", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Scheduling = &mlv1.SchedulingSpec{SchedulingTimeoutSeconds: ptr.To[int64](0)}
		}, field: "spec.scheduling.schedulingTimeoutSeconds"},
		{name: "unknown gang scheduler", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Scheduling = &mlv1.SchedulingSpec{Gang: &mlv1.GangScheduling{Scheduler: "yunikorn"}}
		}, field: "spec.scheduling.gang.scheduler"},
		{
			name: "zero gang schedule timeout",
			tj: func(tj *mlv1.TrainingJob) {
				tj.Spec.Scheduling = &mlv1.SchedulingSpec{Gang: &mlv1.GangScheduling{Scheduler: mlv1.GangCoscheduling,
					ScheduleTimeoutSeconds: ptr.To[int32](0)}}
			},
			field: "spec.scheduling.gang.scheduleTimeoutSeconds",
		},
		{name: "root and runAsNonRoot", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.SecurityContext = &mlv1.WorkerSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](0)}
		}, field: "spec.securityContext.runAsUser"},
		{name: "negative fsGroup", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.SecurityContext = &mlv1.WorkerSecurityContext{FSGroup: ptr.To[int64](-1)}
		}, field: "spec.securityContext.fsGroup"},
		{
			name:  "unknown clean pod policy",
			tj:    func(tj *mlv1.TrainingJob) { tj.Spec.Cleanup = &mlv1.CleanupPolicy{CleanPodPolicy: "Some"} },
			field: "spec.cleanup.cleanPodPolicy",
		},
		{name: "negative ttl", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Cleanup = &mlv1.CleanupPolicy{TTLSecondsAfterFinished: ptr.To[int32](-1)}
		}, field: "spec.cleanup.ttlSecondsAfterFinished"},
		{
			name:  "accuracy above 1",
			tj:    func(tj *mlv1.TrainingJob) { tj.Spec.SuccessPolicy = &mlv1.SuccessPolicy{TargetAccuracy: ptr.To(1.5)} },
			field: "spec.successPolicy.targetAccuracy",
		},
		{
			name:  "negative target loss",
			tj:    func(tj *mlv1.TrainingJob) { tj.Spec.SuccessPolicy = &mlv1.SuccessPolicy{TargetLoss: ptr.To(-1.0)} },
			field: "spec.successPolicy.targetLoss",
		},
		{name: "zero patience", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.SuccessPolicy = &mlv1.SuccessPolicy{EarlyStoppingPatience: ptr.To[int32](0)}
		}, field: "spec.successPolicy.earlyStoppingPatience"},
		{
			name:  "bad queue name",
			tj:    func(tj *mlv1.TrainingJob) { tj.Spec.Scheduling = &mlv1.SchedulingSpec{QueueName: "Team_Queue"} },
			field: "spec.scheduling.queueName",
		},
		{name: "name too long", tj: func(tj *mlv1.TrainingJob) { tj.Name = strings.Repeat("a", 53) }, field: "metadata.name"},
		{name: "name starts with digit", tj: func(tj *mlv1.TrainingJob) { tj.Name = "1-resnet" }, field: "metadata.name"},
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
	const head = "apiVersion: ml.example.com/v1\nkind: TrainingJob\nmetadata: {name: %s, namespace: %s}\n" +
		"spec:\n  model: resnet50\n  dataset: imagenet\n"
	cases := []struct {
		name, spec, want string
	}{
		{name: "a string where a number goes", spec: "  numWorkers: \"2\"\n", want: "spec.numWorkers"},
		{name: "a word where a number goes", spec: "  numWorkers: two\n", want: "spec.numWorkers"},
		{name: "a fraction of a GPU", spec: "  numWorkers: 1\n  gpusPerWorker: 0.5\n", want: "spec.gpusPerWorker"},
		{name: "a misspelt field", spec: "  numWorkers: 1\n  numworkers: 2\n", want: "spec.numworkers"},
		{name: "a field at the wrong level", spec: "  numWorkers: 1\n  epochs: 10\n", want: "spec.epochs"},
		{name: "a list where an object goes", spec: "  numWorkers: 1\n  hyperparameters: [lr]\n", want: "spec.hyperparameters"},
		{name: "yes for a boolean", spec: "  numWorkers: 1\n  suspend: \"yes\"\n", want: "spec.suspend"},
		{
			name: "exit codes as one string",
			spec: "  numWorkers: 1\n  failurePolicy: {retryableExitCodes: \"137,143\"}\n",
			want: "spec.failurePolicy.retryableExitCodes",
		},
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

// causeFields returns the fields an Invalid error names. A rule on the object's root (metadata.name) has
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
