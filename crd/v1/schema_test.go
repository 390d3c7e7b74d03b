package v1_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/crd-schema.golden.json from the generated CRD")

// goldenSchema is the generated CRD's spec (names, versions, schema, printer columns, subresources) with
// every description removed, as indented JSON.
const goldenSchema = "testdata/crd-schema.golden.json"

// TestCRDSchemaUnchanged: the CRD that make generate writes (deploy/crd) has the schema of
// testdata/crd-schema.golden.json, descriptions aside. Descriptions (the Go doc comments, which kubectl
// explain prints) may change freely; every other change to the schema (a field, a bound, an enum, a CEL
// rule, a default, a printer column) fails here. When the API is changed on purpose, update the golden
// deliberately with `go test ./crd/v1 -run TestCRDSchemaUnchanged -update` after make generate, and review
// its diff.
func TestCRDSchemaUnchanged(t *testing.T) {
	data, err := os.ReadFile("../../deploy/crd/ml.example.com_trainingjobs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := schemaWithoutDescriptions(t, data)
	if *update {
		if err := os.WriteFile(goldenSchema, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(goldenSchema)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("the generated CRD's schema, descriptions aside, vs %s (-want +got):\n%s", goldenSchema, diff)
	}
}

// schemaWithoutDescriptions returns the CRD's spec with every description removed, as indented JSON (keys
// sorted), one line per value so that a diff names the rule or bound that changed.
func schemaWithoutDescriptions(t *testing.T, crdYAML []byte) []byte {
	t.Helper()
	var crd struct {
		Spec any `json:"spec"`
	}
	if err := yaml.Unmarshal(crdYAML, &crd); err != nil {
		t.Fatal(err)
	}
	stripDescriptions(crd.Spec)
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(crd.Spec); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// stripDescriptions deletes every "description" whose value is a string: a schema's or a printer column's.
// A property named description (its value a schema, an object) stays.
func stripDescriptions(v any) {
	switch v := v.(type) {
	case map[string]any:
		if _, ok := v["description"].(string); ok {
			delete(v, "description")
		}
		for _, sub := range v {
			stripDescriptions(sub)
		}
	case []any:
		for _, sub := range v {
			stripDescriptions(sub)
		}
	}
}
