//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/storetest"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/images"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/realnode"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestInputsOnRealNodes: two ranks of the default runner image on two real nodes fine-tune from weights in
// a real S3 server (versitygw on this machine's address) on a dataset from a claim: rank 0's fetch-inputs
// init container (the operator's image) copies the weights into the job's input cache, both ranks read them
// and the claim's dataset read-only, and the job completes with InputsReady and the bytes in its status.
func TestInputsOnRealNodes(t *testing.T) {
	ctx := context.Background()
	ns := stacktest.NewNamespace(t, stack.Client, "inputs")
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "datasets"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	filler := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "make-inputs"}, Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "make", Image: images.Runner, ImagePullPolicy: corev1.PullIfNotPresent,
			Command:      []string{"python3", "-c", stacktest.MakeRunnerInputs, "/data/weights", "/data/set1"},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
		Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "datasets"}}}}}}
	stacktest.Create(t, stack.Client, claim, filler)
	stacktest.Eventually(t, 3*time.Minute, "the inputs are made", func() error {
		p := &corev1.Pod{}
		if err := stack.Client.Get(ctx, client.ObjectKeyFromObject(filler), p); err != nil || p.Status.Phase != corev1.PodSucceeded {
			return fmt.Errorf("make-inputs %s (%v)", p.Status.Phase, err)
		}
		return nil
	})

	host, err := realnode.HostIP()
	if err != nil {
		t.Fatal(err)
	}
	gw := storetest.NewVersityGWOn(t, host, "rn-access", "rn-secret-key")
	store, err := checkpoint.NewS3Store(ctx,
		checkpoint.S3Options{Bucket: "models", Endpoint: gw.Endpoint, AccessKey: "rn-access", SecretKey: "rn-secret-key"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("models")}); err != nil {
		t.Fatal(err)
	}
	total := stacktest.UploadFiles(t, store, "cnn-8x8", filepath.Join(claimPath(t, ns, "datasets"), "weights"), stacktest.RunnerWeights)
	stacktest.Create(t, stack.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-keys", Namespace: ns},
		StringData: map[string]string{checkpoint.SecretS3AccessKey: "rn-access", checkpoint.SecretS3SecretKey: "rn-secret-key"}})
	tj := tjtest.NewTJ(ns, "finetune").NoCommand().Workers(2).GPUs(0).Epochs(3).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Image = "" // the default runner image
		tj.Spec.Model, tj.Spec.Dataset = "s3://models/cnn-8x8", "pvc://datasets/set1"
		tj.Spec.Inputs = &mlv1.InputsSpec{Endpoint: gw.Endpoint, SecretRef: &corev1.LocalObjectReference{Name: "s3-keys"}}
		tj.Spec.Hyperparameters.BatchSize = ptr.To[int32](32)
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(false)}
	}).Obj()
	spread(tj)
	stacktest.Create(t, stack.Client, tj)
	done := waitForEnd(t, ns, tj.Name, 5*time.Minute)
	if done.Status.State != mlv1.StateCompleted {
		t.Fatalf("state %s: %s", done.Status.State, done.Status.FailureReason)
	}
	if in := done.Status.Inputs; len(in) != 1 || in[0].Bytes != total || in[0].FetchedBytes != total || in[0].Files != 2 {
		t.Errorf("status.inputs %+v; want the model's %d bytes in 2 files, all read once", in, total)
	}
	c := meta.FindStatusCondition(done.Status.Conditions, mlv1.ConditionInputsReady)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != "Fetched" {
		t.Errorf("InputsReady %+v, want True/Fetched", c)
	}
	var log string
	for rank, p := range workerPods(t, ns, tj.Name, 0) {
		l := kubectl(t, "logs", "-n", ns, p.Name, "-c", names.ContainerName)
		log += l
		if rank == "0" {
			for _, want := range []string{
				`fine-tuning from /inputs/cache/model/model\.pt: 6 of 6 tensors loaded`,
				`dataset /inputs/dataset/set1: 512 samples of 1x8x8, 4 classes`,
			} {
				if !regexp.MustCompile(want).MatchString(l) {
					t.Errorf("rank 0's log does not say %q:\n%s", want, l)
				}
			}
		}
	}
	sameChecksum(t, "the fine-tuning ranks", log, 2)

	// The same inputs in a PerNode cache (the chart's inputs.nodeCacheDir, a hostPath the kubelet creates),
	// for workers that run as a user of their own: the fetchers write as root what the trainers then read.
	// The stack's nodes share this machine's disk, so one node cache: one rank reads, the other waits for
	// it and finds the copy.
	perNode := tjtest.NewTJ(ns, "finetune-pernode").NoCommand().Workers(2).GPUs(0).Epochs(2).With(func(pn *mlv1.TrainingJob) {
		pn.Spec.Image, pn.Spec.Model, pn.Spec.Dataset = "", tj.Spec.Model, tj.Spec.Dataset
		pn.Spec.Inputs = &mlv1.InputsSpec{Endpoint: gw.Endpoint, SecretRef: &corev1.LocalObjectReference{Name: "s3-keys"},
			Cache: mlv1.InputsCachePerNode}
		pn.Spec.Hyperparameters.BatchSize = ptr.To[int32](32)
		pn.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(false)}
		pn.Spec.SecurityContext = &mlv1.WorkerSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000)}
	}).Obj()
	spread(perNode)
	stacktest.Create(t, stack.Client, perNode)
	if done := waitForEnd(t, ns, perNode.Name, 5*time.Minute); done.Status.State != mlv1.StateCompleted {
		t.Fatalf("%s: state %s: %s", perNode.Name, done.Status.State, done.Status.FailureReason)
	}
	var read []int64
	for rank, p := range workerPods(t, ns, perNode.Name, 0) {
		for _, cs := range p.Status.InitContainerStatuses {
			if n, ok := stacktest.FetchedBytes(cs); ok {
				read = append(read, n)
			}
		}
		if rank != "0" {
			continue // rank 0 says what it loaded
		}
		l := kubectl(t, "logs", "-n", ns, p.Name, "-c", names.ContainerName)
		if !strings.Contains(l, "fine-tuning from /inputs/cache/model/model.pt: 6 of 6 tensors loaded") {
			t.Errorf("rank 0 of %s does not fine-tune from the node cache:\n%s", perNode.Name, l)
		}
	}
	if slices.Sort(read); len(read) != 2 || read[0] != 0 || read[1] != total {
		t.Errorf("%s's fetchers read %v bytes; want 0 and %d: one copy on the machine's node cache", perNode.Name, read, total)
	}
}

// claimPath returns the directory on this machine of a bound claim's hostPath volume.
func claimPath(t *testing.T, ns, name string) string {
	t.Helper()
	var dir string
	stacktest.Eventually(t, time.Minute, "claim "+name+" bound", func() error {
		pvc := &corev1.PersistentVolumeClaim{}
		err := stack.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pvc)
		if err != nil || pvc.Spec.VolumeName == "" {
			return fmt.Errorf("not bound (%v)", err)
		}
		pv := &corev1.PersistentVolume{}
		if err := stack.Client.Get(context.Background(), client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil || pv.Spec.HostPath == nil {
			return fmt.Errorf("volume %s has no hostPath (%v)", pvc.Spec.VolumeName, err)
		}
		dir = pv.Spec.HostPath.Path
		return nil
	})
	return dir
}
