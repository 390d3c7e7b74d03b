package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// waitForClaimCondition waits until CheckpointClaimBound has the status and reason and its message holds
// every part, and returns the condition.
func waitForClaimCondition(t *testing.T, key client.ObjectKey, status metav1.ConditionStatus, reason string, parts ...string) {
	t.Helper()
	eventually(t, fmt.Sprintf("CheckpointClaimBound %s %s", status, reason), func(ctx context.Context) error {
		tj := &mlv1.TrainingJob{}
		if err := env.Client.Get(ctx, key, tj); err != nil {
			return err
		}
		c := meta.FindStatusCondition(tj.Status.Conditions, mlv1.ConditionCheckpointClaimBound)
		if c == nil || c.Status != status || c.Reason != reason {
			return fmt.Errorf("condition %+v", c)
		}
		for _, p := range parts {
			if !strings.Contains(c.Message, p) {
				return fmt.Errorf("message %q lacks %q", c.Message, p)
			}
		}
		return nil
	})
}

// TestCheckpointsWithoutStorageGetAClaim: checkpoints enabled with no storage section, and no default
// storage configured: the operator records its choice, creates the claim <name>-checkpoints
// (ReadWriteMany for 2 ranks, 20Gi, the default StorageClass) and mounts it in the workers. With no
// StorageClass and no volume in the cluster the real persistentvolume-binder cannot bind it: the
// TrainingJob says so with the binder's own event text, and a Warning event. A volume appears, the claim
// binds, the condition turns True. Deleting the TrainingJob leaves the claim (and the checkpoints).
func TestCheckpointsWithoutStorageGetAClaim(t *testing.T) {
	ns := newNamespace(t)
	startControllerManager(t, "persistentvolume-binder", "pvc-protection")
	startOperator(t, ns)
	tj := tjtest.NewTJ(ns, "keep").GPUs(0).Checkpoints(nil).Obj()
	if err := env.Client.Create(context.Background(), tj); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tj)
	claim := &corev1.PersistentVolumeClaim{}
	eventually(t, "the claim keep-checkpoints, mounted by the workers", func(ctx context.Context) error {
		if err := env.Client.Get(ctx, key, tj); err != nil {
			return err
		}
		if diff := cmp.Diff(&mlv1.CheckpointStorage{Type: mlv1.StoragePVC}, tj.Status.CheckpointStorage); diff != "" {
			return fmt.Errorf("status.checkpointStorage (-want +got):\n%s", diff)
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "keep-checkpoints"}, claim); err != nil {
			return err
		}
		job := &batchv1.Job{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: names.JobName(tj)}, job); err != nil {
			return err
		}
		vols := job.Spec.Template.Spec.Volumes
		if !slices.ContainsFunc(vols, func(v corev1.Volume) bool {
			return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "keep-checkpoints"
		}) {
			return fmt.Errorf("job volumes %+v", vols)
		}
		return nil
	})
	if got := claim.Spec.AccessModes; !slices.Equal(got, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) {
		t.Errorf("access modes %v, want ReadWriteMany", got)
	}
	if len(claim.OwnerReferences) != 0 {
		t.Errorf("the claim is owned (%+v): it would be deleted with the job", claim.OwnerReferences)
	}
	waitForClaimCondition(t, key, metav1.ConditionFalse, "FailedBinding",
		"claim keep-checkpoints (ReadWriteMany, 20Gi, default StorageClass) is not bound",
		"no persistent volumes available for this claim and no storage class is set")
	eventually(t, "a Warning event naming the binding failure", func(ctx context.Context) error {
		reasons, err := eventReasons(ctx, tj)
		if err != nil || !slices.Contains(reasons, "Warning/FailedBinding") {
			return fmt.Errorf("events %v (%v)", reasons, err)
		}
		return nil
	})

	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-volume"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("50Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + ns}},
		},
	}
	if err := env.Client.Create(context.Background(), pv); err != nil {
		t.Fatal(err)
	}
	waitForClaimCondition(t, key, metav1.ConditionTrue, "Bound", "claim keep-checkpoints is bound to volume "+pv.Name)

	if err := env.Client.Delete(context.Background(), tj); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the job's Job collected", func(ctx context.Context) error {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: names.JobName(tj)}, &batchv1.Job{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("job still there (%v)", err)
		}
		return nil
	})
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(claim), claim); err != nil || claim.DeletionTimestamp != nil {
		t.Errorf("the claim went with the TrainingJob (%v, deletion %v); checkpoints must be kept by default", err, claim.DeletionTimestamp)
	}
}

// TestCheckpointClaimDeletedWithTheJob: claimRetentionPolicy Delete gives the claim an owner reference;
// a StorageClass that does not exist is reported with the binder's Warning; deleting the TrainingJob
// deletes the claim.
func TestCheckpointClaimDeletedWithTheJob(t *testing.T) {
	ns := newNamespace(t)
	startControllerManager(t, "persistentvolume-binder", "pvc-protection")
	startOperator(t, ns)
	tj := tjtest.NewTJ(ns, "scratch").GPUs(0).Workers(1).Checkpoints(&mlv1.CheckpointStorage{
		Type: mlv1.StoragePVC, Size: ptr.To(resource.MustParse("1Gi")), StorageClassName: ptr.To("fast"), ClaimRetentionPolicy: mlv1.ClaimDelete,
	}).Obj()
	if err := env.Client.Create(context.Background(), tj); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tj)
	waitForClaimCondition(t, key, metav1.ConditionFalse, "ProvisioningFailed",
		`claim scratch-checkpoints (ReadWriteOnce, 1Gi, StorageClass "fast") is not bound`, `storageclass.storage.k8s.io "fast" not found`)
	claim := &corev1.PersistentVolumeClaim{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "scratch-checkpoints"}, claim); err != nil {
		t.Fatal(err)
	}
	if owner := metav1.GetControllerOf(claim); owner == nil || owner.UID != tj.UID {
		t.Errorf("claim owner %+v, want the TrainingJob", owner)
	}
	if err := env.Client.Get(context.Background(), key, tj); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(context.Background(), tj); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the claim deleted with the TrainingJob", func(ctx context.Context) error {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(claim), claim)
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("claim still there (%v, finalizers %v)", err, claim.Finalizers)
		}
		return nil
	})
}

// TestOperatorDefaultCheckpointStorage: with the operator's default storage set to an S3 prefix, a job
// without a storage section writes there (CHECKPOINT_URI) with the default's identity, and no claim is
// made.
func TestOperatorDefaultCheckpointStorage(t *testing.T) {
	ns := newNamespace(t)
	startControllerManager(t)
	def, err := builders.ParseStorageURI("s3://team-ckpt/runs?region=eu-west-1&secret=s3-creds")
	if err != nil {
		t.Fatal(err)
	}
	startOperator(t, ns, func(c *controllers.Config) { c.Builders.DefaultCheckpointStorage = def })
	tj := tjtest.NewTJ(ns, "to-s3").GPUs(0).Checkpoints(nil).Obj()
	if err := env.Client.Create(context.Background(), tj); err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{}
	eventually(t, "the workers writing to the default S3 prefix", func(ctx context.Context) error {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: names.JobName(tj)}, job); err != nil {
			return err
		}
		env := map[string]string{}
		for _, e := range job.Spec.Template.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		if env["CHECKPOINT_URI"] != "s3://team-ckpt/runs/"+ns+"/to-s3/"+string(tj.UID) || env["AWS_REGION"] != "eu-west-1" {
			return fmt.Errorf("env %v", env)
		}
		from := job.Spec.Template.Spec.Containers[0].EnvFrom
		if len(from) != 1 || from[0].SecretRef == nil || from[0].SecretRef.Name != "s3-creds" {
			return fmt.Errorf("envFrom %+v", from)
		}
		return nil
	})
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(tj), tj); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(def, tj.Status.CheckpointStorage); diff != "" {
		t.Errorf("status.checkpointStorage (-want +got):\n%s", diff)
	}
	var claims corev1.PersistentVolumeClaimList
	if err := env.Client.List(context.Background(), &claims, client.InNamespace(ns)); err != nil || len(claims.Items) != 0 {
		t.Errorf("claims %d (%v), want none", len(claims.Items), err)
	}
}
