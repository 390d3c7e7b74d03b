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
		{"minimal", func(*mlv1.TrainingJob) {}},
		{"a script of one's own names no model or dataset", func(tj *mlv1.TrainingJob) { tj.Spec.Model, tj.Spec.Dataset = "", "" }},
		{"model and dataset with spaces", func(tj *mlv1.TrainingJob) { tj.Spec.Model, tj.Spec.Dataset = "resnet 50", "image net 1k" }},
		{"sources of every kind", func(tj *mlv1.TrainingJob) {
			tj.Spec.Model, tj.Spec.Dataset = "hf://google-bert/bert-base-uncased@main", "s3://datasets/squad/v2"
			tj.Spec.Inputs = &mlv1.InputsSpec{Endpoint: "http://minio:9000", HubEndpoint: "https://hf-mirror.example.com", CacheSize: ptr.To(resource.MustParse("1Gi"))}
		}},
		{"a claim and an export", func(tj *mlv1.TrainingJob) {
			tj.Spec.Model, tj.Spec.Dataset = "pvc://models/bert", "nfs://10.0.0.5/exports/squad"
		}},
		{"gcs and an archive", func(tj *mlv1.TrainingJob) {
			tj.Spec.Model, tj.Spec.Dataset = "gs://models/bert", "https://example.com/cifar.tar.gz"
		}},
		{"one worker", func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 1 }},
		{"1024 workers", func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 1024 }},
		{"cpu only", func(tj *mlv1.TrainingJob) { tj.Spec.GPUsPerWorker = ptr.To[int32](0) }},
		{"cpu only with gloo", func(tj *mlv1.TrainingJob) {
			tj.Spec.GPUsPerWorker = ptr.To[int32](0)
			tj.Spec.Networking = &mlv1.NetworkingSpec{Backend: mlv1.BackendGloo}
		}},
		{"16 gpus", func(tj *mlv1.TrainingJob) { tj.Spec.GPUsPerWorker = ptr.To[int32](16) }},
		{"tensorflow", func(tj *mlv1.TrainingJob) { tj.Spec.Framework = mlv1.FrameworkTensorFlow }},
		{"jax", func(tj *mlv1.TrainingJob) { tj.Spec.Framework = mlv1.FrameworkJAX }},
		{"xgboost with its image", func(tj *mlv1.TrainingJob) { tj.Spec.Framework, tj.Spec.Image = mlv1.FrameworkXGBoost, "xgb:1" }},
		{"paddle with its image", func(tj *mlv1.TrainingJob) { tj.Spec.Framework, tj.Spec.Image = mlv1.FrameworkPaddle, "paddle:3" }},
		{"no image and no command (accepted, warned, fails if it trains nothing)", func(tj *mlv1.TrainingJob) { tj.Spec.Command = nil }},
		{"amd gpus with an equal limit", func(tj *mlv1.TrainingJob) {
			tj.Spec.GPUResourceName = "amd.com/gpu"
			tj.Spec.Resources = &mlv1.Resources{Limits: corev1.ResourceList{"amd.com/gpu": resource.MustParse("1")}}
		}},
		{"a MIG slice", func(tj *mlv1.TrainingJob) { tj.Spec.GPUResourceName = "nvidia.com/mig-1g.10gb" }},
		{"tiny learning rate", hp(func(h *mlv1.Hyperparameters) { h.LearningRate = ptr.To(0.00005) })},
		{"largest learning rate", hp(func(h *mlv1.Hyperparameters) { h.LearningRate = ptr.To(10.0) })},
		{"all hyperparameters", hp(func(h *mlv1.Hyperparameters) {
			h.BatchSize, h.Epochs, h.WarmupSteps = ptr.To[int32](1), ptr.To[int32](100000), ptr.To[int32](0)
			h.GradientAccumulationSteps, h.Optimizer, h.MixedPrecision = ptr.To[int32](4096), "adamw", ptr.To(true)
		})},
		{"64 additional params", hp(func(h *mlv1.Hyperparameters) { h.AdditionalParams = many })},
		{"gpu limit equal", func(tj *mlv1.TrainingJob) {
			tj.Spec.GPUsPerWorker = ptr.To[int32](2)
			tj.Spec.Resources = &mlv1.Resources{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}}
		}},
		{"gpu request equal default", gpuResources("requests", "1")},
		{"cpu and memory only", func(tj *mlv1.TrainingJob) {
			tj.Spec.Resources = &mlv1.Resources{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("2Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")},
			}
		}},
		{"env referring to RANK", func(tj *mlv1.TrainingJob) {
			tj.Spec.Env = []corev1.EnvVar{{Name: "MY_RANK", Value: "$(RANK)"}, {Name: "NCCL_DEBUG", Value: "INFO"}}
		}},
		{"env from secret", func(tj *mlv1.TrainingJob) {
			tj.Spec.Env = []corev1.EnvVar{{Name: "HF_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "hf"}, Key: "token"}}}}
		}},
		{"s3 storage in full", storage(mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "ckpt.bucket-1", Prefix: "team/a",
			Endpoint: "http://minio.minio:9000", Region: "us-east-1", SecretRef: &corev1.LocalObjectReference{Name: "s3-creds"}})},
		{"gcs storage", storage(mlv1.CheckpointStorage{Type: mlv1.StorageGCS, GCSBucket: "my_bucket.v2"})},
		{"pvc storage", storage(mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "ckpt-claim"})},
		{"nfs storage", storage(mlv1.CheckpointStorage{Type: mlv1.StorageNFS, NFS: &mlv1.NFSStorage{Server: "10.0.0.2", Path: "/exports/ckpt"}})},
		{"nccl tuning and the operator's defaults in env", func(tj *mlv1.TrainingJob) {
			tj.Spec.Env = []corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "INFO"}, {Name: "NCCL_IB_DISABLE", Value: "1"},
				{Name: "NCCL_SOCKET_IFNAME", Value: "eth0"}, {Name: "PYTHONUNBUFFERED", Value: "0"}, {Name: "OMP_NUM_THREADS", Value: "8"},
				{Name: "AWS_REGION", Value: "eu-west-1"}}
		}},
		{"checkpoint enabled without storage", func(tj *mlv1.TrainingJob) {
			tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Frequency: ptr.To[int32](1)}
		}},
		{"operator's claim with size, class and retention", storage(mlv1.CheckpointStorage{Type: mlv1.StoragePVC,
			Size: ptr.To(resource.MustParse("500Gi")), StorageClassName: ptr.To("efs"), ClaimRetentionPolicy: mlv1.ClaimDelete})},
		{"storage with only a size (type defaults to pvc)", storage(mlv1.CheckpointStorage{Size: ptr.To(resource.MustParse("1Ti"))})},
		{"resume from a path without storage", func(tj *mlv1.TrainingJob) {
			tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), ResumeFrom: "/checkpoints/ml/old/checkpoint-epoch-3"}
		}},
		{"checkpoint disabled without storage", func(tj *mlv1.TrainingJob) { tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(false)} }},
		{"resume from s3 uri in another bucket", func(tj *mlv1.TrainingJob) {
			storage(mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "runs"})(tj)
			tj.Spec.Checkpoint.ResumeFrom = "s3://bucket/ns/job/checkpoint-epoch-3/"
		}},
		{"resume from pvc:// uri", ckpt(func(c *mlv1.CheckpointSpec) { c.ResumeFrom = "pvc://ns/job/checkpoint-epoch-3" })},
		{"resume from path, retention 1", ckpt(func(c *mlv1.CheckpointSpec) { c.ResumeFrom, c.Retention = "/ckpt/checkpoint-epoch-1", ptr.To[int32](1) })},
		{"scheduling in full", func(tj *mlv1.TrainingJob) {
			tj.Spec.Scheduling = &mlv1.SchedulingSpec{
				Priority: "high", NodeSelector: map[string]string{"gpu": "a100"}, SchedulerName: "volcano", QueueName: "team-a",
				Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}}}}}}}},
			}
		}},
		{"monitoring in full", func(tj *mlv1.TrainingJob) {
			tj.Spec.Monitoring = &mlv1.MonitoringSpec{Enabled: ptr.To(true), MetricsPort: 9090, TensorboardEnabled: ptr.To(true),
				MLflowTrackingURI: "https://mlflow.example.com", WandbProject: "mnist"}
			tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true)} // where TensorBoard's logs are kept
		}},
		{"mpi with rdma on a custom port", func(tj *mlv1.TrainingJob) {
			tj.Spec.Networking = &mlv1.NetworkingSpec{Backend: mlv1.BackendMPI, RDMAEnabled: ptr.To(true), MasterPort: 23456}
		}},
		{"never restart, no retries, deadline", func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{RestartPolicy: mlv1.RestartNever, BackoffLimit: ptr.To[int32](0), ActiveDeadlineSeconds: ptr.To[int64](3600)}
		}},
		{"success policy bounds", func(tj *mlv1.TrainingJob) {
			tj.Spec.SuccessPolicy = &mlv1.SuccessPolicy{TargetAccuracy: ptr.To(1.0), TargetLoss: ptr.To(0.0), EarlyStoppingPatience: ptr.To[int32](1)}
		}},
		{"suspended", func(tj *mlv1.TrainingJob) { tj.Spec.Suspend = ptr.To(true) }},
		{"name of 52 characters", func(tj *mlv1.TrainingJob) { tj.Name = "a" + strings.Repeat("b", 51) }},
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
	got := defaults{*s.GPUsPerWorker, *s.Checkpoint.Frequency, *s.Checkpoint.Retention, s.Monitoring.MetricsPort,
		s.Networking.MasterPort, *s.FailurePolicy.BackoffLimit, s.Framework, s.FailurePolicy.RestartPolicy, *s.Monitoring.Enabled}
	want := defaults{1, 1, 3, 8080, 29500, 3, mlv1.FrameworkPyTorch, mlv1.RestartGang, true}
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
		{"spec.numWorkers", func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 4 }},
		{"spec.model", func(tj *mlv1.TrainingJob) { tj.Spec.Model = "vit" }},
		{"spec.image", func(tj *mlv1.TrainingJob) { tj.Spec.Image = "other:1" }},
		{"spec.gpusPerWorker", func(tj *mlv1.TrainingJob) { tj.Spec.GPUsPerWorker = ptr.To[int32](2) }},
		{"spec.hyperparameters", hp(func(h *mlv1.Hyperparameters) { h.Epochs = ptr.To[int32](99) })},
		{"spec.networking", func(tj *mlv1.TrainingJob) { tj.Spec.Networking = &mlv1.NetworkingSpec{MasterPort: 1234} }},
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
		{func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 4 }, ""},
		{func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 1 }, ""},
		{func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 5 }, "spec.numWorkers"},
		{func(tj *mlv1.TrainingJob) { tj.Spec.Elastic.MaxWorkers = 8 }, "spec.elastic"},
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
		{"spec.env", func(tj *mlv1.TrainingJob) { tj.Spec.Env[0].Value = "2" }},
		{"spec.resources", gpuResources("limits", "1")},
		{"spec.scheduling", func(tj *mlv1.TrainingJob) { tj.Spec.Scheduling = &mlv1.SchedulingSpec{Priority: "high"} }},
		{"spec.checkpoint.storage", storage(mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "c"})},
		{"spec.monitoring.metricsPort", func(tj *mlv1.TrainingJob) { tj.Spec.Monitoring = &mlv1.MonitoringSpec{MetricsPort: 9000} }},
		{"spec.workerPod", func(tj *mlv1.TrainingJob) { tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{ServiceAccountName: "trainer"} }},
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
		{"changed", mk, func(tj *mlv1.TrainingJob) { tj.Spec.ManagedBy = ptr.To("example.com/other") }},
		{"removed", mk, func(tj *mlv1.TrainingJob) { tj.Spec.ManagedBy = nil }},
		{"set later", local, func(tj *mlv1.TrainingJob) { tj.Spec.ManagedBy = ptr.To("kueue.x-k8s.io/multikueue") }},
	} {
		changed := tc.tj.DeepCopy()
		tc.f(changed)
		err := env.Client.Update(ctx, changed)
		if !apierrors.IsInvalid(err) || !slices.Contains(causeFields(err), "spec.managedBy") {
			t.Errorf("managedBy %s: error = %v, want Invalid naming spec.managedBy", tc.name, err)
		}
	}
}
