package builders_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

func qty(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

func memoryLimit(s string) func(*mlv1.TrainingJob) {
	return func(tj *mlv1.TrainingJob) {
		tj.Spec.Resources = &mlv1.Resources{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(s)}}
	}
}

// TestSharedMemory: every worker gets an in-memory /dev/shm sized by the rule: the job's own size ("0":
// none), else half its memory limit, else the cluster's default ("0": none), else 8Gi.
func TestSharedMemory(t *testing.T) {
	cases := []struct {
		name     string
		tj       func(*mlv1.TrainingJob)
		defaults *resource.Quantity
		want     string // "": no volume
	}{
		{name: "no memory limit", tj: func(*mlv1.TrainingJob) {}, defaults: nil, want: "8Gi"},
		{name: "half the memory limit", tj: memoryLimit("64Gi"), defaults: nil, want: "32Gi"},
		{name: "half an odd limit", tj: memoryLimit("3Gi"), defaults: nil, want: "1536Mi"},
		{
			name:     "the job's size",
			tj:       func(tj *mlv1.TrainingJob) { memoryLimit("64Gi")(tj); tj.Spec.Resources.SharedMemory = qty("2Gi") },
			defaults: nil,
			want:     "2Gi",
		},
		{
			name:     "turned off by the job",
			tj:       func(tj *mlv1.TrainingJob) { tj.Spec.Resources = &mlv1.Resources{SharedMemory: qty("0")} },
			defaults: nil,
			want:     "",
		},
		{name: "the cluster's default without a limit", tj: func(*mlv1.TrainingJob) {}, defaults: qty("1Gi"), want: "1Gi"},
		{name: "the cluster's default beneath a limit", tj: memoryLimit("4Gi"), defaults: qty("1Gi"), want: "2Gi"},
		{name: "turned off by the cluster", tj: func(*mlv1.TrainingJob) {}, defaults: qty("0"), want: ""},
		{
			name:     "the job's size over the cluster's off",
			tj:       func(tj *mlv1.TrainingJob) { tj.Spec.Resources = &mlv1.Resources{SharedMemory: qty("512Mi")} },
			defaults: qty("0"),
			want:     "512Mi",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := builders.Options{WorkerDefaults: builders.WorkerDefaults{SharedMemory: tc.defaults}}
			spec := builders.Job(tjtest.NewTJ("ml", "a").With(tc.tj).Obj(), opts).Spec.Template.Spec
			var got string
			if i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == builders.SharedMemoryVolumeName }); i >= 0 {
				v := spec.Volumes[i].EmptyDir
				if v == nil || v.Medium != corev1.StorageMediumMemory {
					t.Fatalf("volume %+v, want an in-memory emptyDir", spec.Volumes[i])
				}
				got = v.SizeLimit.String()
				if !slices.Contains(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: builders.SharedMemoryVolumeName, MountPath: "/dev/shm"}) {
					t.Errorf("trainer mounts %+v, want dshm at /dev/shm", spec.Containers[0].VolumeMounts)
				}
			}
			if got != tc.want {
				t.Errorf("/dev/shm size %q, want %q", got, tc.want)
			}
		})
	}
}

// datasetJob returns the COCO job of the Kubeflow guides as a TrainingJob: its dataset claim at /data, its W&B
// key from a Secret, the Istio annotation, its own ServiceAccount and a private registry.
func datasetJob(tj *mlv1.TrainingJob) {
	tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{
		Labels:             map[string]string{"team": "vision", "cost-center": "cv-42"},
		Annotations:        map[string]string{"sidecar.istio.io/inject": "false"},
		ServiceAccountName: "trainer",
		ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "registry"}},
		Volumes: []corev1.Volume{{Name: "coco", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "coco-2017", ReadOnly: true}}}},
		VolumeMounts: []corev1.VolumeMount{{Name: "coco", MountPath: "/data", ReadOnly: true}},
		EnvFrom: []corev1.EnvFromSource{
			{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "wandb"}}},
		},
		RuntimeClassName: ptr.To("nvidia"),
	}
	tj.Spec.Scheduling = &mlv1.SchedulingSpec{NodeSelector: map[string]string{"pool": "a100"}, Priority: "team-high",
		Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}}
	tj.Spec.Env = []corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "WARN"}}
}

// platform is a platform team's worker defaults, some of which the dataset job sets itself.
var platform = builders.WorkerDefaults{
	Labels:       map[string]string{"cost-center": "ml-platform", "billing": "gpu"},
	Annotations:  map[string]string{"sidecar.istio.io/inject": "true", "prometheus.io/scrape": "false"},
	NodeSelector: map[string]string{"pool": "shared", "gpu": "true"},
	Tolerations: []corev1.Toleration{
		{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "spot", Operator: corev1.TolerationOpExists},
	},
	PriorityClassName: "batch-low",
	Env: []corev1.EnvVar{
		{Name: "NCCL_DEBUG", Value: "INFO"}, {Name: "NCCL_SOCKET_IFNAME", Value: "eth0"}, {Name: "NCCL_IB_DISABLE", Value: "0"},
	},
	ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}, {Name: "mirror"}},
	Volumes: []corev1.Volume{
		{Name: "coco", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "certs", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "ca"}},
		}},
	},
	VolumeMounts: []corev1.VolumeMount{{Name: "coco", MountPath: "/data"}, {Name: "certs", MountPath: "/etc/ssl/team"}},
}

// TestWorkerPodOverlay: the job's workerPod reaches every worker pod, and the cluster's defaults fill only
// what neither the operator nor the job set.
func TestWorkerPodOverlay(t *testing.T) {
	type pod struct {
		Labels, Annotations, NodeSelector map[string]string
		SA, Priority                      string
		RuntimeClass                      *string
		Tolerations                       int
		PullSecrets, Volumes, Mounts, Env []string
		EnvFrom                           int
	}
	read := func(tmpl corev1.PodTemplateSpec) pod {
		s, c := tmpl.Spec, tmpl.Spec.Containers[0]
		p := pod{Labels: tmpl.Labels, Annotations: tmpl.Annotations, NodeSelector: s.NodeSelector,
			SA: s.ServiceAccountName, Priority: s.PriorityClassName,
			RuntimeClass: s.RuntimeClassName, Tolerations: len(s.Tolerations), EnvFrom: len(c.EnvFrom)}
		for _, x := range s.ImagePullSecrets {
			p.PullSecrets = append(p.PullSecrets, x.Name)
		}
		for _, v := range s.Volumes {
			p.Volumes = append(p.Volumes, v.Name)
		}
		for _, m := range c.VolumeMounts {
			p.Mounts = append(p.Mounts, m.Name+":"+m.MountPath)
		}
		for _, e := range c.Env {
			if strings.HasPrefix(e.Name, "NCCL_") {
				p.Env = append(p.Env, e.Name+"="+e.Value)
			}
		}
		return p
	}
	opLabels := func(extra map[string]string) map[string]string {
		l := map[string]string{names.NameLabel: "a", names.ManagedByLabel: "trainingjob-operator", names.AttemptLabel: "0"}
		for k, v := range extra {
			l[k] = v
		}
		return l
	}
	base := []string{"trainingjob-config:/etc/trainingjob", "trainingjob-bin:/var/run/trainingjob", "dshm:/dev/shm"}
	cases := []struct {
		name     string
		tj       func(*mlv1.TrainingJob)
		defaults builders.WorkerDefaults
		want     pod
	}{{
		name: "the job's own",
		tj:   datasetJob,
		want: pod{
			Labels:       opLabels(map[string]string{"team": "vision", "cost-center": "cv-42"}),
			Annotations:  map[string]string{"sidecar.istio.io/inject": "false"},
			NodeSelector: map[string]string{"pool": "a100"},
			SA:           "trainer",
			Priority:     "team-high",
			RuntimeClass: ptr.To("nvidia"),
			Tolerations:  1,
			PullSecrets:  []string{"registry"},
			Volumes:      []string{"trainingjob-config", "trainingjob-bin", "dshm", "coco"},
			Mounts:       append(base, "coco:/data"),
			Env:          []string{"NCCL_IB_DISABLE=1", "NCCL_DEBUG=WARN"},
			EnvFrom:      1,
		},
	}, {
		name:     "the cluster's defaults beneath the job's",
		tj:       datasetJob,
		defaults: platform,
		want: pod{
			Labels:       opLabels(map[string]string{"team": "vision", "cost-center": "cv-42", "billing": "gpu"}),
			Annotations:  map[string]string{"sidecar.istio.io/inject": "false", "prometheus.io/scrape": "false"},
			NodeSelector: map[string]string{"pool": "a100", "gpu": "true"},
			SA:           "trainer",
			Priority:     "team-high",
			RuntimeClass: ptr.To("nvidia"),
			Tolerations:  2,
			PullSecrets:  []string{"registry", "mirror"},
			Volumes:      []string{"trainingjob-config", "trainingjob-bin", "dshm", "coco", "certs"},
			Mounts:       append(base, "coco:/data", "certs:/etc/ssl/team"),
			Env:          []string{"NCCL_IB_DISABLE=1", "NCCL_DEBUG=WARN", "NCCL_SOCKET_IFNAME=eth0"},
			EnvFrom:      1,
		},
	}, {
		name:     "the cluster's defaults on the simple YAML",
		tj:       func(*mlv1.TrainingJob) {},
		defaults: platform,
		want: pod{
			Labels:       opLabels(map[string]string{"cost-center": "ml-platform", "billing": "gpu"}),
			Annotations:  map[string]string{"sidecar.istio.io/inject": "true", "prometheus.io/scrape": "false"},
			NodeSelector: map[string]string{"pool": "shared", "gpu": "true"},
			Priority:     "batch-low",
			Tolerations:  2,
			PullSecrets:  []string{"registry", "mirror"},
			Volumes:      []string{"trainingjob-config", "trainingjob-bin", "dshm", "coco", "certs"},
			Mounts:       append(base, "coco:/data", "certs:/etc/ssl/team"),
			Env:          []string{"NCCL_IB_DISABLE=1", "NCCL_DEBUG=INFO", "NCCL_SOCKET_IFNAME=eth0"},
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "a").With(tc.tj).Obj()
			got := read(builders.Job(tj, builders.Options{WorkerDefaults: tc.defaults}).Spec.Template)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("worker pod (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAppliedDefaults: the JobController's event names what of the cluster's defaults a job got.
func TestAppliedDefaults(t *testing.T) {
	opts := builders.Options{WorkerDefaults: platform}
	got := builders.AppliedDefaults(tjtest.NewTJ("ml", "a").With(datasetJob).Obj(), opts)
	want := []string{"labels billing", "annotations prometheus.io/scrape", "nodeSelector gpu", "env NCCL_SOCKET_IFNAME", "volumes certs",
		"tolerations 1", "imagePullSecrets 1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("applied defaults (-want +got):\n%s", diff)
	}
	if got := builders.AppliedDefaults(tjtest.NewTJ("ml", "a").Obj(), builders.Options{}); len(got) != 0 {
		t.Errorf("no defaults: %v", got)
	}
	shm := builders.Options{WorkerDefaults: builders.WorkerDefaults{SharedMemory: qty("1Gi")}}
	if diff := cmp.Diff([]string{"sharedMemory 1Gi"}, builders.AppliedDefaults(tjtest.NewTJ("ml", "a").Obj(), shm)); diff != "" {
		t.Errorf("shm default (-want +got):\n%s", diff)
	}
}

// TestWorkerDefaultsCheck: defaults that would break the operator's wiring are refused when the operator
// starts, with what is wrong, as admission refuses the same in a job.
func TestWorkerDefaultsCheck(t *testing.T) {
	// mountAt is defaults with a volume v mounted at path.
	mountAt := func(path string) builders.WorkerDefaults {
		return builders.WorkerDefaults{Volumes: []corev1.Volume{{Name: "v"}}, VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: path}}}
	}
	cases := []struct {
		name string
		d    builders.WorkerDefaults
		want string // "": accepted
	}{
		{name: "the platform's", d: platform, want: ""},
		{
			name: "the operator's label",
			d:    builders.WorkerDefaults{Labels: map[string]string{names.NameLabel: "x"}},
			want: "labels: ml.example.com/trainingjob-name",
		},
		{
			name: "the Job controller's label",
			d:    builders.WorkerDefaults{Labels: map[string]string{"batch.kubernetes.io/job-name": "x"}},
			want: "labels: batch.kubernetes.io/job-name",
		},
		{
			name: "the queue's label",
			d:    builders.WorkerDefaults{Labels: map[string]string{"kueue.x-k8s.io/queue-name": "q"}},
			want: "labels: kueue.x-k8s.io/queue-name",
		},
		{
			name: "the operator's annotation",
			d:    builders.WorkerDefaults{Annotations: map[string]string{"ml.example.com/spec-hash": "x"}},
			want: "annotations: ml.example.com/spec-hash",
		},
		{
			name: "a reserved variable",
			d:    builders.WorkerDefaults{Env: []corev1.EnvVar{{Name: "MASTER_ADDR", Value: "x"}}},
			want: "env: MASTER_ADDR",
		},
		{
			name: "the config volume's name",
			d:    builders.WorkerDefaults{Volumes: []corev1.Volume{{Name: "trainingjob-config"}}},
			want: "volumes: trainingjob-config",
		},
		{name: "the shm volume's name", d: builders.WorkerDefaults{Volumes: []corev1.Volume{{Name: "dshm"}}}, want: "volumes: dshm"},
		{name: "a mount at /checkpoints", d: mountAt("/checkpoints"), want: "volumeMounts: /checkpoints"},
		{name: "a mount above /etc/trainingjob", d: mountAt("/etc"), want: "volumeMounts: /etc is"},
		{name: "a mount below /dev/shm", d: mountAt("/dev/shm/x"), want: "volumeMounts: /dev/shm/x"},
		{name: "a mount beside /etc/trainingjob", d: mountAt("/etc/trainingjob-extra"), want: ""},
		{
			name: "a mount of no volume",
			d:    builders.WorkerDefaults{VolumeMounts: []corev1.VolumeMount{{Name: "gone", MountPath: "/x"}}},
			want: "volumeMounts: gone is not a volume",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.d.Check()
			if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check() = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestStorageIdentityIsThePods: with no secretRef, object storage is reached with the pod's identity
// (its ServiceAccount's web identity or workload identity, the node's metadata): no container of the pod
// gets a static key, a credentials file or a Secret, with or without a ServiceAccount named.
func TestStorageIdentityIsThePods(t *testing.T) {
	storages := []mlv1.CheckpointStorage{{Type: mlv1.StorageS3, S3Bucket: "b", Region: "eu-west-1"}, {Type: mlv1.StorageGCS, GCSBucket: "b"}}
	for _, st := range storages {
		for _, sa := range []string{"", "trainer"} {
			tj := tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Storage: st.DeepCopy()}
				if sa != "" {
					tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{ServiceAccountName: sa}
				}
			}).Obj()
			spec := builders.Job(tj, builders.Options{}).Spec.Template.Spec
			if spec.ServiceAccountName != sa {
				t.Errorf("%s: serviceAccountName %q, want %q", st.Type, spec.ServiceAccountName, sa)
			}
			for _, c := range append(spec.InitContainers, spec.Containers...) {
				for _, e := range c.Env {
					static := []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS"}
					if slices.Contains(static, e.Name) || e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
						t.Errorf("%s (sa %q): container %s gets %s", st.Type, sa, c.Name, e.Name)
					}
				}
				if len(c.EnvFrom) > 0 {
					t.Errorf("%s (sa %q): container %s gets envFrom %+v", st.Type, sa, c.Name, c.EnvFrom)
				}
			}
			for _, v := range spec.Volumes {
				if v.Secret != nil {
					t.Errorf("%s (sa %q): Secret volume %s", st.Type, sa, v.Name)
				}
			}
		}
	}
}

// TestWorkerContainers: workerPod's init containers run after the operator's (the checkpoint agent first,
// a native sidecar), then its sidecars as native sidecars; all hardened like the operator's containers.
func TestWorkerContainers(t *testing.T) {
	tj := tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true),
			Storage: &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "ckpt"}}
		tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{
			Volumes: []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			InitContainers: []mlv1.WorkerContainer{{
				Name: "warm-cache", Image: "busybox:1.36", Command: []string{"sh", "-c", "cp -r /src /cache"},
				VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}},
			}},
			Sidecars: []mlv1.WorkerContainer{{
				Name: "log-shipper", Image: "fluent-bit:3", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 2020}},
				Resources: &mlv1.Resources{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}},
			}},
		}
	}).Obj()
	spec := builders.Job(tj, builders.Options{}).Spec.Template.Spec
	type ctr struct {
		Name    string
		Sidecar bool
		Memory  string
	}
	var got []ctr
	for _, c := range spec.InitContainers {
		got = append(got, ctr{
			Name:    c.Name,
			Sidecar: c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways,
			Memory:  c.Resources.Limits.Memory().String(),
		})
		if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 {
			t.Errorf("container %s: security context %+v, want no privilege escalation and every capability dropped", c.Name, sc)
		}
	}
	want := []ctr{
		{Name: names.AgentContainerName, Sidecar: true, Memory: "0"},
		{Name: builders.SupervisorContainerName, Sidecar: false, Memory: "0"},
		{Name: "warm-cache", Sidecar: false, Memory: "0"},
		{Name: "log-shipper", Sidecar: true, Memory: "128Mi"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("init containers (-want +got):\n%s", diff)
	}
	if tj.Spec.WorkerPod.InitContainers[0].Command[0] != "sh" {
		t.Error("the builder changed the TrainingJob")
	}
}

// TestCheckWorkerPod: the builder's own check, behind admission, refuses (naming the field) a container
// that takes the operator's name and a mount of anything but the job's own volumes.
func TestCheckWorkerPod(t *testing.T) {
	vol := corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	for _, tc := range []struct {
		name    string
		wp      *mlv1.WorkerPodSpec
		wantErr string // "": accepted
	}{
		{name: "no workerPod"},
		{name: "a sidecar mounting the job's volume", wp: &mlv1.WorkerPodSpec{Volumes: []corev1.Volume{vol},
			Sidecars: []mlv1.WorkerContainer{{Name: "ship", Image: "x", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/d"}}}}}},
		{name: "a sidecar named fetch-inputs", wp: &mlv1.WorkerPodSpec{Sidecars: []mlv1.WorkerContainer{{Name: "fetch-inputs", Image: "x"}}},
			wantErr: "spec.workerPod.sidecars: the container name fetch-inputs is the operator's"},
		{name: "an init container named trainer", wp: &mlv1.WorkerPodSpec{InitContainers: []mlv1.WorkerContainer{{Name: "trainer", Image: "x"}}},
			wantErr: "spec.workerPod.initContainers: the container name trainer is the operator's"},
		{name: "an init container mounting the input cache", wp: &mlv1.WorkerPodSpec{
			InitContainers: []mlv1.WorkerContainer{{Name: "peek", Image: "x",
				VolumeMounts: []corev1.VolumeMount{{Name: builders.InputsCacheVolume, MountPath: "/all"}}}}},
			wantErr: "spec.workerPod.initContainers[peek].volumeMounts: inputs-cache is not a volume of spec.workerPod.volumes"},
		{name: "the trainer mounting the checkpoint credentials",
			wp:      &mlv1.WorkerPodSpec{VolumeMounts: []corev1.VolumeMount{{Name: "checkpoint-credentials", MountPath: "/c"}}},
			wantErr: "spec.workerPod.volumeMounts: checkpoint-credentials is not a volume of spec.workerPod.volumes"},
		{name: "the trainer mounting over /inputs",
			wp: &mlv1.WorkerPodSpec{Volumes: []corev1.Volume{vol},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/inputs/cache"}}},
			wantErr: "spec.workerPod.volumeMounts: /inputs/cache is at, above or below a path of the operator"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) { tj.Spec.WorkerPod = tc.wp }).Obj()
			err := builders.CheckWorkerPod(tj)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tc.wantErr, got); diff != "" {
				t.Errorf("CheckWorkerPod (-want +got):\n%s", diff)
			}
		})
	}
}
