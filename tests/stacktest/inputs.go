package stacktest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	"github.com/trainingjob-operator/trainingjob-operator/internal/inputs"
)

// MakeRunnerInputs is a Python program (run with PyTorch and the default runner importable) that writes
// what the default runner fine-tunes from and trains on: into argv[1], a CNN's weights for 1x8x8 inputs and
// 4 classes (the runner's own architecture, model.pt) and trainingjob-model.json naming it; into argv[2],
// a learnable 1x8x8 dataset of 4 classes as data.pt (512 samples). Both directories are made readable by
// every user.
const MakeRunnerInputs = `
import json, os, sys, torch
from trainingjob_runner import settings, train
out_model, out_data = sys.argv[1], sys.argv[2]
os.makedirs(out_model, exist_ok=True)
os.makedirs(out_data, exist_ok=True)
s = settings.Settings(model="cnn", dataset="synthetic", loaded_shape=(1, 8, 8), loaded_classes=4)
torch.manual_seed(7)
torch.save(train.build_model(s).state_dict(), os.path.join(out_model, "model.pt"))
json.dump({"architecture": "cnn"}, open(os.path.join(out_model, "trainingjob-model.json"), "w"))
g = torch.Generator().manual_seed(1)
y = torch.randint(0, 4, (512,), generator=g)
x = torch.randn(4, 1, 8, 8, generator=g)[y] + 0.3 * torch.randn(512, 1, 8, 8, generator=g)
torch.save({"x": x, "y": y}, os.path.join(out_data, "data.pt"))
for d in (out_model, out_data):
    os.system("chmod -R a+rX " + d)
`

// RunnerWeights are the files MakeRunnerInputs writes as the model.
var RunnerWeights = []string{"model.pt", "trainingjob-model.json"}

// UploadFiles puts dir's files into store under prefix and returns their bytes together.
func UploadFiles(t *testing.T, store checkpoint.Store, prefix, dir string, files []string) int64 {
	t.Helper()
	var total int64
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Put(context.Background(), prefix+"/"+f, data); err != nil {
			t.Fatal(err)
		}
		total += int64(len(data))
	}
	return total
}

// FetchedBytes returns what a worker's fetch-inputs container that ended well read from the servers (the
// reports in its termination message); false for any other container or state.
func FetchedBytes(cs corev1.ContainerStatus) (int64, bool) {
	if cs.Name != names.InputsContainerName || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
		return 0, false
	}
	var reps []inputs.Report
	if err := json.Unmarshal([]byte(cs.State.Terminated.Message), &reps); err != nil {
		return 0, false
	}
	var n int64
	for _, r := range reps {
		n += r.Fetched
	}
	return n, true
}
