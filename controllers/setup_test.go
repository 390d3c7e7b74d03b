package controllers

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
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
