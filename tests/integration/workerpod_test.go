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
		{"a dataset claim at /data", mlv1.WorkerPodSpec{Volumes: []corev1.Volume{{Name: "coco", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "coco"}}}}, VolumeMounts: []corev1.VolumeMount{{Name: "coco", MountPath: "/data"}}}, ""},
		{"a mount beside the operator's", mlv1.WorkerPodSpec{Volumes: []corev1.Volume{volume("v")}, VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/etc/trainingjob-extra"}}}, ""},
		{"the operator's label", mlv1.WorkerPodSpec{Labels: map[string]string{"ml.example.com/trainingjob-name": "other"}}, "spec.workerPod.labels"},
		{"the Job controller's label", mlv1.WorkerPodSpec{Labels: map[string]string{"batch.kubernetes.io/job-completion-index": "3"}}, "spec.workerPod.labels"},
		{"the queue's label", mlv1.WorkerPodSpec{Labels: map[string]string{"kueue.x-k8s.io/queue-name": "other"}}, "spec.workerPod.labels"},
		{"the operator's annotation", mlv1.WorkerPodSpec{Annotations: map[string]string{"ml.example.com/spec-hash": "x"}}, "spec.workerPod.annotations"},
		{"the config volume's name", mlv1.WorkerPodSpec{Volumes: []corev1.Volume{volume("trainingjob-config")}}, "spec.workerPod.volumes"},
		{"the checkpoint volume's name", mlv1.WorkerPodSpec{Volumes: []corev1.Volume{volume("checkpoints")}}, "spec.workerPod.volumes"},
		{"the shm volume's name", mlv1.WorkerPodSpec{Volumes: []corev1.Volume{volume("dshm")}}, "spec.workerPod.volumes"},
		{"a mount at /checkpoints", mlv1.WorkerPodSpec{Volumes: []corev1.Volume{volume("v")}, VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/checkpoints"}}}, "spec.workerPod.volumeMounts"},
		{"a mount above /etc/trainingjob", mlv1.WorkerPodSpec{Volumes: []corev1.Volume{volume("v")}, VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/etc"}}}, "spec.workerPod.volumeMounts"},
		{"a mount at /", mlv1.WorkerPodSpec{Volumes: []corev1.Volume{volume("v")}, VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/"}}}, "spec.workerPod.volumeMounts"},
		{"a mount below /dev/shm", mlv1.WorkerPodSpec{Volumes: []corev1.Volume{volume("v")}, VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/dev/shm/cache"}}}, "spec.workerPod.volumeMounts"},
		{"a mount of no volume", mlv1.WorkerPodSpec{VolumeMounts: []corev1.VolumeMount{{Name: "gone", MountPath: "/data"}}}, "spec.workerPod.volumeMounts"},
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
			d := builders.WorkerDefaults{Labels: tc.wp.Labels, Annotations: tc.wp.Annotations, Volumes: tc.wp.Volumes, VolumeMounts: tc.wp.VolumeMounts}
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
		{"a hostPath volume", func(tj *mlv1.TrainingJob) {
			tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{Volumes: []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}}
		}, "spec.workerPod.volumes"},
		{"a ServiceAccount name with capitals", func(tj *mlv1.TrainingJob) { tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{ServiceAccountName: "Trainer"} }, "spec.workerPod.serviceAccountName"},
		{"negative shared memory", func(tj *mlv1.TrainingJob) {
			tj.Spec.Resources = &mlv1.Resources{SharedMemory: ptrQty("-1Gi")}
		}, "spec.resources.sharedMemory"},
		{"a sidecar named trainer", sidecars(mlv1.WorkerContainer{Name: "trainer", Image: "x"}), "spec.workerPod.sidecars[0].name"},
		{"an init container named checkpoint-agent", func(tj *mlv1.TrainingJob) {
			tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{InitContainers: []mlv1.WorkerContainer{{Name: "checkpoint-agent", Image: "x"}}}
		}, "spec.workerPod.initContainers[0].name"},
		{"an init container and a sidecar of one name", func(tj *mlv1.TrainingJob) {
			tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{InitContainers: []mlv1.WorkerContainer{{Name: "ship", Image: "x"}}, Sidecars: []mlv1.WorkerContainer{{Name: "ship", Image: "x"}}}
		}, "spec.workerPod.sidecars"},
		{"a sidecar on the metrics port", sidecars(mlv1.WorkerContainer{Name: "exporter", Image: "x", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}), "spec.workerPod.sidecars"},
		{"a sidecar on the checkpoint agent's port", sidecars(mlv1.WorkerContainer{Name: "exporter", Image: "x", Ports: []corev1.ContainerPort{{ContainerPort: 8082}}}), "spec.workerPod.sidecars"},
		{"a sidecar without an image", sidecars(mlv1.WorkerContainer{Name: "ship"}), "spec.workerPod.sidecars[0].image"},
		{"a sidecar mounting no volume of the job", sidecars(mlv1.WorkerContainer{Name: "ship", Image: "x", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/c"}}}),
			"spec.workerPod.initContainers and spec.workerPod.sidecars may mount only volumes"},
		// Refused by the CRD itself (schema validation runs before any admission policy: the message is the
		// CRD rule's), so a cluster without the optional policy refuses them too.
		{"a sidecar named fetch-inputs", sidecars(mlv1.WorkerContainer{Name: "fetch-inputs", Image: "x"}), "spec.workerPod.sidecars[0].name"},
		{"an init container named fetch-inputs", func(tj *mlv1.TrainingJob) {
			tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{InitContainers: []mlv1.WorkerContainer{{Name: "fetch-inputs", Image: "x"}}}
		}, "spec.workerPod.initContainers[0].name"},
		{"a sidecar mounting the checkpoints", sidecars(mlv1.WorkerContainer{Name: "ship", Image: "x", VolumeMounts: []corev1.VolumeMount{{Name: "checkpoints", MountPath: "/c"}}}),
			"spec.workerPod.sidecars[0].volumeMounts"},
		{"an init container mounting the input cache", func(tj *mlv1.TrainingJob) {
			tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{InitContainers: []mlv1.WorkerContainer{{Name: "peek", Image: "x", VolumeMounts: []corev1.VolumeMount{{Name: "inputs-cache", MountPath: "/all"}}}}}
		}, "spec.workerPod.initContainers[0].volumeMounts"},
		{"the trainer mounting the inputs' credentials", func(tj *mlv1.TrainingJob) {
			tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{VolumeMounts: []corev1.VolumeMount{{Name: "inputs-credentials", MountPath: "/creds"}}}
		}, "spec.workerPod.volumeMounts"},
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
			Volumes:        []corev1.Volume{volume("cache")},
			InitContainers: []mlv1.WorkerContainer{{Name: "warm", Image: "busybox:1.36", VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}}}},
			Sidecars:       []mlv1.WorkerContainer{{Name: "ship", Image: "fluent-bit:3", Ports: []corev1.ContainerPort{{ContainerPort: 2020}}, VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}}}},
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
	for _, r := range loadCRD(t).Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["workerPod"].Properties["volumes"].XValidations {
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
	}{{"the CRD's workerPod.volumes rule", volumesRule, builders.ReservedVolumeNames}, {"the policy's volumeMounts rule", mountsRule, builders.ReservedMountPaths}} {
		if diff := cmp.Diff(slices.Sorted(slices.Values(c.want)), names(c.rule)); diff != "" {
			t.Errorf("%s vs the builders (-want +got):\n%s", c.what, diff)
		}
	}
}
