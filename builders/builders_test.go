package builders_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

var opts = builders.Options{DefaultImages: map[mlv1.Framework]string{
	mlv1.FrameworkPyTorch: "torch:1", mlv1.FrameworkTensorFlow: "tf:1", mlv1.FrameworkJAX: "jax:1",
}}

func envMap(env []corev1.EnvVar) map[string]string {
	m := map[string]string{}
	for _, e := range env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			m[e.Name] = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
			continue
		case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil:
			m[e.Name] = "configMapKeyRef:" + e.ValueFrom.ConfigMapKeyRef.Name + "/" + e.ValueFrom.ConfigMapKeyRef.Key
			continue
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			m[e.Name] = "secretKeyRef:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
			continue
		}
		m[e.Name] = e.Value
	}
	return m
}

func TestWorkerEnv(t *testing.T) {
	common := map[string]string{
		"TRAININGJOB_NAME": "mnist", "TRAININGJOB_NAMESPACE": "ml", "MODEL_NAME": "cnn", "DATASET_NAME": "mnist",
		"TRAININGJOB_CONFIG": "/etc/trainingjob/config.json", "METRICS_PORT": "8080", "PYTHONUNBUFFERED": "1",
		"POD_IP":    "fieldRef:status.podIP",
		"RANK":      "fieldRef:metadata.annotations['batch.kubernetes.io/job-completion-index']",
		"NODE_RANK": "$(RANK)", "WORLD_SIZE": "2", "MASTER_ADDR": "mnist-worker-0.mnist-headless.ml.svc", "MASTER_PORT": "29500",
		"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
	}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range common {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	cases := []struct {
		name string
		tj   *mlv1.TrainingJob
		want map[string]string
	}{
		{
			name: "pytorch with gpus",
			tj:   tjtest.NewTJ("ml", "mnist").GPUs(4).Obj(),
			want: with(map[string]string{
				"DIST_BACKEND": "nccl", "NCCL_IB_DISABLE": "1", "PET_MASTER_ADDR": "$(MASTER_ADDR)", "PET_MASTER_PORT": "$(MASTER_PORT)",
				"PET_NNODES": "2", "PET_NODE_RANK": "$(RANK)", "PET_NPROC_PER_NODE": "4",
			}),
		},
		{
			name: "pytorch cpu-only with user env",
			tj:   tjtest.NewTJ("ml", "mnist").GPUs(0).Env("MY_RANK", "$(RANK)").Obj(),
			want: with(map[string]string{
				"DIST_BACKEND": "gloo", "NVIDIA_VISIBLE_DEVICES": "void", "PET_MASTER_ADDR": "$(MASTER_ADDR)", "PET_MASTER_PORT": "$(MASTER_PORT)",
				"PET_NNODES": "2", "PET_NODE_RANK": "$(RANK)", "PET_NPROC_PER_NODE": "1", "MY_RANK": "$(RANK)",
			}),
		},
		{
			name: "tensorflow",
			tj:   tjtest.NewTJ("ml", "mnist").GPUs(0).Framework(mlv1.FrameworkTensorFlow).Obj(),
			want: with(map[string]string{
				"DIST_BACKEND": "gloo", "NVIDIA_VISIBLE_DEVICES": "void",
				"TF_CONFIG": `{"cluster":{"worker":["mnist-worker-0.mnist-headless.ml.svc:29500","mnist-worker-1.mnist-headless.ml.svc:29500"]},` +
					`"task":{"type":"worker","index":$(RANK)}}`,
			}),
		},
		{
			name: "pvc checkpoints",
			tj: tjtest.NewTJ("ml", "mnist").GPUs(0).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Frequency: ptr.To[int32](5),
					Storage: &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "ckpt", Prefix: "runs"}}
			}).Obj(),
			want: with(map[string]string{
				"DIST_BACKEND": "gloo", "NVIDIA_VISIBLE_DEVICES": "void", "PET_MASTER_ADDR": "$(MASTER_ADDR)", "PET_MASTER_PORT": "$(MASTER_PORT)",
				"PET_NNODES": "2", "PET_NODE_RANK": "$(RANK)", "PET_NPROC_PER_NODE": "1",
				"CHECKPOINT_DIR": "/checkpoints/runs/ml/mnist", "CHECKPOINT_FREQUENCY": "5",
				"RESUME_FROM": "configMapKeyRef:mnist-config/RESUME_FROM",
			}),
		},
		{
			name: "checkpoints disabled",
			tj: tjtest.NewTJ("ml", "mnist").GPUs(0).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(false),
					Storage: &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "ckpt"}}
			}).Obj(),
			want: with(map[string]string{
				"DIST_BACKEND": "gloo", "NVIDIA_VISIBLE_DEVICES": "void", "PET_MASTER_ADDR": "$(MASTER_ADDR)", "PET_MASTER_PORT": "$(MASTER_PORT)",
				"PET_NNODES": "2", "PET_NODE_RANK": "$(RANK)", "PET_NPROC_PER_NODE": "1",
			}),
		},
		{
			name: "user NCCL tuning and defaults overridden",
			tj: tjtest.NewTJ("ml", "mnist").GPUs(1).
				Env("NCCL_DEBUG", "INFO").Env("NCCL_IB_DISABLE", "0").Env("PYTHONUNBUFFERED", "0").Env("OMP_NUM_THREADS", "4").Obj(),
			want: with(map[string]string{
				"DIST_BACKEND": "nccl", "PET_MASTER_ADDR": "$(MASTER_ADDR)", "PET_MASTER_PORT": "$(MASTER_PORT)",
				"PET_NNODES": "2", "PET_NODE_RANK": "$(RANK)", "PET_NPROC_PER_NODE": "1",
				"NCCL_DEBUG": "INFO", "NCCL_IB_DISABLE": "0", "PYTHONUNBUFFERED": "0", "OMP_NUM_THREADS": "4",
			}),
		},
		{
			name: "checkpoints in the claim the operator chose",
			tj: tjtest.NewTJ("ml", "mnist").GPUs(0).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Frequency: ptr.To[int32](1)}
				tj.Status.CheckpointStorage = &mlv1.CheckpointStorage{Type: mlv1.StoragePVC}
			}).Obj(),
			want: with(map[string]string{
				"DIST_BACKEND": "gloo", "NVIDIA_VISIBLE_DEVICES": "void", "PET_MASTER_ADDR": "$(MASTER_ADDR)", "PET_MASTER_PORT": "$(MASTER_PORT)",
				"PET_NNODES": "2", "PET_NODE_RANK": "$(RANK)", "PET_NPROC_PER_NODE": "1",
				"CHECKPOINT_DIR": "/checkpoints/ml/mnist", "CHECKPOINT_FREQUENCY": "1",
				"RESUME_FROM": "configMapKeyRef:mnist-config/RESUME_FROM",
			}),
		},
		{
			name: "checkpoints enabled, storage not chosen yet",
			tj: tjtest.NewTJ("ml", "mnist").GPUs(0).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true)}
			}).Obj(),
			want: with(map[string]string{
				"DIST_BACKEND": "gloo", "NVIDIA_VISIBLE_DEVICES": "void", "PET_MASTER_ADDR": "$(MASTER_ADDR)", "PET_MASTER_PORT": "$(MASTER_PORT)",
				"PET_NNODES": "2", "PET_NODE_RANK": "$(RANK)", "PET_NPROC_PER_NODE": "1",
			}),
		},
		{
			name: "s3 storage identity overridden by env",
			tj: tjtest.NewTJ("ml", "mnist").GPUs(0).Env("AWS_REGION", "eu-west-1").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Frequency: ptr.To[int32](1),
					Storage: &mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "ckpt", Region: "us-east-1", Endpoint: "http://minio:9000"}}
			}).Obj(),
			want: with(map[string]string{
				"DIST_BACKEND": "gloo", "NVIDIA_VISIBLE_DEVICES": "void", "PET_MASTER_ADDR": "$(MASTER_ADDR)", "PET_MASTER_PORT": "$(MASTER_PORT)",
				"PET_NNODES": "2", "PET_NODE_RANK": "$(RANK)", "PET_NPROC_PER_NODE": "1",
				"CHECKPOINT_URI": "s3://ckpt/ml/mnist", "CHECKPOINT_FREQUENCY": "1",
				"RESUME_FROM":         "configMapKeyRef:mnist-config/RESUME_FROM",
				"AWS_ENDPOINT_URL_S3": "http://minio:9000", "AWS_REGION": "eu-west-1",
			}),
		},
		{
			name: "jax with rdma",
			tj: tjtest.NewTJ("ml", "mnist").Framework(mlv1.FrameworkJAX).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Networking = &mlv1.NetworkingSpec{RDMAEnabled: ptr.To(true)}
			}).Obj(),
			want: with(map[string]string{
				"DIST_BACKEND": "nccl", "NCCL_IB_DISABLE": "0", "JAX_COORDINATOR_ADDRESS": "$(MASTER_ADDR):$(MASTER_PORT)",
				"JAX_COORDINATOR_BIND_ADDRESS": "$(POD_IP):$(MASTER_PORT)", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "$(RANK)",
				"COORDINATOR_ADDRESS": "$(MASTER_ADDR)", "COORDINATOR_PORT": "$(MASTER_PORT)", "NUM_PROCESSES": "2", "PROCESS_ID": "$(RANK)",
			}),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := builders.WorkerEnv(tc.tj, builders.Options{})
			if diff := cmp.Diff(tc.want, envMap(env)); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
			if len(env) != len(tc.want) {
				t.Errorf("env has %d entries for %d names: a name is duplicated", len(env), len(tc.want))
			}
			assertReferencesDefinedEarlier(t, env)
		})
	}
}

// assertReferencesDefinedEarlier: the kubelet expands $(VAR) only from entries defined before.
func assertReferencesDefinedEarlier(t *testing.T, env []corev1.EnvVar) {
	t.Helper()
	seen := map[string]bool{}
	for _, e := range env {
		for _, ref := range []string{"RANK", "MASTER_ADDR", "MASTER_PORT"} {
			if strings.Contains(e.Value, "$("+ref+")") && !seen[ref] {
				t.Errorf("%s refers to $(%s) before it is defined", e.Name, ref)
			}
		}
		seen[e.Name] = true
	}
}

func TestJob(t *testing.T) {
	gpu := func(n int64) corev1.ResourceList {
		return corev1.ResourceList{builders.DefaultGPUResource: *resource.NewQuantity(n, resource.DecimalSI)}
	}
	cases := []struct {
		name  string
		tj    *mlv1.TrainingJob
		check func(t *testing.T, job *batchv1.Job)
	}{
		{
			name: "indexed, one pod per worker, under the headless service",
			tj:   tjtest.NewTJ("ml", "mnist").Workers(8).Obj(),
			check: func(t *testing.T, job *batchv1.Job) {
				type shape struct {
					Name                 string
					CompletionMode       batchv1.CompletionMode
					Completions          int32
					Parallelism          int32
					BackoffLimit         int32
					Suspend              bool
					PodReplacementPolicy batchv1.PodReplacementPolicy
					Subdomain            string
					RestartPolicy        corev1.RestartPolicy
					Image                string
					NameLabel            string // the pod template's
					PodAttemptLabel      string // the pod template's
					JobAttemptLabel      string
					FailJobOnCondition   corev1.PodConditionType // the first pod failure policy rule's
				}
				s := job.Spec
				got := shape{
					Name:                 job.Name,
					CompletionMode:       *s.CompletionMode,
					Completions:          *s.Completions,
					Parallelism:          *s.Parallelism,
					BackoffLimit:         *s.BackoffLimit,
					Suspend:              *s.Suspend,
					PodReplacementPolicy: *s.PodReplacementPolicy,
					Subdomain:            s.Template.Spec.Subdomain,
					RestartPolicy:        s.Template.Spec.RestartPolicy,
					Image:                s.Template.Spec.Containers[0].Image,
					NameLabel:            s.Template.Labels[names.NameLabel],
					PodAttemptLabel:      s.Template.Labels[names.AttemptLabel],
					JobAttemptLabel:      job.Labels[names.AttemptLabel],
					FailJobOnCondition:   s.PodFailurePolicy.Rules[0].OnPodConditions[0].Type,
				}
				// Gang restarts (the default): the Job runs one attempt and fails at its first failed pod.
				want := shape{
					Name:                 "mnist-worker",
					CompletionMode:       batchv1.IndexedCompletion,
					Completions:          8,
					Parallelism:          8,
					BackoffLimit:         0,
					Suspend:              false,
					PodReplacementPolicy: batchv1.Failed,
					Subdomain:            "mnist-headless",
					RestartPolicy:        corev1.RestartPolicyNever,
					Image:                "torch:1",
					NameLabel:            "mnist",
					PodAttemptLabel:      "0",
					JobAttemptLabel:      "0",
					FailJobOnCondition:   corev1.DisruptionTarget,
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("job (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "gpu limit from gpusPerWorker",
			tj:   tjtest.NewTJ("ml", "a").GPUs(2).Obj(),
			check: func(t *testing.T, job *batchv1.Job) {
				if diff := cmp.Diff(gpu(2), job.Spec.Template.Spec.Containers[0].Resources.Limits); diff != "" {
					t.Errorf("limits (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "gpu limit of the named resource",
			tj:   tjtest.NewTJ("ml", "a").GPUs(2).With(func(tj *mlv1.TrainingJob) { tj.Spec.GPUResourceName = "amd.com/gpu" }).Obj(),
			check: func(t *testing.T, job *batchv1.Job) {
				want := corev1.ResourceList{"amd.com/gpu": *resource.NewQuantity(2, resource.DecimalSI)}
				if diff := cmp.Diff(want, job.Spec.Template.Spec.Containers[0].Resources.Limits); diff != "" {
					t.Errorf("limits (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "the minimal pytorch job runs the default runner",
			tj:   tjtest.NewTJ("ml", "a").NoCommand().Obj(),
			check: func(t *testing.T, job *batchv1.Job) {
				c := job.Spec.Template.Spec.Containers[0]
				want := append([]string{builders.SupervisorPath, "--listen=[$(POD_IP)]:8084", "--"}, builders.RunnerCommand...)
				if diff := cmp.Diff([]any{"torch:1", want}, []any{c.Image, c.Command}); diff != "" {
					t.Errorf("image, command (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "args without a command run as the image says",
			tj:   tjtest.NewTJ("ml", "a").NoCommand().With(func(tj *mlv1.TrainingJob) { tj.Spec.Args = []string{"python3", "t.py"} }).Obj(),
			check: func(t *testing.T, job *batchv1.Job) {
				if c := job.Spec.Template.Spec.Containers[0]; c.Command != nil {
					t.Errorf("command = %v, want none", c.Command)
				}
			},
		},
		{
			name: "other frameworks' default images get no runner",
			tj:   tjtest.NewTJ("ml", "a").NoCommand().Framework(mlv1.FrameworkJAX).Obj(),
			check: func(t *testing.T, job *batchv1.Job) {
				if c := job.Spec.Template.Spec.Containers[0]; c.Command != nil {
					t.Errorf("command = %v, want none", c.Command)
				}
			},
		},
		{
			name: "mpi: rank 0 launches, every rank serves SSH, the Job succeeds with rank 0",
			tj: tjtest.NewTJ("ml", "a").GPUs(2).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Networking = &mlv1.NetworkingSpec{Backend: mlv1.BackendMPI}
				tj.Spec.Command, tj.Spec.Args = []string{"mpirun", "-np", "4"}, []string{"python3", "t.py"}
			}).Obj(),
			check: func(t *testing.T, job *batchv1.Job) {
				p := job.Spec.Template.Spec
				c := p.Containers[0]
				got := []any{c.Command[3:5], c.Command[6], c.Args, *job.Spec.SuccessPolicy.Rules[0].SucceededIndexes,
					c.Ports[2].ContainerPort, p.Volumes[1].Secret.SecretName, *p.Volumes[1].Secret.DefaultMode, c.VolumeMounts[1].MountPath,
					c.SecurityContext.Capabilities.Add}
				want := []any{[]string{"/bin/sh", "-c"}, "mpi", []string{"mpirun", "-np", "4", "python3", "t.py"}, "0",
					int32(2222), "a-ssh", int32(0o600), "/etc/mpi/ssh", []corev1.Capability{"SETUID", "SETGID", "SYS_CHROOT"}}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("mpi job (-want +got):\n%s", diff)
				}
				env := envMap(c.Env)
				if env["MPI_HOSTS"] != "a-worker-0.a-headless.ml.svc:2 a-worker-1.a-headless.ml.svc:2" ||
					env["OMPI_MCA_orte_default_hostfile"] != "/etc/mpi/run/hostfile" ||
					env["OMPI_MCA_orte_keep_fqdn_hostnames"] != "true" {
					t.Errorf("MPI_HOSTS %q, hostfile %q, keep FQDN %q",
						env["MPI_HOSTS"], env["OMPI_MCA_orte_default_hostfile"], env["OMPI_MCA_orte_keep_fqdn_hostnames"])
				}
			},
		},
		{
			name: "cpu-only has no gpu",
			tj:   tjtest.NewTJ("ml", "a").GPUs(0).Obj(),
			check: func(t *testing.T, job *batchv1.Job) {
				if l := job.Spec.Template.Spec.Containers[0].Resources.Limits; len(l) != 0 {
					t.Errorf("limits = %v, want none", l)
				}
			},
		},
		{
			name: "user resources kept",
			tj: tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Resources = &mlv1.Resources{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}
			}).Obj(),
			check: func(t *testing.T, job *batchv1.Job) {
				r := job.Spec.Template.Spec.Containers[0].Resources
				if r.Requests.Cpu().String() != "2" || r.Limits.Name(builders.DefaultGPUResource, resource.DecimalSI).Value() != 1 {
					t.Errorf("resources = %+v", r)
				}
			},
		},
		{
			name: "in-place restarts: the Job's own backoff, no deadline of its own",
			tj: tjtest.NewTJ("ml", "a").BackoffLimit(5, mlv1.RestartOnFailure).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.FailurePolicy.ActiveDeadlineSeconds = ptr.To[int64](60)
				tj.Status.Attempt = 2
			}).Obj(),
			check: func(t *testing.T, job *batchv1.Job) {
				got := []any{job.Spec.Template.Spec.RestartPolicy, *job.Spec.BackoffLimit, job.Spec.PodFailurePolicy == nil,
					job.Spec.ActiveDeadlineSeconds == nil, job.Labels[names.AttemptLabel]}
				if diff := cmp.Diff([]any{corev1.RestartPolicyOnFailure, int32(5), true, true, "2"}, got); diff != "" {
					t.Errorf("restartPolicy, backoffLimit, no podFailurePolicy, no deadline, attempt (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "scheduling, queue, failure policy, suspend",
			tj: tjtest.NewTJ("ml", "a").Suspend(true).BackoffLimit(0, mlv1.RestartNever).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Scheduling = &mlv1.SchedulingSpec{Priority: "high", NodeSelector: map[string]string{"gpu": "a100"},
					SchedulerName: "volcano", QueueName: "team-a",
					Tolerations: []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}}
				tj.Spec.FailurePolicy.ActiveDeadlineSeconds = ptr.To[int64](60)
			}).Obj(),
			check: func(t *testing.T, job *batchv1.Job) {
				p := job.Spec.Template.Spec
				got := []any{p.PriorityClassName, p.NodeSelector["gpu"], p.SchedulerName, len(p.Tolerations), job.Labels[names.QueueLabel],
					p.RestartPolicy, *job.Spec.BackoffLimit, job.Spec.ActiveDeadlineSeconds == nil, *job.Spec.Suspend}
				// The queue is the Workload's: the Job is never labelled, so Kueue never charges it.
				want := []any{"high", "a100", "volcano", 1, "", corev1.RestartPolicyNever, int32(0), true, true}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "ports and config mount",
			tj: tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Monitoring = &mlv1.MonitoringSpec{MetricsPort: 9100}
			}).Obj(),
			check: func(t *testing.T, job *batchv1.Job) {
				c := job.Spec.Template.Spec.Containers[0]
				got := []any{c.Ports[0].ContainerPort, c.Ports[1].ContainerPort, c.VolumeMounts[0].MountPath,
					job.Spec.Template.Spec.Volumes[0].ConfigMap.Name, c.TerminationMessagePolicy}
				want := []any{int32(29500), int32(9100), "/etc/trainingjob", "a-config", corev1.TerminationMessageFallbackToLogsOnError}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "pvc checkpoints mounted",
			tj: tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true),
					Storage: &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "ckpt"}}
			}).Obj(),
			check: func(t *testing.T, job *batchv1.Job) {
				p := job.Spec.Template.Spec
				got := []any{p.Volumes[1].Name, p.Volumes[1].PersistentVolumeClaim.ClaimName, p.Containers[0].VolumeMounts[1]}
				want := []any{"checkpoints", "ckpt", corev1.VolumeMount{Name: "checkpoints", MountPath: "/checkpoints"}}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "checkpoint agent as a native sidecar",
			tj: tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Retention: ptr.To[int32](2),
					ResumeFrom: "/checkpoints/ml/old/checkpoint-epoch-4",
					Storage:    &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "ckpt"}}
			}).Obj(),
			check: func(t *testing.T, job *batchv1.Job) {
				check, a := job.Spec.Template.Spec.InitContainers[0], job.Spec.Template.Spec.InitContainers[1]
				wantCheck := []string{"checkpoint-agent", "--check-resume-from=/checkpoints/ml/old/checkpoint-epoch-4",
					"--storage-type=pvc", "--dir=/checkpoints"}
				if diff := cmp.Diff(wantCheck, check.Args); diff != "" || check.Name != "resume-check" || check.RestartPolicy != nil ||
					check.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
					t.Errorf("resume check %s %v %s, args (-want +got):\n%s", check.Name, check.RestartPolicy, check.TerminationMessagePolicy, diff)
				}
				got := []any{a.Name, *a.RestartPolicy, a.Command, a.Args, a.Env[0].Name, a.VolumeMounts[0].MountPath, a.Ports[0].ContainerPort}
				want := []any{"checkpoint-agent", corev1.ContainerRestartPolicyAlways, []string{"/manager"},
					[]string{"checkpoint-agent", "--listen=$(POD_IP):8082", "--protect=/checkpoints/ml/old/checkpoint-epoch-4", "--retention=2",
						"--root=ml/a", "--storage-type=pvc", "--termination-log=/dev/termination-log", "--dir=/checkpoints"},
					"RANK", "/checkpoints", int32(8082)}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "s3 checkpoints: credentials from the secret for the agent, URI for the trainer",
			tj: tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Storage: &mlv1.CheckpointStorage{
					Type: mlv1.StorageS3, S3Bucket: "ckpt", Prefix: "runs", Endpoint: "http://minio:9000",
					SecretRef: &corev1.LocalObjectReference{Name: "s3-keys"},
				}}
			}).Obj(),
			check: func(t *testing.T, job *batchv1.Job) {
				p := job.Spec.Template.Spec
				a := p.InitContainers[0]
				if len(p.Volumes) != 3 || p.Volumes[2].Name != builders.SharedMemoryVolumeName || a.EnvFrom[0].SecretRef.Name != "s3-keys" ||
					!slices.Contains(a.Args, "--s3-bucket=ckpt") || !slices.Contains(a.Args, "--endpoint=http://minio:9000") {
					t.Errorf("agent %+v, volumes %d", a, len(p.Volumes))
				}
				c := p.Containers[0]
				env := envMap(c.Env)
				got := []any{env["CHECKPOINT_URI"], env["CHECKPOINT_DIR"], env["AWS_ENDPOINT_URL_S3"], envMap(a.Env)["AWS_ENDPOINT_URL_S3"],
					c.EnvFrom}
				want := []any{"s3://ckpt/runs/ml/a", "", "http://minio:9000", "http://minio:9000", a.EnvFrom}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("the trainer writes to CHECKPOINT_URI with the agent's identity (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "gcs key mounted for the agent",
			tj: tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Storage: &mlv1.CheckpointStorage{
					Type: mlv1.StorageGCS, GCSBucket: "ckpt", SecretRef: &corev1.LocalObjectReference{Name: "gcs-key"},
				}}
			}).Obj(),
			check: func(t *testing.T, job *batchv1.Job) {
				p := job.Spec.Template.Spec
				a := p.InitContainers[0]
				key := builders.CredentialsPath + "/service-account.json"
				if p.Volumes[1].Secret.SecretName != "gcs-key" || envMap(a.Env)["GOOGLE_APPLICATION_CREDENTIALS"] != key {
					t.Errorf("agent %+v, volumes %+v", a, p.Volumes)
				}
				c := p.Containers[0]
				if envMap(c.Env)["GOOGLE_APPLICATION_CREDENTIALS"] != key || !slices.Contains(c.VolumeMounts, a.VolumeMounts[0]) ||
					envMap(c.Env)["CHECKPOINT_URI"] != "gs://ckpt/ml/a" {
					t.Errorf("trainer %+v", c)
				}
			},
		},
		{
			name: "nfs checkpoints mounted",
			tj: tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Storage: &mlv1.CheckpointStorage{Type: mlv1.StorageNFS,
					NFS: &mlv1.NFSStorage{Server: "nfs.example.com", Path: "/exports/ml"}}}
			}).Obj(),
			check: func(t *testing.T, job *batchv1.Job) {
				want := &corev1.NFSVolumeSource{Server: "nfs.example.com", Path: "/exports/ml"}
				if diff := cmp.Diff(want, job.Spec.Template.Spec.Volumes[1].NFS); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := builders.Job(tc.tj, opts)
			tc.check(t, job)
			if diff := cmp.Diff(job, builders.Job(tc.tj, opts)); diff != "" {
				t.Errorf("building twice differs (-first +second):\n%s", diff)
			}
		})
	}
}

func TestService(t *testing.T) {
	svc := builders.Service(tjtest.NewTJ("ml", "mnist").Obj())
	got := []any{svc.Name, svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses, svc.Spec.Selector, len(svc.Spec.Ports)}
	want := []any{"mnist-headless", "None", true, map[string]string{names.NameLabel: "mnist"}, 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("service (-want +got):\n%s", diff)
	}
}

func TestConfigMap(t *testing.T) {
	tj := tjtest.NewTJ("ml", "mnist").GPUs(0).Epochs(10).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Hyperparameters.LearningRate = ptr.To(0.00005)
		tj.Spec.Hyperparameters.AdditionalParams = map[string]string{"dropout": "0.1"}
	}).Obj()
	cm, err := builders.ConfigMap(tj, builders.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got builders.RunConfig
	if err := json.Unmarshal([]byte(cm.Data[names.ConfigFileName]), &got); err != nil {
		t.Fatal(err)
	}
	want := builders.RunConfig{
		TrainingJob: "mnist", Namespace: "ml", Model: "cnn", Dataset: "mnist", Framework: mlv1.FrameworkPyTorch,
		NumWorkers: 2, GPUsPerWorker: 0, Hyperparameters: tj.Spec.Hyperparameters, MetricsPort: 8080,
		Networking: builders.NetworkConfig{Backend: mlv1.BackendGloo, MasterAddr: "mnist-worker-0.mnist-headless.ml.svc", MasterPort: 29500},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config.json (-want +got):\n%s", diff)
	}
	if cm.Name != "mnist-config" || cm.Labels[names.NameLabel] != "mnist" {
		t.Errorf("configmap meta = %+v", cm.ObjectMeta)
	}
}

// TestResumeFrom: workers resume from the newest checkpoint the operator has seen, else resumeFrom; the
// value lives in the ConfigMap and reaches the trainer and the agent through a key reference, so the Job's
// template (and its hash) never changes with it.
func TestResumeFrom(t *testing.T) {
	pvc := func(resumeFrom, latest string) *mlv1.TrainingJob {
		return tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
			tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), ResumeFrom: resumeFrom,
				Storage: &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "ckpt"}}
			if latest != "" {
				tj.Status.Checkpoint = &mlv1.CheckpointStatus{Latest: latest}
			}
		}).Obj()
	}
	retried := pvc("/checkpoints/ml/old/checkpoint-epoch-4", "/checkpoints/ml/a/checkpoint-epoch-6")
	retried.Status.Attempt = 1
	cases := []struct {
		name string
		tj   *mlv1.TrainingJob
		want string
		// settled: the ConfigMap is built with RESUME_FROM settled for the first attempt (nothing older can
		// report); for a later attempt the key is left to the CheckpointController.
		settled bool
	}{
		{name: "checkpoints disabled", tj: tjtest.NewTJ("ml", "a").Obj(), want: "", settled: false},
		{name: "nothing yet: start fresh", tj: pvc("", ""), want: "", settled: true},
		{
			name:    "resumeFrom until a checkpoint is seen",
			tj:      pvc("/checkpoints/ml/old/checkpoint-epoch-4", ""),
			want:    "/checkpoints/ml/old/checkpoint-epoch-4",
			settled: true,
		},
		{
			name:    "pvc:// is where workers see it",
			tj:      pvc("pvc://ml/old/checkpoint-epoch-4", ""),
			want:    "/checkpoints/ml/old/checkpoint-epoch-4",
			settled: true,
		},
		{
			name:    "the newest seen wins",
			tj:      pvc("/checkpoints/ml/old/checkpoint-epoch-4", "/checkpoints/ml/a/checkpoint-epoch-6"),
			want:    "/checkpoints/ml/a/checkpoint-epoch-6",
			settled: true,
		},
		{name: "a later attempt waits for the checkpoint controller", tj: retried, want: "/checkpoints/ml/a/checkpoint-epoch-6", settled: false},
	}
	ref := &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "a-config"}, Key: "RESUME_FROM", Optional: ptr.To(true)}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cm, err := builders.ConfigMap(tc.tj, builders.Options{})
			if err != nil {
				t.Fatal(err)
			}
			// Past the first attempt, the value is the CheckpointController's to write into the ConfigMap.
			wantCM := map[string]string{}
			if tc.settled {
				wantCM = map[string]string{names.ResumeFromKey: tc.want, names.ResumeAttemptAnnotation: "0"}
			}
			gotCM := map[string]string{}
			if v, ok := cm.Data[names.ResumeFromKey]; ok {
				gotCM[names.ResumeFromKey] = v
			}
			if v, ok := cm.Annotations[names.ResumeAttemptAnnotation]; ok {
				gotCM[names.ResumeAttemptAnnotation] = v
			}
			if diff := cmp.Diff([]any{tc.want, wantCM}, []any{builders.ResumeFrom(tc.tj), gotCM}); diff != "" {
				t.Errorf("ResumeFrom, built ConfigMap's RESUME_FROM (-want +got):\n%s", diff)
			}
			if !tc.tj.CheckpointEnabled() {
				return
			}
			p := builders.Job(tc.tj, opts).Spec.Template.Spec
			agent := slices.IndexFunc(p.InitContainers, func(c corev1.Container) bool { return c.Name == names.AgentContainerName })
			for _, c := range []corev1.Container{p.Containers[0], p.InitContainers[agent]} {
				i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "RESUME_FROM" })
				if i < 0 || !cmp.Equal(ref, c.Env[i].ValueFrom) || c.Env[i].Value != "" {
					t.Errorf("%s: RESUME_FROM is not the ConfigMap's key: %+v", c.Name, c.Env)
				}
			}
		})
	}
	if a, b := builders.Job(pvc("", ""), opts), builders.Job(pvc("", "/checkpoints/ml/a/checkpoint-epoch-6"), opts); !cmp.Equal(a, b) {
		t.Errorf("the Job changed with status.checkpoint:\n%s", cmp.Diff(a, b))
	}
}

func TestJobSuspendAndSpecHash(t *testing.T) {
	base := tjtest.NewTJ("ml", "a")
	queued := tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) { tj.Spec.Scheduling = &mlv1.SchedulingSpec{QueueName: "q"} }).Obj()
	plain, suspended := builders.Job(base.Obj(), opts), builders.Job(tjtest.NewTJ("ml", "a").Suspend(true).Obj(), opts)
	more := builders.Job(tjtest.NewTJ("ml", "a").Workers(3).Obj(), opts)
	hash := func(j *batchv1.Job) string { return j.Annotations[names.SpecHashAnnotation] }
	got := []any{*plain.Spec.Suspend, *suspended.Spec.Suspend, *builders.Job(queued, opts).Spec.Suspend,
		hash(plain) == hash(suspended), hash(plain) == hash(more), hash(plain) == builders.SpecHash(plain), len(hash(plain))}
	want := []any{false, true, true, true, false, true, 16}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("suspend plain/suspended/queued, hash ignores suspend, hash sees workers, hash reproducible, length (-want +got):\n%s",
			diff)
	}
}

// TestGPUResourceName: the spec's resource name wins over the operator's default, which wins over
// nvidia.com/gpu.
func TestGPUResourceName(t *testing.T) {
	mig := builders.Options{GPUResource: "nvidia.com/mig-1g.10gb"}
	named := tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) { tj.Spec.GPUResourceName = "amd.com/gpu" }).Obj()
	got := []corev1.ResourceName{
		builders.GPUResourceName(tjtest.NewTJ("ml", "a").Obj(), builders.Options{}),
		builders.GPUResourceName(tjtest.NewTJ("ml", "a").Obj(), mig),
		builders.GPUResourceName(named, mig),
	}
	want := []corev1.ResourceName{"nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "amd.com/gpu"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GPUResourceName (-want +got):\n%s", diff)
	}
	l := builders.Resources(tjtest.NewTJ("ml", "a").GPUs(1).Obj(), mig).Limits
	if l.Name("nvidia.com/mig-1g.10gb", resource.DecimalSI).Value() != 1 || len(l) != 1 {
		t.Errorf("limits with the operator's MIG default = %v", l)
	}
}
