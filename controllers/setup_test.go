package controllers

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestCachedTrainingJob: the cache holds a TrainingJob defaulted, without its managedFields and kubectl's
// copy of its spec, and with its other annotations.
func TestCachedTrainingJob(t *testing.T) {
	raw := &mlv1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns",
		Annotations:   map[string]string{corev1.LastAppliedConfigAnnotation: `{"spec":{"numWorkers":2}}`, "team": "vision"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: mlv1.TrainingJobSpec{NumWorkers: 2, Image: "me/train:1"}}
	obj, err := defaultTrainingJob(raw)
	if err != nil {
		t.Fatal(err)
	}
	tj := obj.(*mlv1.TrainingJob)
	if diff := cmp.Diff(map[string]string{"team": "vision"}, tj.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if tj.ManagedFields != nil || tj.Spec.GPUsPerWorker == nil {
		t.Errorf("managedFields %v, gpusPerWorker %v: want none, and the default", tj.ManagedFields, tj.Spec.GPUsPerWorker)
	}
}

// TestCachedConfigMap: the cache holds a job's config.json as its digest and every other key as it is; the
// JobController finds the ConfigMap as built by the digest, and brings a changed one up to date with the
// whole file, keeping the keys other controllers wrote.
func TestCachedConfigMap(t *testing.T) {
	ctx := context.Background()
	tj := tjtest.NewTJ("ml", "cm").Obj()
	tj.UID = "uid-cm"
	built, err := builders.ConfigMap(tj, builders.Options{})
	if err != nil {
		t.Fatal(err)
	}
	config := built.Data[names.ConfigFileName]
	cached := func(data map[string]string) *corev1.ConfigMap {
		cm := built.DeepCopy()
		cm.Data = data
		obj, err := slimConfigMap(cm)
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*corev1.ConfigMap)
	}
	held := cached(map[string]string{names.ConfigFileName: config, names.ResumeFromKey: "s3://b/ckpt-1"})
	if diff := cmp.Diff(map[string]string{names.ConfigFileName: configDigest(config), names.ResumeFromKey: "s3://b/ckpt-1"},
		held.Data); diff != "" {
		t.Errorf("cached data (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		name       string
		held       *corev1.ConfigMap
		wantUpdate bool
	}{
		{name: "as built", held: held},
		{name: "config.json changed", held: cached(map[string]string{names.ConfigFileName: `{"old":1}`, names.ResumeFromKey: "s3://b/ckpt-1"}),
			wantUpdate: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReconciler(tj, tc.held)
			if _, err := r.ensureConfigMap(ctx, tj); err != nil {
				t.Fatal(err)
			}
			got := &corev1.ConfigMap{}
			if err := r.Get(ctx, client.ObjectKeyFromObject(built), got); err != nil {
				t.Fatal(err)
			}
			wantData := tc.held.Data
			if tc.wantUpdate {
				wantData = map[string]string{names.ConfigFileName: config, names.ResumeFromKey: "s3://b/ckpt-1"}
			}
			if diff := cmp.Diff(wantData, got.Data); diff != "" {
				t.Errorf("stored data (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCachedPod: the cache holds of a worker's pod the metadata the controllers select, read and patch it by
// (its job, attempt and rank labels, its finalizers, its deletion, its controller: the Job that made it),
// whether its supervisor takes its pod's tokens, where its agent's token comes from, its node and its status.
func TestCachedPod(t *testing.T) {
	deleted := metav1.NewTime(t0.Time)
	tokenFromSecret := corev1.EnvVar{Name: agentapi.TokenEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "w-tokens"}, Key: names.AgentTokenKey}}}
	raw := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-worker-0-abcde", Namespace: "ml", UID: "u", ResourceVersion: "7",
		GenerateName: "w-worker-0-", CreationTimestamp: t0, DeletionTimestamp: &deleted, Finalizers: []string{"batch.kubernetes.io/job-tracking"},
		Labels: map[string]string{names.NameLabel: "w", names.AttemptLabel: "1", names.RankLabel: "0", names.ManagedByLabel: names.ManagedByValue,
			names.ControllerUIDLabel: "x", "batch.kubernetes.io/job-name": "w-worker", "controller-uid": "x", "team": "vision"},
		Annotations: map[string]string{names.RankAnnotation: "0", "prometheus.io/scrape": "true"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "Team", Name: "vision", UID: "t"},
			{Kind: "Job", Name: "w-worker", UID: "x", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "node-1", InitContainers: []corev1.Container{{Name: names.AgentContainerName, Image: "operator:1",
			Env: []corev1.EnvVar{{Name: "RANK", Value: "0"}, tokenFromSecret}}},
			Containers: []corev1.Container{{Name: "trainer", Image: "me/train:1",
				Env: []corev1.EnvVar{{Name: "LR", Value: "0.1"}, {Name: controlapi.PodUIDEnv, ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"}}
	obj, err := slimPod(raw.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: raw.Name, Namespace: "ml", UID: "u", ResourceVersion: "7",
		CreationTimestamp: t0, DeletionTimestamp: &deleted, Finalizers: raw.Finalizers,
		Labels: map[string]string{names.NameLabel: "w", names.AttemptLabel: "1", names.RankLabel: "0",
			names.ManagedByLabel: names.ManagedByValue, names.ControllerUIDLabel: "x"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "Job", Name: "w-worker", UID: "x", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "node-1",
			InitContainers: []corev1.Container{{Name: names.AgentContainerName, Env: []corev1.EnvVar{tokenFromSecret}}},
			Containers:     []corev1.Container{{Name: "trainer", Env: []corev1.EnvVar{{Name: controlapi.PodUIDEnv}}}}},
		Status: raw.Status}
	if diff := cmp.Diff(want, obj); diff != "" {
		t.Errorf("cached pod (-want +got):\n%s", diff)
	}
}

// TestCachedService: the cache holds of a job's Service its ports, selector, labels and owner; a drifted
// Service is updated from the Service as stored (the APIReader's), so what the cache drops (the cluster IP,
// its families, a user's annotation) is kept.
func TestCachedService(t *testing.T) {
	ctx := context.Background()
	tj := tjtest.NewTJ("ml", "svc").Obj()
	tj.UID = "uid-svc"
	stored := builders.Service(tj)
	stored.UID, stored.ResourceVersion, stored.Annotations = "u", "3", map[string]string{"team": "vision"}
	stored.OwnerReferences = []metav1.OwnerReference{{Kind: "TrainingJob", Name: tj.Name, UID: tj.UID}}
	stored.Spec.ClusterIPs, stored.Spec.IPFamilies = []string{corev1.ClusterIPNone}, []corev1.IPFamily{corev1.IPv4Protocol}
	stored.Spec.Selector = map[string]string{"stale": "selector"}
	obj, err := slimService(stored.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	held := obj.(*corev1.Service)
	want := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: stored.Name, Namespace: "ml", UID: "u", ResourceVersion: "3",
		Labels: stored.Labels, OwnerReferences: stored.OwnerReferences},
		Spec: corev1.ServiceSpec{Ports: stored.Spec.Ports, Selector: stored.Spec.Selector}}
	if diff := cmp.Diff(want, held); diff != "" {
		t.Fatalf("cached service (-want +got):\n%s", diff)
	}
	r := newReconciler(tj, held)
	r.APIReader = newReconciler(stored).Client
	if err := r.ensureService(ctx, tj); err != nil {
		t.Fatal(err)
	}
	got := &corev1.Service{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(stored), got); err != nil {
		t.Fatal(err)
	}
	wantSpec := stored.Spec
	wantSpec.Selector = builders.Service(tj).Spec.Selector
	if diff := cmp.Diff(wantSpec, got.Spec); diff != "" {
		t.Errorf("updated spec (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(stored.Annotations, got.Annotations); diff != "" {
		t.Errorf("updated annotations (-want +got):\n%s", diff)
	}
}
