//go:build frameworks

package frameworks

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/storetest"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestDefaultRunnerFineTunes: two ranks of the default runner fine-tune from weights in a real S3 server
// (fetched once by rank 0 into the input cache) on a dataset on a claim (mounted read-only): the job
// completes with InputsReady and the bytes in its status, and each rank says it loaded the weights.
func TestDefaultRunnerFineTunes(t *testing.T) {
	ns := newNamespace(t)
	gw := storetest.NewVersityGW(t, "fw-access", "fw-secret-key")
	store, err := checkpoint.NewS3Store(ctx,
		checkpoint.S3Options{Bucket: "models", Endpoint: gw.Endpoint, AccessKey: "fw-access", SecretKey: "fw-secret-key"})
	if err != nil {
		t.Fatal(err)
	}
	create(t, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "datasets", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}})
	dataDir := filepath.Join(claimPath(t, ns, "datasets"), "set1")
	modelDir := t.TempDir()
	if err := os.MkdirAll(dataDir, 0o777); err != nil {
		t.Fatal(err)
	}
	py := exec.Command(os.Getenv("FRAMEWORKS_PYTHON"), "-c", stacktest.MakeRunnerInputs, modelDir, dataDir)
	py.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(testenv.RepoRoot(), "runner"))
	if out, err := py.CombinedOutput(); err != nil {
		t.Fatalf("making the inputs: %v\n%s", err, out)
	}
	if _, err := store.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("models")}); err != nil {
		t.Fatal(err)
	}
	total := stacktest.UploadFiles(t, store, "cnn-8x8", modelDir, stacktest.RunnerWeights)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-keys", Namespace: ns},
		StringData: map[string]string{checkpoint.SecretS3AccessKey: "fw-access", checkpoint.SecretS3SecretKey: "fw-secret-key"}})
	create(t, tjtest.NewTJ(ns, "finetune").NoCommand().Workers(2).GPUs(0).Epochs(3).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Model, tj.Spec.Dataset = "s3://models/cnn-8x8", "pvc://datasets/set1"
		tj.Spec.Inputs = &mlv1.InputsSpec{Endpoint: gw.Endpoint, SecretRef: &corev1.LocalObjectReference{Name: "s3-keys"}}
		tj.Spec.Hyperparameters.BatchSize = ptr.To[int32](32)
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true)}
		tj.Spec.Monitoring = &mlv1.MonitoringSpec{TensorboardEnabled: ptr.To(true)}
	}).Obj())
	done := waitFinished(t, ns, "finetune", 4*time.Minute)
	if done.Status.State != mlv1.StateCompleted {
		t.Fatalf("state %s: %s; rank logs:\n%s",
			done.Status.State, done.Status.FailureReason, strings.Join(rankLogs(t, ns, "finetune", 2), "\n---\n"))
	}
	if in := done.Status.Inputs; len(in) != 1 || in[0].Name != "model" || in[0].Bytes != total || in[0].FetchedBytes != total {
		t.Errorf("status.inputs %+v; want the model's %d bytes, all read once", in, total)
	}
	// The paths are the pod's (/inputs/cache/model, /inputs/dataset/set1), which a process node maps to its
	// directories for the volumes.
	log := rankLogs(t, ns, "finetune", 2)[0]
	for _, want := range []string{
		`fine-tuning from \S*/model/model\.pt: 6 of 6 tensors loaded`,
		`dataset \S*/set1: 512 samples of 1x8x8, 4 classes`,
	} {
		if !regexp.MustCompile(want).MatchString(log) {
			t.Errorf("rank 0's log does not say %q:\n%s", want, log)
		}
	}
	assertSameChecksum(t, rankLogs(t, ns, "finetune", 2), 2)
	// TensorBoard's events outlive the pods, beside the checkpoints: one record per epoch with the loss.
	events, _ := filepath.Glob(filepath.Join(claimPath(t, ns, "finetune-checkpoints"), ns, "finetune", "tensorboard", "events.out.tfevents.*"))
	if len(events) != 1 {
		t.Fatalf("TensorBoard event files %v, want one", events)
	}
	if n := countScalars(t, events[0], "loss"); n != 3 {
		t.Errorf("%d loss scalars in %s, want one per epoch (3)", n, events[0])
	}
}

// countScalars reads a TensorBoard event file (TFRecord framing, each length and record checked against
// its masked CRC-32C) and counts the records that name tag.
func countScalars(t *testing.T, path, tag string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	masked := func(b []byte) uint32 {
		c := crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
		return (c>>15 | c<<17) + 0xa282ead8
	}
	n := 0
	for len(data) > 0 {
		if len(data) < 12 {
			t.Fatalf("%s: a truncated record", path)
		}
		size := binary.LittleEndian.Uint64(data)
		if masked(data[:8]) != binary.LittleEndian.Uint32(data[8:]) || uint64(len(data)) < 16+size {
			t.Fatalf("%s: a bad record length", path)
		}
		body := data[12 : 12+size]
		if masked(body) != binary.LittleEndian.Uint32(data[12+size:]) {
			t.Fatalf("%s: a record with a bad CRC", path)
		}
		if bytes.Contains(body, []byte(tag)) {
			n++
		}
		data = data[16+size:]
	}
	return n
}

// claimPath returns the directory a bound claim's hostPath volume has on this machine (the process node's
// provisioner).
func claimPath(t *testing.T, ns, name string) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pvc); err == nil && pvc.Spec.VolumeName != "" {
			pv := &corev1.PersistentVolume{}
			if err := stack.Client.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err == nil && pv.Spec.HostPath != nil {
				return pv.Spec.HostPath.Path
			}
		}
		if time.Now().After(deadline) {
			t.Fatal(fmt.Errorf("claim %s/%s not bound in a minute", ns, name))
		}
	}
}
