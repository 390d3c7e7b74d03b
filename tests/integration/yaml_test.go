package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

// YAML as users write it for the design this product replaces: NCCL tuning in env, and checkpoints with no
// storage section (that design's own first example).
var designYAML = map[string]string{
	"nccl tuning env": `
apiVersion: ml.example.com/v1
kind: TrainingJob
metadata: {name: nccl-tuning}
spec:
  model: llama-7b
  dataset: c4
  numWorkers: 4
  gpusPerWorker: 8
  env:
    - name: NCCL_DEBUG
      value: INFO
    - name: NCCL_IB_DISABLE
      value: "1"
    - name: NCCL_SOCKET_IFNAME
      value: eth0
`,
	"checkpoints without storage": `
apiVersion: ml.example.com/v1
kind: TrainingJob
metadata: {name: mnist-checkpoints}
spec:
  model: cnn
  dataset: mnist
  numWorkers: 2
  gpusPerWorker: 1
  hyperparameters:
    learningRate: 0.001
    batchSize: 64
    epochs: 10
  checkpoint:
    enabled: true
    frequency: 1
`,
}

// topLevelTrainingJob finds a block that is a TrainingJob, not one that holds it (a Katib Experiment's
// trial template, checked by tests/katib).
var topLevelTrainingJob = regexp.MustCompile(`(?m)^kind: TrainingJob$`)

// docsYAML returns every ```yaml block of README.md and the pages of docs/ that is a TrainingJob.
func docsYAML(t *testing.T) map[string]string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string]string{}
	for _, page := range append([]string{filepath.Join(testenv.RepoRoot(), "README.md")}, pages...) {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
			if topLevelTrainingJob.MatchString(m[1]) {
				blocks[fmt.Sprintf("%s block %d", filepath.Base(page), i+1)] = m[1]
			}
		}
	}
	if len(blocks) < 2 {
		t.Fatalf("the README and docs quote %d TrainingJobs, want at least 2", len(blocks))
	}
	return blocks
}

// TestDesignYAMLIsAccepted sends YAML written for the original design, and every TrainingJob the README
// and docs/ quote, to the real API server as a user's kubectl would: each decodes strictly and is admitted.
func TestDesignYAMLIsAccepted(t *testing.T) {
	ns := newNamespace(t)
	docs := docsYAML(t)
	for name, doc := range designYAML {
		docs[name] = doc
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatal(err)
			}
			data, _ := json.Marshal(u.Object)
			if err := yaml.UnmarshalStrict(data, &mlv1.TrainingJob{}); err != nil {
				t.Errorf("not a TrainingJob of this API: %v", err)
			}
			u.SetNamespace(ns)
			if err := env.Client.Create(context.Background(), u); err != nil {
				t.Errorf("rejected: %v", err)
			}
		})
	}
}
