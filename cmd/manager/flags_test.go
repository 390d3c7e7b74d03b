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
		{name: "no flags: a claim per job of 20Gi on the default StorageClass", args: nil,
			want: &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, Size: ptr.To(resource.MustParse("20Gi"))}, wantErr: false},
		{name: "claim size and class", args: []string{"--default-checkpoint-claim-size=1Ti", "--default-checkpoint-storage-class=efs"},
			want:    &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, Size: ptr.To(resource.MustParse("1Ti")), StorageClassName: ptr.To("efs")},
			wantErr: false},
		{name: "object storage", args: []string{"--default-checkpoint-storage=gs://team/runs"},
			want: &mlv1.CheckpointStorage{Type: mlv1.StorageGCS, GCSBucket: "team", Prefix: "runs"}, wantErr: false},
		{name: "zero claim size", args: []string{"--default-checkpoint-claim-size=0"}, want: nil, wantErr: true},
		{name: "not a size", args: []string{"--default-checkpoint-claim-size=big"}, want: nil, wantErr: true},
		{name: "unknown scheme", args: []string{"--default-checkpoint-storage=azure://c"}, want: nil, wantErr: true},
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
		{name: "no flags: only jobs that name a server are tracked", args: nil, want: client.ObjectKey{}, wantErr: false},
		{name: "a default server and its credentials",
			args: []string{"--mlflow-tracking-uri=https://mlflow.example.com", "--mlflow-credentials-secret=trainingjob-system/mlflow"},
			want: client.ObjectKey{Namespace: "trainingjob-system", Name: "mlflow"}, wantErr: false},
		{name: "not a URL", args: []string{"--mlflow-tracking-uri=mlflow:5000"}, want: client.ObjectKey{}, wantErr: true},
		{name: "a Secret without its namespace", args: []string{"--mlflow-credentials-secret=mlflow"}, want: client.ObjectKey{}, wantErr: true},
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
		{name: "the platform's",
			yaml: "labels: {cost-center: ml}\ntolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]\nsharedMemory: 16Gi\n" +
				"env: [{name: NCCL_DEBUG, value: WARN}]\npriorityClassName: batch\n",
			want: ""},
		{name: "a misspelt field", yaml: "tolerationz: []\n", want: `unknown field "tolerationz"`},
		{name: "a reserved variable", yaml: "env: [{name: RANK, value: '0'}]\n", want: "env: RANK"},
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
			if tc.want == "" && (d.Labels["cost-center"] != "ml" || len(d.Tolerations) != 1 ||
				d.SharedMemory.String() != "16Gi" || d.PriorityClassName != "batch") {
				t.Errorf("read %+v", d)
			}
		})
	}
}
