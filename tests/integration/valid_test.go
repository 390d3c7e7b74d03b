package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

func TestAdmissionAcceptsValidEdgeCases(t *testing.T) {
	ns := newNamespace(t)
	many := map[string]string{}
	for i := 0; i < 64; i++ {
		many[fmt.Sprintf("p%d", i)] = "v"
	}
	cases := []struct {
		name string
		tj   change
	}{
		{name: "minimal", tj: func(*mlv1.TrainingJob) {}},
		{name: "a script of one's own names no model or dataset", tj: func(tj *mlv1.TrainingJob) { tj.Spec.Model, tj.Spec.Dataset = "", "" }},
		{name: "model and dataset with spaces", tj: func(tj *mlv1.TrainingJob) { tj.Spec.Model, tj.Spec.Dataset = "resnet 50", "image net 1k" }},
		{
			name: "sources of every kind",
			tj: func(tj *mlv1.TrainingJob) {
				tj.Spec.Model, tj.Spec.Dataset = "hf://google-bert/bert-base-uncased@main", "s3://datasets/squad/v2"
				tj.Spec.Inputs = &mlv1.InputsSpec{Endpoint: "http://minio:9000", HubEndpoint: "https://hf-mirror.example.com",
					CacheSize: ptr.To(resource.MustParse("1Gi")), CacheGroup: "lr-sweep-1a2b3c"}
			},
		},
		{name: "a claim and an export", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Model, tj.Spec.Dataset = "pvc://models/bert", "nfs://10.0.0.5/exports/squad"
		}},
		{name: "gcs and an archive", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Model, tj.Spec.Dataset = "gs://models/bert", "https://example.com/cifar.tar.gz"
		}},
		{name: "one worker", tj: func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 1 }},
		{name: "1024 workers", tj: func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 1024 }},
		{name: "cpu only", tj: func(tj *mlv1.TrainingJob) { tj.Spec.GPUsPerWorker = ptr.To[int32](0) }},
		{name: "cpu only with gloo", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.GPUsPerWorker = ptr.To[int32](0)
			tj.Spec.Networking = &mlv1.NetworkingSpec{Backend: mlv1.BackendGloo}
		}},
		{name: "16 gpus", tj: func(tj *mlv1.TrainingJob) { tj.Spec.GPUsPerWorker = ptr.To[int32](16) }},
		{name: "tensorflow", tj: func(tj *mlv1.TrainingJob) { tj.Spec.Framework = mlv1.FrameworkTensorFlow }},
		{name: "jax", tj: func(tj *mlv1.TrainingJob) { tj.Spec.Framework = mlv1.FrameworkJAX }},
		{name: "xgboost with its image", tj: func(tj *mlv1.TrainingJob) { tj.Spec.Framework, tj.Spec.Image = mlv1.FrameworkXGBoost, "xgb:1" }},
		{name: "paddle with its image", tj: func(tj *mlv1.TrainingJob) { tj.Spec.Framework, tj.Spec.Image = mlv1.FrameworkPaddle, "paddle:3" }},
		{
			name: "no image and no command (accepted, warned, fails if it trains nothing)",
			tj:   func(tj *mlv1.TrainingJob) { tj.Spec.Command = nil },
		},
		{name: "amd gpus with an equal limit", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.GPUResourceName = "amd.com/gpu"
			tj.Spec.Resources = &mlv1.Resources{Limits: corev1.ResourceList{"amd.com/gpu": resource.MustParse("1")}}
		}},
		{name: "a MIG slice", tj: func(tj *mlv1.TrainingJob) { tj.Spec.GPUResourceName = "nvidia.com/mig-1g.10gb" }},
		{name: "tiny learning rate", tj: hp(func(h *mlv1.Hyperparameters) { h.LearningRate = ptr.To(0.00005) })},
		{name: "largest learning rate", tj: hp(func(h *mlv1.Hyperparameters) { h.LearningRate = ptr.To(10.0) })},
		{name: "all hyperparameters", tj: hp(func(h *mlv1.Hyperparameters) {
			h.BatchSize, h.Epochs, h.WarmupSteps = ptr.To[int32](1), ptr.To[int32](100000), ptr.To[int32](0)
			h.GradientAccumulationSteps, h.Optimizer, h.MixedPrecision = ptr.To[int32](4096), "adamw", ptr.To(true)
		})},
		{name: "64 additional params", tj: hp(func(h *mlv1.Hyperparameters) { h.AdditionalParams = many })},
		{name: "gpu limit equal", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.GPUsPerWorker = ptr.To[int32](2)
			tj.Spec.Resources = &mlv1.Resources{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}}
		}},
		{name: "gpu request equal default", tj: gpuResources("requests", "1")},
		{name: "cpu and memory only", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Resources = &mlv1.Resources{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("2Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")},
			}
		}},
		{name: "env referring to RANK", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Env = []corev1.EnvVar{{Name: "MY_RANK", Value: "$(RANK)"}, {Name: "NCCL_DEBUG", Value: "INFO"}}
		}},
		{name: "env from secret", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Env = []corev1.EnvVar{{Name: "HF_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "hf"}, Key: "token"}}}}
		}},
		{name: "s3 storage in full", tj: storage(mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "ckpt.bucket-1", Prefix: "team/a",
			Endpoint: "http://minio.minio:9000", Region: "us-east-1", SecretRef: &corev1.LocalObjectReference{Name: "s3-creds"}})},
		{name: "gcs storage", tj: storage(mlv1.CheckpointStorage{Type: mlv1.StorageGCS, GCSBucket: "my_bucket.v2"})},
		{name: "pvc storage", tj: storage(mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "ckpt-claim"})},
		{
			name: "nfs storage",
			tj:   storage(mlv1.CheckpointStorage{Type: mlv1.StorageNFS, NFS: &mlv1.NFSStorage{Server: "10.0.0.2", Path: "/exports/ckpt"}}),
		},
		{name: "nccl tuning and the operator's defaults in env", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Env = []corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "INFO"}, {Name: "NCCL_IB_DISABLE", Value: "1"},
				{Name: "NCCL_SOCKET_IFNAME", Value: "eth0"}, {Name: "PYTHONUNBUFFERED", Value: "0"}, {Name: "OMP_NUM_THREADS", Value: "8"},
				{Name: "AWS_REGION", Value: "eu-west-1"}}
		}},
		{name: "checkpoint enabled without storage", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Frequency: ptr.To[int32](1)}
		}},
		{name: "operator's claim with size, class and retention", tj: storage(mlv1.CheckpointStorage{Type: mlv1.StoragePVC,
			Size: ptr.To(resource.MustParse("500Gi")), StorageClassName: ptr.To("efs"), ClaimRetentionPolicy: mlv1.ClaimDelete})},
		{name: "storage with only a size (type defaults to pvc)", tj: storage(mlv1.CheckpointStorage{Size: ptr.To(resource.MustParse("1Ti"))})},
		{name: "resume from a path without storage", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), ResumeFrom: "/checkpoints/ml/old/checkpoint-epoch-3"}
		}},
		{
			name: "checkpoint disabled without storage",
			tj:   func(tj *mlv1.TrainingJob) { tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(false)} },
		},
		{name: "resume from s3 uri in another bucket", tj: func(tj *mlv1.TrainingJob) {
			storage(mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "runs"})(tj)
			tj.Spec.Checkpoint.ResumeFrom = "s3://bucket/ns/job/checkpoint-epoch-3/"
		}},
		{name: "resume from pvc:// uri", tj: ckpt(func(c *mlv1.CheckpointSpec) { c.ResumeFrom = "pvc://ns/job/checkpoint-epoch-3" })},
		{
			name: "resume from path, retention 1",
			tj:   ckpt(func(c *mlv1.CheckpointSpec) { c.ResumeFrom, c.Retention = "/ckpt/checkpoint-epoch-1", ptr.To[int32](1) }),
		},
		{name: "scheduling in full", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Scheduling = &mlv1.SchedulingSpec{
				Priority: "high", NodeSelector: map[string]string{"gpu": "a100"}, SchedulerName: "volcano", QueueName: "team-a",
				Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}}}}}}}},
			}
		}},
		{name: "monitoring in full", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Monitoring = &mlv1.MonitoringSpec{Enabled: ptr.To(true), MetricsPort: 9090, TensorboardEnabled: ptr.To(true),
				MLflowTrackingURI: "https://mlflow.example.com", WandbProject: "mnist"}
			tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true)} // where TensorBoard's logs are kept
		}},
		{name: "mpi with rdma on a custom port", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Networking = &mlv1.NetworkingSpec{Backend: mlv1.BackendMPI, RDMAEnabled: ptr.To(true), MasterPort: 23456}
		}},
		{
			name: "never restart, no retries, deadline",
			tj: func(tj *mlv1.TrainingJob) {
				tj.Spec.FailurePolicy = &mlv1.FailurePolicy{RestartPolicy: mlv1.RestartNever, BackoffLimit: ptr.To[int32](0),
					ActiveDeadlineSeconds: ptr.To[int64](3600)}
			},
		},
		{
			name: "success policy bounds",
			tj: func(tj *mlv1.TrainingJob) {
				tj.Spec.SuccessPolicy = &mlv1.SuccessPolicy{TargetAccuracy: ptr.To(1.0), TargetLoss: ptr.To(0.0),
					EarlyStoppingPatience: ptr.To[int32](1)}
			},
		},
		{name: "suspended", tj: func(tj *mlv1.TrainingJob) { tj.Spec.Suspend = ptr.To(true) }},
		{name: "name of 52 characters", tj: func(tj *mlv1.TrainingJob) { tj.Name = "a" + strings.Repeat("b", 51) }},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ(ns, fmt.Sprintf("valid-%d", i)).With(tc.tj).Obj()
			if err := env.Client.Create(context.Background(), tj); err != nil {
				t.Fatalf("Create() error = %v", err)
			}
		})
	}
	if len(cases) < 30 {
		t.Fatalf("only %d valid cases", len(cases))
	}
}

func TestAdmissionDefaults(t *testing.T) {
	ns := newNamespace(t)
	tj := tjtest.NewTJ(ns, "defaults").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Storage: &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "c"}}
		tj.Spec.Monitoring = &mlv1.MonitoringSpec{}
		tj.Spec.Networking = &mlv1.NetworkingSpec{}
		tj.Spec.FailurePolicy = &mlv1.FailurePolicy{}
	}).Obj()
	if err := env.Client.Create(context.Background(), tj); err != nil {
		t.Fatalf("Create() error = %v", err)
	}
	type defaults struct {
		GPUs, Frequency, Retention, MetricsPort, MasterPort, Backoff int32
		Framework                                                    mlv1.Framework
		Restart                                                      mlv1.RestartPolicy
		MonitoringEnabled                                            bool
	}
	s := tj.Spec
	got := defaults{
		GPUs:              *s.GPUsPerWorker,
		Frequency:         *s.Checkpoint.Frequency,
		Retention:         *s.Checkpoint.Retention,
		MetricsPort:       s.Monitoring.MetricsPort,
		MasterPort:        s.Networking.MasterPort,
		Backoff:           *s.FailurePolicy.BackoffLimit,
		Framework:         s.Framework,
		Restart:           s.FailurePolicy.RestartPolicy,
		MonitoringEnabled: *s.Monitoring.Enabled,
	}
	want := defaults{
		GPUs:              1,
		Frequency:         1,
		Retention:         3,
		MetricsPort:       8080,
		MasterPort:        29500,
		Backoff:           3,
		Framework:         mlv1.FrameworkPyTorch,
		Restart:           mlv1.RestartGang,
		MonitoringEnabled: true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

// TestAdmissionImmutableWhileRunning: fields that shape the pods cannot change while the job is
// Initializing or Running, can change while Pending or Suspended, and suspend can always change.
func TestAdmissionImmutableWhileRunning(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tj := tjtest.NewTJ(ns, "immutable").Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	setState := func(s mlv1.State) {
		t.Helper()
		tj.Status.State = s
		if err := env.Client.Status().Update(ctx, tj); err != nil {
			t.Fatalf("status update to %s: %v", s, err)
		}
	}
	update := func(f change) error {
		t.Helper()
		changed := tj.DeepCopy()
		f(changed)
		err := env.Client.Update(ctx, changed)
		if err == nil {
			tj = changed
		}
		return err
	}
	if err := update(func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 3 }); err != nil {
		t.Fatalf("changing numWorkers while Pending: %v", err)
	}
	setState(mlv1.StateRunning)
	for _, tc := range []struct {
		field string
		f     change
	}{
		{field: "spec.numWorkers", f: func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 4 }},
		{field: "spec.model", f: func(tj *mlv1.TrainingJob) { tj.Spec.Model = "vit" }},
		{field: "spec.image", f: func(tj *mlv1.TrainingJob) { tj.Spec.Image = "other:1" }},
		{field: "spec.gpusPerWorker", f: func(tj *mlv1.TrainingJob) { tj.Spec.GPUsPerWorker = ptr.To[int32](2) }},
		{field: "spec.hyperparameters", f: hp(func(h *mlv1.Hyperparameters) { h.Epochs = ptr.To[int32](99) })},
		{field: "spec.networking", f: func(tj *mlv1.TrainingJob) { tj.Spec.Networking = &mlv1.NetworkingSpec{MasterPort: 1234} }},
	} {
		err := update(tc.f)
		if !apierrors.IsInvalid(err) || !slices.Contains(causeFields(err), tc.field) {
			t.Errorf("changing %s while Running: error = %v, want Invalid naming %s", tc.field, err, tc.field)
		}
	}
	if err := update(func(tj *mlv1.TrainingJob) { tj.Spec.Suspend = ptr.To(true) }); err != nil {
		t.Fatalf("suspending while Running: %v", err)
	}
	setState(mlv1.StateSuspended)
	if err := update(func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 4 }); err != nil {
		t.Fatalf("changing numWorkers while Suspended: %v", err)
	}
}

// TestAdmissionOwnScriptWhileRunning: a job of one's own script names no model and no dataset; the
// immutable-while-running rules must not refuse its status writes (the whole object is validated on each),
// nor a change of what may change, once it runs; and naming a model then is refused.
func TestAdmissionOwnScriptWhileRunning(t *testing.T) {
	ctx := context.Background()
	tj := tjtest.NewTJ(newNamespace(t), "own-script").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Model, tj.Spec.Dataset = "", ""
		tj.Spec.Image, tj.Spec.Command = "me/train:1", []string{"python3", "fit.py"}
	}).Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	for _, s := range []mlv1.State{mlv1.StateInitializing, mlv1.StateRunning, mlv1.StateCompleted} {
		tj.Status.State = s
		if err := env.Client.Status().Update(ctx, tj); err != nil {
			t.Fatalf("status update to %s of a job with no model or dataset: %v", s, err)
		}
		if s != mlv1.StateRunning {
			continue
		}
		if err := env.Client.Update(ctx, tj); err != nil {
			t.Errorf("an update that changes nothing while Running: %v", err)
		}
		named := tj.DeepCopy()
		named.Spec.Model = "vit"
		if err := env.Client.Update(ctx, named); !apierrors.IsInvalid(err) || !slices.Contains(causeFields(err), "spec.model") {
			t.Errorf("naming a model while Running: error = %v, want Invalid naming spec.model", err)
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tj), tj); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAdmissionElasticResize: an elastic job's numWorkers may change while it runs, within its bounds;
// its bounds may not.
func TestAdmissionElasticResize(t *testing.T) {
	ctx := context.Background()
	tj := tjtest.NewTJ(newNamespace(t), "elastic").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Elastic = &mlv1.ElasticSpec{MinWorkers: 1, MaxWorkers: 4}
	}).Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	tj.Status.State = mlv1.StateRunning
	if err := env.Client.Status().Update(ctx, tj); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		change func(*mlv1.TrainingJob)
		field  string // "" when accepted
	}{
		{change: func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 4 }, field: ""},
		{change: func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 1 }, field: ""},
		{change: func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 5 }, field: "spec.numWorkers"},
		{change: func(tj *mlv1.TrainingJob) { tj.Spec.Elastic.MaxWorkers = 8 }, field: "spec.elastic"},
	} {
		changed := tj.DeepCopy()
		tc.change(changed)
		err := env.Client.Update(ctx, changed)
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("resize to %d while Running: %v", changed.Spec.NumWorkers, err)
		case tc.field != "" && (!apierrors.IsInvalid(err) || !slices.Contains(causeFields(err), tc.field)):
			t.Errorf("update %+v while Running: error = %v, want Invalid naming %s", changed.Spec.Elastic, err, tc.field)
		case err == nil:
			tj = changed
		}
	}
}

// TestPolicyImmutableWhileRunning: the ValidatingAdmissionPolicy of deploy/policy keeps env, resources,
// scheduling, checkpoint storage, the metrics port and workerPod fixed while the job runs, naming the field; the
// same edits pass while the job is Suspended.
func TestPolicyImmutableWhileRunning(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tj := tjtest.NewTJ(ns, "policy").Env("A", "1").Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	tj.Status.State = mlv1.StateRunning
	if err := env.Client.Status().Update(ctx, tj); err != nil {
		t.Fatal(err)
	}
	edits := []struct {
		field string
		f     change
	}{
		{field: "spec.env", f: func(tj *mlv1.TrainingJob) { tj.Spec.Env[0].Value = "2" }},
		{field: "spec.resources", f: gpuResources("limits", "1")},
		{field: "spec.scheduling", f: func(tj *mlv1.TrainingJob) { tj.Spec.Scheduling = &mlv1.SchedulingSpec{Priority: "high"} }},
		{field: "spec.checkpoint.storage", f: storage(mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "c"})},
		{field: "spec.monitoring.metricsPort", f: func(tj *mlv1.TrainingJob) { tj.Spec.Monitoring = &mlv1.MonitoringSpec{MetricsPort: 9000} }},
		{field: "spec.workerPod", f: func(tj *mlv1.TrainingJob) { tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{ServiceAccountName: "trainer"} }},
	}
	for _, e := range edits {
		eventually(t, e.field+" rejected while Running", func(ctx context.Context) error {
			changed := &mlv1.TrainingJob{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tj), changed); err != nil {
				return err
			}
			e.f(changed)
			err := env.Client.Update(ctx, changed)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), e.field+" is immutable") {
				return fmt.Errorf("update error = %v, want Invalid naming %s", err, e.field)
			}
			return nil
		})
	}
	tj.Status.State = mlv1.StateSuspended
	if err := env.Client.Status().Update(ctx, tj); err != nil {
		t.Fatal(err)
	}
	for _, e := range edits {
		e.f(tj)
	}
	if err := env.Client.Update(ctx, tj); err != nil {
		t.Errorf("editing while Suspended: %v", err)
	}
}

// TestAdmissionManagedByImmutable: spec.managedBy (MultiKueue's convention) cannot be set, changed or
// removed after creation: the controller that runs a job never changes under it.
func TestAdmissionManagedByImmutable(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	mk := tjtest.NewTJ(ns, "remote").With(func(tj *mlv1.TrainingJob) { tj.Spec.ManagedBy = ptr.To("kueue.x-k8s.io/multikueue") }).Obj()
	local := tjtest.NewTJ(ns, "local").Obj()
	for _, tj := range []*mlv1.TrainingJob{mk, local} {
		if err := env.Client.Create(ctx, tj); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		tj   *mlv1.TrainingJob
		f    change
	}{
		{name: "changed", tj: mk, f: func(tj *mlv1.TrainingJob) { tj.Spec.ManagedBy = ptr.To("example.com/other") }},
		{name: "removed", tj: mk, f: func(tj *mlv1.TrainingJob) { tj.Spec.ManagedBy = nil }},
		{name: "set later", tj: local, f: func(tj *mlv1.TrainingJob) { tj.Spec.ManagedBy = ptr.To("kueue.x-k8s.io/multikueue") }},
	} {
		changed := tc.tj.DeepCopy()
		tc.f(changed)
		err := env.Client.Update(ctx, changed)
		if !apierrors.IsInvalid(err) || !slices.Contains(causeFields(err), "spec.managedBy") {
			t.Errorf("managedBy %s: error = %v, want Invalid naming spec.managedBy", tc.name, err)
		}
	}
}

// TestAdmissionDispatchedNeedsRequests: a job MultiKueue dispatches must request something (Kueue would
// admit a pod set that requests nothing without its admission checks, and MultiKueue dispatch it nowhere);
// a GPU, a CPU request or a limit is enough, and a job the operator runs may request nothing.
func TestAdmissionDispatchedNeedsRequests(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	dispatched := func(name string, gpus int32, r *mlv1.Resources) *mlv1.TrainingJob {
		return tjtest.NewTJ(ns, name).GPUs(gpus).With(func(tj *mlv1.TrainingJob) {
			tj.Spec.ManagedBy, tj.Spec.Resources = ptr.To("kueue.x-k8s.io/multikueue"), r
		}).Obj()
	}
	cpu := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	for _, tc := range []struct {
		name    string
		tj      *mlv1.TrainingJob
		refused bool
	}{
		{name: "nothing", tj: dispatched("nothing", 0, nil), refused: true},
		{name: "empty resources", tj: dispatched("empty", 0, &mlv1.Resources{}), refused: true},
		{name: "a GPU", tj: dispatched("gpu", 1, nil)},
		{name: "a CPU request", tj: dispatched("cpu", 0, &mlv1.Resources{Requests: cpu})},
		{name: "a limit", tj: dispatched("limit", 0, &mlv1.Resources{Limits: cpu})},
		{name: "run here", tj: tjtest.NewTJ(ns, "here").GPUs(0).Obj()},
	} {
		err := env.Client.Create(ctx, tc.tj)
		if tc.refused != (err != nil) || tc.refused && (!apierrors.IsInvalid(err) || !slices.Contains(causeFields(err), "spec.resources")) {
			t.Errorf("%s: error = %v, want refused %v naming spec.resources", tc.name, err, tc.refused)
		}
	}
}
