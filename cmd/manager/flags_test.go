package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// TestDefaultCheckpointStorageFlags: the three flags give the storage of jobs whose checkpoints name none.
func TestDefaultCheckpointStorageFlags(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		want    *mlv1.CheckpointStorage
		wantErr bool
	}{
		{"no flags: a claim per job of 20Gi on the default StorageClass", nil,
			&mlv1.CheckpointStorage{Type: mlv1.StoragePVC, Size: ptr.To(resource.MustParse("20Gi"))}, false},
		{"claim size and class", []string{"--default-checkpoint-claim-size=1Ti", "--default-checkpoint-storage-class=efs"},
			&mlv1.CheckpointStorage{Type: mlv1.StoragePVC, Size: ptr.To(resource.MustParse("1Ti")), StorageClassName: ptr.To("efs")}, false},
		{"object storage", []string{"--default-checkpoint-storage=gs://team/runs"},
			&mlv1.CheckpointStorage{Type: mlv1.StorageGCS, GCSBucket: "team", Prefix: "runs"}, false},
		{"zero claim size", []string{"--default-checkpoint-claim-size=0"}, nil, true},
		{"not a size", []string{"--default-checkpoint-claim-size=big"}, nil, true},
		{"unknown scheme", []string{"--default-checkpoint-storage=azure://c"}, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := parseFlags(tc.args)
			got, err := defaultCheckpointStorage(c)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %t", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("storage (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMLflowFlags: the default tracking server must be an http(s) URL, the credentials Secret NAMESPACE/NAME.
func TestMLflowFlags(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		want    client.ObjectKey
		wantErr bool
	}{
		{"no flags: only jobs that name a server are tracked", nil, client.ObjectKey{}, false},
		{"a default server and its credentials", []string{"--mlflow-tracking-uri=https://mlflow.example.com", "--mlflow-credentials-secret=trainingjob-system/mlflow"},
			client.ObjectKey{Namespace: "trainingjob-system", Name: "mlflow"}, false},
		{"not a URL", []string{"--mlflow-tracking-uri=mlflow:5000"}, client.ObjectKey{}, true},
		{"a Secret without its namespace", []string{"--mlflow-credentials-secret=mlflow"}, client.ObjectKey{}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := parseFlags(tc.args)
			got, err := mlflowFlags(c)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %t", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("credentials Secret (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWorkerDefaultsFile: --worker-defaults reads the platform team's YAML strictly and refuses what would
// break the operator's wiring.
func TestWorkerDefaultsFile(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       string // an error's text; "": read
	}{
		{"the platform's", "labels: {cost-center: ml}\ntolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]\nsharedMemory: 16Gi\n" +
			"env: [{name: NCCL_DEBUG, value: WARN}]\npriorityClassName: batch\n", ""},
		{"a misspelt field", "tolerationz: []\n", `unknown field "tolerationz"`},
		{"a reserved variable", "env: [{name: RANK, value: '0'}]\n", "env: RANK"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "defaults.yaml")
			if err := os.WriteFile(file, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			c, _ := parseFlags([]string{"--worker-defaults=" + file})
			d, err := readWorkerDefaults(c.workerDefaults)
			if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("readWorkerDefaults() = %v, want %q", err, tc.want)
			}
			if tc.want == "" && (d.Labels["cost-center"] != "ml" || len(d.Tolerations) != 1 || d.SharedMemory.String() != "16Gi" || d.PriorityClassName != "batch") {
				t.Errorf("read %+v", d)
			}
		})
	}
}
