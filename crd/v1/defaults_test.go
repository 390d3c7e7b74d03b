package v1_test

import (
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// markerDefaults returns the defaults of the generated CRD's schema by JSON path below spec ("checkpoint.retention"),
// as JSON; the elements of lists (Kubernetes' own types inside env, volumes...) are not the API's own fields.
func markerDefaults(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("../../deploy/crd/ml.example.com_trainingjobs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var walk func(prefix string, s apiextensionsv1.JSONSchemaProps)
	walk = func(prefix string, s apiextensionsv1.JSONSchemaProps) {
		for name, p := range s.Properties {
			path := strings.TrimPrefix(prefix+"."+name, ".")
			if p.Default != nil {
				out[path] = string(p.Default.Raw)
			}
			walk(path, p)
		}
	}
	walk("", crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"])
	// Kubernetes' own types carry their defaults (corev1.LocalObjectReference's name: "").
	delete(out, "checkpoint.storage.secretRef.name")
	delete(out, "inputs.secretRef.name")
	return out
}

// leaves returns the leaf values of a JSON object by path, as JSON.
func leaves(prefix string, v any, out map[string]string) {
	if m, ok := v.(map[string]any); ok {
		for k, sub := range m {
			leaves(strings.TrimPrefix(prefix+"."+k, "."), sub, out)
		}
		return
	}
	data, _ := json.Marshal(v)
	out[prefix] = string(data)
}

// TestDefaultsMatchTheCRD: Default sets exactly the fields the CRD's +kubebuilder:default markers default,
// to the same values, and the one default derived from another field (networking.backend), on a
// TrainingJob whose every optional section is present and empty (where the API server applies them).
func TestDefaultsMatchTheCRD(t *testing.T) {
	tj := &mlv1.TrainingJob{Spec: mlv1.TrainingJobSpec{
		Checkpoint: &mlv1.CheckpointSpec{Storage: &mlv1.CheckpointStorage{}}, Elastic: &mlv1.ElasticSpec{},
		Monitoring: &mlv1.MonitoringSpec{}, Networking: &mlv1.NetworkingSpec{}, FailurePolicy: &mlv1.FailurePolicy{},
		Cleanup: &mlv1.CleanupPolicy{}, Scheduling: &mlv1.SchedulingSpec{}, SuccessPolicy: &mlv1.SuccessPolicy{},
	}}
	before := map[string]string{}
	leaves("", specJSON(t, tj), before)
	tj.Default()
	after := map[string]string{}
	leaves("", specJSON(t, tj), after)
	set := map[string]string{}
	for path, v := range after {
		if before[path] != v {
			set[path] = v
		}
	}
	want := markerDefaults(t)
	want["networking.backend"] = `"nccl"` // derived, no marker: nccl with GPUs (1 by default), gloo without
	if diff := cmp.Diff(want, set); diff != "" {
		t.Errorf("the CRD's markers (-) and Default (+) differ:\n%s", diff)
	}
}

func specJSON(t *testing.T, tj *mlv1.TrainingJob) map[string]any {
	t.Helper()
	data, err := json.Marshal(tj.Spec)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDefaultFillsTheSections: sections whose absence means the defaults are filled, those whose absence
// means "off" stay absent, and a value the user set is kept.
func TestDefaultFillsTheSections(t *testing.T) {
	tj := &mlv1.TrainingJob{}
	tj.Spec.FailurePolicy = &mlv1.FailurePolicy{RetryableExitCodes: []int32{1}}
	tj.Default()
	s := tj.Spec
	got := []string{string(s.Framework), string(s.FailurePolicy.RestartPolicy), string(s.Cleanup.CleanPodPolicy)}
	sort.Strings(got)
	if diff := cmp.Diff([]string{"Gang", "Running", "pytorch"}, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	if *s.GPUsPerWorker != 1 || *s.FailurePolicy.BackoffLimit != 3 || len(s.FailurePolicy.RetryableExitCodes) != 1 ||
		!*s.Monitoring.Enabled || s.Monitoring.MetricsPort != 8080 || s.Networking.MasterPort != 29500 {
		t.Errorf("defaulted spec %+v", s)
	}
	if s.Checkpoint != nil || s.Elastic != nil {
		t.Errorf("checkpoint %v, elastic %v: absent means off, not defaulted", s.Checkpoint, s.Elastic)
	}
}
