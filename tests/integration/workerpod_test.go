package integration

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/deploy"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

func volume(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
}

// TestAdmissionRefusesWorkerPodOverrides: admission refuses, naming the field, a workerPod that would break
// the operator's wiring; the operator's check of the cluster's worker defaults refuses the same settings
// (the two enforce one contract), and accepts what admission accepts.
func TestAdmissionRefusesWorkerPodOverrides(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name  string
		wp    mlv1.WorkerPodSpec
		field string // "": accepted
	}{
		{
			name: "a dataset claim at /data",
			wp: mlv1.WorkerPodSpec{Volumes: []corev1.Volume{{Name: "coco", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "coco"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "coco", MountPath: "/data"}}},
			field: "",
		},
		{
			name: "a mount beside the operator's",
			wp: mlv1.WorkerPodSpec{Volumes: []corev1.Volume{volume("v")},
				VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/etc/trainingjob-extra"}}},
			field: "",
		},
		{
			name:  "the operator's label",
			wp:    mlv1.WorkerPodSpec{Labels: map[string]string{"ml.example.com/trainingjob-name": "other"}},
			field: "spec.workerPod.labels",
		},
		{
			name:  "the Job controller's label",
			wp:    mlv1.WorkerPodSpec{Labels: map[string]string{"batch.kubernetes.io/job-completion-index": "3"}},
			field: "spec.workerPod.labels",
		},
		{
			name:  "the queue's label",
			wp:    mlv1.WorkerPodSpec{Labels: map[string]string{"kueue.x-k8s.io/queue-name": "other"}},
			field: "spec.workerPod.labels",
		},
		{
			name:  "the operator's annotation",
			wp:    mlv1.WorkerPodSpec{Annotations: map[string]string{"ml.example.com/spec-hash": "x"}},
			field: "spec.workerPod.annotations",
		},
		{
			name:  "the config volume's name",
			wp:    mlv1.WorkerPodSpec{Volumes: []corev1.Volume{volume("trainingjob-config")}},
			field: "spec.workerPod.volumes",
		},
		{
			name:  "the checkpoint volume's name",
			wp:    mlv1.WorkerPodSpec{Volumes: []corev1.Volume{volume("checkpoints")}},
			field: "spec.workerPod.volumes",
		},
		{name: "the shm volume's name", wp: mlv1.WorkerPodSpec{Volumes: []corev1.Volume{volume("dshm")}}, field: "spec.workerPod.volumes"},
		{
			name: "a mount at /checkpoints",
			wp: mlv1.WorkerPodSpec{Volumes: []corev1.Volume{volume("v")},
				VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/checkpoints"}}},
			field: "spec.workerPod.volumeMounts",
		},
		{
			name: "a mount above /etc/trainingjob",
			wp: mlv1.WorkerPodSpec{Volumes: []corev1.Volume{volume("v")},
				VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/etc"}}},
			field: "spec.workerPod.volumeMounts",
		},
		{
			name: "a mount at /",
			wp: mlv1.WorkerPodSpec{Volumes: []corev1.Volume{volume("v")},
				VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/"}}},
			field: "spec.workerPod.volumeMounts",
		},
		{
			name: "a mount below /dev/shm",
			wp: mlv1.WorkerPodSpec{Volumes: []corev1.Volume{volume("v")},
				VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/dev/shm/cache"}}},
			field: "spec.workerPod.volumeMounts",
		},
		{
			name:  "a mount of no volume",
			wp:    mlv1.WorkerPodSpec{VolumeMounts: []corev1.VolumeMount{{Name: "gone", MountPath: "/data"}}},
			field: "spec.workerPod.volumeMounts",
		},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ(ns, fmt.Sprintf("wp-%d", i)).With(func(tj *mlv1.TrainingJob) { tj.Spec.WorkerPod = tc.wp.DeepCopy() }).Obj()
			err := env.Client.Create(context.Background(), tj)
			switch {
			case tc.field == "" && err != nil:
				t.Errorf("Create() = %v, want it accepted", err)
			case tc.field != "" && !apierrors.IsInvalid(err):
				t.Errorf("Create() = %v, want Invalid", err)
			case tc.field != "" && !slices.Contains(causeFields(err), tc.field) && !strings.Contains(err.Error(), tc.field):
				t.Errorf("rejection names fields %q, want %q; error: %v", causeFields(err), tc.field, err)
			}
			d := builders.WorkerDefaults{Labels: tc.wp.Labels, Annotations: tc.wp.Annotations, Volumes: tc.wp.Volumes,
				VolumeMounts: tc.wp.VolumeMounts}
			if err := d.Check(); (err == nil) != (tc.field == "") {
				t.Errorf("the same as worker defaults: Check() = %v, want refused %t", err, tc.field != "")
			}
		})
	}
	others := []struct {
		name  string
		tj    change
		field string
	}{
		{
			name: "a hostPath volume",
			tj: func(tj *mlv1.TrainingJob) {
				tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{Volumes: []corev1.Volume{{Name: "host",
					VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}}
			},
			field: "spec.workerPod.volumes",
		},
		{
			name:  "a ServiceAccount name with capitals",
			tj:    func(tj *mlv1.TrainingJob) { tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{ServiceAccountName: "Trainer"} },
			field: "spec.workerPod.serviceAccountName",
		},
		{name: "negative shared memory", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.Resources = &mlv1.Resources{SharedMemory: ptrQty("-1Gi")}
		}, field: "spec.resources.sharedMemory"},
		{
			name:  "a sidecar named trainer",
			tj:    sidecars(mlv1.WorkerContainer{Name: "trainer", Image: "x"}),
			field: "spec.workerPod.sidecars[0].name",
		},
		{name: "an init container named checkpoint-agent", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{InitContainers: []mlv1.WorkerContainer{{Name: "checkpoint-agent", Image: "x"}}}
		}, field: "spec.workerPod.initContainers[0].name"},
		{
			name: "an init container and a sidecar of one name",
			tj: func(tj *mlv1.TrainingJob) {
				tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{InitContainers: []mlv1.WorkerContainer{{Name: "ship", Image: "x"}},
					Sidecars: []mlv1.WorkerContainer{{Name: "ship", Image: "x"}}}
			},
			field: "spec.workerPod.sidecars",
		},
		{
			name:  "a sidecar on the metrics port",
			tj:    sidecars(mlv1.WorkerContainer{Name: "exporter", Image: "x", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}),
			field: "spec.workerPod.sidecars",
		},
		{
			name:  "a sidecar on the checkpoint agent's port",
			tj:    sidecars(mlv1.WorkerContainer{Name: "exporter", Image: "x", Ports: []corev1.ContainerPort{{ContainerPort: 8082}}}),
			field: "spec.workerPod.sidecars",
		},
		{name: "a sidecar without an image", tj: sidecars(mlv1.WorkerContainer{Name: "ship"}), field: "spec.workerPod.sidecars[0].image"},
		{
			name:  "a sidecar mounting no volume of the job",
			tj:    sidecars(mlv1.WorkerContainer{Name: "ship", Image: "x", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/c"}}}),
			field: "spec.workerPod.initContainers and spec.workerPod.sidecars may mount only volumes",
		},
		// Refused by the CRD itself (schema validation runs before any admission policy: the message is the
		// CRD rule's), so a cluster without the optional policy refuses them too.
		{
			name:  "a sidecar named fetch-inputs",
			tj:    sidecars(mlv1.WorkerContainer{Name: "fetch-inputs", Image: "x"}),
			field: "spec.workerPod.sidecars[0].name",
		},
		{name: "an init container named fetch-inputs", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{InitContainers: []mlv1.WorkerContainer{{Name: "fetch-inputs", Image: "x"}}}
		}, field: "spec.workerPod.initContainers[0].name"},
		{
			name: "a sidecar mounting the checkpoints",
			tj: sidecars(mlv1.WorkerContainer{Name: "ship", Image: "x",
				VolumeMounts: []corev1.VolumeMount{{Name: "checkpoints", MountPath: "/c"}}}),
			field: "spec.workerPod.sidecars[0].volumeMounts",
		},
		{
			name: "an init container mounting the input cache",
			tj: func(tj *mlv1.TrainingJob) {
				tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{InitContainers: []mlv1.WorkerContainer{{Name: "peek", Image: "x",
					VolumeMounts: []corev1.VolumeMount{{Name: "inputs-cache", MountPath: "/all"}}}}}
			},
			field: "spec.workerPod.initContainers[0].volumeMounts",
		},
		{name: "the trainer mounting the inputs' credentials", tj: func(tj *mlv1.TrainingJob) {
			tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{VolumeMounts: []corev1.VolumeMount{{Name: "inputs-credentials", MountPath: "/creds"}}}
		}, field: "spec.workerPod.volumeMounts"},
	}
	for i, tc := range others {
		t.Run(tc.name, func(t *testing.T) {
			err := env.Client.Create(context.Background(), tjtest.NewTJ(ns, fmt.Sprintf("wp-other-%d", i)).With(tc.tj).Obj())
			if !apierrors.IsInvalid(err) || !slices.Contains(causeFields(err), tc.field) && !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Create() = %v (fields %q), want Invalid naming %s", err, causeFields(err), tc.field)
			}
			if strings.Contains(tc.name, "fetch-inputs") || strings.Contains(tc.name, "mounting the") {
				if strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
					t.Errorf("refused by the admission policy, want the CRD itself: %v", err)
				}
			}
		})
	}
}

func ptrQty(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

func sidecars(c ...mlv1.WorkerContainer) change {
	return func(tj *mlv1.TrainingJob) { tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{Sidecars: c} }
}

// TestAdmissionAcceptsWorkerContainers: an init container and a sidecar mounting the job's volume, the
// sidecar serving a port of its own, are admitted.
func TestAdmissionAcceptsWorkerContainers(t *testing.T) {
	tj := tjtest.NewTJ(newNamespace(t), "containers").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{
			Volumes: []corev1.Volume{volume("cache")},
			InitContainers: []mlv1.WorkerContainer{{Name: "warm", Image: "busybox:1.36",
				VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}}}},
			Sidecars: []mlv1.WorkerContainer{{Name: "ship", Image: "fluent-bit:3", Ports: []corev1.ContainerPort{{ContainerPort: 2020}},
				VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}}}},
		}
	}).Obj()
	if err := env.Client.Create(context.Background(), tj); err != nil {
		t.Errorf("Create() = %v, want it admitted", err)
	}
}

// TestReservedVolumesMatchAdmission: the volume names the CRD's CEL rule refuses and the mount paths the
// ValidatingAdmissionPolicy refuses are the builders' (which the worker defaults' check uses).
func TestReservedVolumesMatchAdmission(t *testing.T) {
	quoted := regexp.MustCompile(`'(/[^']*|[a-z][-a-z]*)'`)
	names := func(rule string) []string {
		var out []string
		for _, m := range quoted.FindAllStringSubmatch(rule, -1) {
			if m[1] != "/" {
				out = append(out, m[1])
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	var volumesRule string
	spec := loadCRD(t).Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	for _, r := range spec.Properties["workerPod"].Properties["volumes"].XValidations {
		if strings.Contains(r.Rule, "v.name in") {
			volumesRule = r.Rule
		}
	}
	policy, err := deploy.Policies()
	if err != nil {
		t.Fatal(err)
	}
	var mountsRule string
	for _, p := range policy {
		validations, _, _ := unstructured.NestedSlice(p.Object, "spec", "validations")
		for _, v := range validations {
			if e := v.(map[string]any)["expression"].(string); strings.Contains(e, "/checkpoints") {
				mountsRule = e
			}
		}
	}
	for _, c := range []struct {
		what, rule string
		want       []string
	}{
		{what: "the CRD's workerPod.volumes rule", rule: volumesRule, want: builders.ReservedVolumeNames},
		{what: "the policy's volumeMounts rule", rule: mountsRule, want: builders.ReservedMountPaths},
	} {
		if diff := cmp.Diff(slices.Sorted(slices.Values(c.want)), names(c.rule)); diff != "" {
			t.Errorf("%s vs the builders (-want +got):\n%s", c.what, diff)
		}
	}
}
