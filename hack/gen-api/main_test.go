package main

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// containerNames is the container-names block's marker, as the CRD has it.
const containerNames = `// +kubebuilder:validation:XValidation:rule="!(self in ['trainer', 'checkpoint-agent', 'resume-check', ` +
	`'fetch-inputs', 'supervisor'])",message="the container names trainer, checkpoint-agent, resume-check, fetch-inputs ` +
	`and supervisor are the operator's"`

// sidecarPortsMarker is the sidecar-ports block's marker, as the CRD has it.
const sidecarPortsMarker = `+kubebuilder:validation:XValidation:rule="!has(self.workerPod) || !has(self.workerPod.sidecars) || ` +
	`self.workerPod.sidecars.all(c, !has(c.ports) || c.ports.all(p, !(p.containerPort in [has(self.networking) && ` +
	`has(self.networking.masterPort) ? self.networking.masterPort : 29500, has(self.monitoring) && ` +
	`has(self.monitoring.metricsPort) ? self.monitoring.metricsPort : 8080, 2222, 8082, 8084])))",message="workerPod.sidecars ` +
	`must not serve the trainer's, the checkpoint agent's or the supervisor's ports (networking.masterPort, ` +
	`monitoring.metricsPort, 2222 for MPI's SSH, 8082, 8084): the containers of a pod share its network",` +
	`fieldPath=".workerPod.sidecars"`

// TestSidecarPorts: the sidecar-ports block writes its one rule from the default ports and the builders' port
// constants.
func TestSidecarPorts(t *testing.T) {
	var got []string
	for _, r := range blocks["sidecar-ports"]() {
		got = append(got, r.marker())
	}
	if diff := cmp.Diff([]string{sidecarPortsMarker}, got); diff != "" {
		t.Errorf("markers (-want +got):\n%s", diff)
	}
}

// TestRewrite: a block's lines are replaced by its rules at the begin line's indentation, whatever they
// were; a file without blocks is left as it is; a block that is unknown, unterminated or written twice
// is an error.
func TestRewrite(t *testing.T) {
	for _, c := range []struct {
		name    string
		files   map[string]string
		want    map[string]string
		wantErr string
	}{{
		name: "replaces the block's lines",
		files: map[string]string{"a.go": "\t// name of the container.\n\t// +gen-api:begin=container-names (from the builders)\n" +
			"\t// +kubebuilder:validation:XValidation:rule=\"old\"\n\t// +gen-api:end\n\tName string\n"},
		want: map[string]string{"a.go": "\t// name of the container.\n\t// +gen-api:begin=container-names (from the builders)\n" +
			"\t" + containerNames + "\n\t// +gen-api:end\n\tName string\n"},
	}, {
		name:  "fills an empty block",
		files: map[string]string{"a.go": "// +gen-api:begin=container-names\n// +gen-api:end\n"},
		want:  map[string]string{"a.go": "// +gen-api:begin=container-names\n" + containerNames + "\n// +gen-api:end\n"},
	}, {
		name:  "leaves a file without blocks alone",
		files: map[string]string{"a.go": "package v1\n"},
		want:  map[string]string{"a.go": "package v1\n"},
	}, {
		name:    "an unknown block",
		files:   map[string]string{"a.go": "// +gen-api:begin=nothing\n// +gen-api:end\n"},
		wantErr: "a.go: line 1: unknown block nothing",
	}, {
		name:    "a block without its end",
		files:   map[string]string{"a.go": "// +gen-api:begin=container-names\n// +kubebuilder:validation:XValidation:rule=\"old\"\n"},
		wantErr: "a.go: line 1: block container-names has no +gen-api:end",
	}, {
		name: "a block twice",
		files: map[string]string{"a.go": "// +gen-api:begin=container-names\n// +gen-api:end\n",
			"b.go": "// +gen-api:begin=container-names\n// +gen-api:end\n"},
		wantErr: "b.go: line 1: block container-names is also in a.go",
	}} {
		t.Run(c.name, func(t *testing.T) {
			t.Chdir(t.TempDir())
			for name, text := range c.files {
				if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			written := map[string]string{}
			var errs []string
			for _, name := range slices.Sorted(maps.Keys(c.files)) {
				if err := rewrite(name, written); err != nil {
					errs = append(errs, name+": "+err.Error())
				}
			}
			if diff := cmp.Diff(c.wantErr, strings.Join(errs, "; ")); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			if c.wantErr != "" {
				return
			}
			got := map[string]string{}
			for name := range c.files {
				data, err := os.ReadFile(name)
				if err != nil {
					t.Fatal(err)
				}
				got[name] = string(data)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
		})
	}
}
