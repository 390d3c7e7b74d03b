package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/node"
)

// TestCheckpointsWithoutStorage: `checkpoint: {enabled: true, frequency: 1}` and nothing else. The operator
// creates the claim <name>-checkpoints, the local stack's default StorageClass provisions it, the trainer
// writes a checkpoint every epoch; rank 0 is killed, the ranks restart and resume from the newest
// checkpoint. Deleting the TrainingJob keeps the claim and the checkpoints on it.
func TestCheckpointsWithoutStorage(t *testing.T) {
	t.Parallel() // its own namespace: runs beside the other long tests once the rest are done
	ns, name := newNamespace(t), "nostorage"
	// 20 epochs: on a loaded machine 12 of 300 ms ended before rank 0 could be killed (one CI run).
	create(t, trainerJob(ns, name, 2, 20, "--epoch-delay=300ms").Checkpoints(nil).Obj())
	pids := runningPIDs(t, ns, name, 2)
	dir := runDir(t, name+"-checkpoints", ns, name)
	seen := waitForResumeFrom(t, ns, name, dir+"/", 2)
	if c := condition(getTJ(t, ns, name), mlv1.ConditionCheckpointClaimBound); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("CheckpointClaimBound %+v, want True", c)
	}
	claim := &corev1.PersistentVolumeClaim{}
	if err := stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-checkpoints"}, claim); err != nil {
		t.Fatal(err)
	}
	if got := ptr.Deref(claim.Spec.StorageClassName, ""); got != node.DefaultStorageClass {
		t.Errorf("claim's StorageClass %q, want the default %q", got, node.DefaultStorageClass)
	}
	killRank0(t, ns, name, pids[0])
	assertResumed(t, ns, name, dir+"/", seen, 20)

	if err := stack.Client.Delete(ctx, getTJ(t, ns, name)); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the worker pods gone with the TrainingJob", func() error {
		if p := workerPods(t, ns, name); len(p) != 0 {
			return fmt.Errorf("%d pods left", len(p))
		}
		return nil
	})
	if err := stack.Client.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil || claim.DeletionTimestamp != nil {
		t.Errorf("the claim went with the TrainingJob (%v)", err)
	}
	if left := completeIn(dir); len(left) == 0 {
		t.Errorf("no checkpoint left in %s after the TrainingJob was deleted", dir)
	}
}

// TestCheckpointClaimReadWriteManyUnsupported: two ranks need a ReadWriteMany claim; a StorageClass whose
// driver supports only ReadWriteOnce refuses to provision it. The TrainingJob does not wait silently:
// CheckpointClaimBound is False with the driver's ProvisioningFailed text, and a Warning event says so.
func TestCheckpointClaimReadWriteManyUnsupported(t *testing.T) {
	ns, name := newNamespace(t), "rwx"
	class := rwoOnlyClass(t, ns)
	create(t, trainerJob(ns, name, 2, 3).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true),
			Storage: &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, StorageClassName: ptr.To(class.Name), ClaimRetentionPolicy: mlv1.ClaimDelete}}
	}).Obj())
	want := fmt.Sprintf("failed to provision volume with StorageClass %q: access mode ReadWriteMany is not supported", class.Name)
	eventually(t, time.Minute, "CheckpointClaimBound False with the driver's message, and a Warning event", func() error {
		tj := getTJ(t, ns, name)
		c := condition(tj, mlv1.ConditionCheckpointClaimBound)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "ProvisioningFailed" || !strings.Contains(c.Message, want) {
			return fmt.Errorf("condition %+v (state %s)", c, tj.Status.State)
		}
		if tj.Status.State == mlv1.StateRunning {
			return fmt.Errorf("running without a checkpoint volume")
		}
		events := &eventsv1.EventList{}
		if err := stack.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Regarding.Kind == "TrainingJob" && e.Type == corev1.EventTypeWarning && e.Reason == "ProvisioningFailed" &&
				strings.Contains(e.Note, want) {
				return nil
			}
		}
		return fmt.Errorf("no Warning event on the TrainingJob names it")
	})
	if err := stack.Client.Delete(ctx, getTJ(t, ns, name)); err != nil {
		t.Fatal(err)
	}
}

// rwoOnlyClass creates a StorageClass (deleted after the test) whose driver provisions ReadWriteOnce
// volumes only: a claim asking for ReadWriteMany fails to provision.
func rwoOnlyClass(t *testing.T, ns string) *storagev1.StorageClass {
	t.Helper()
	class := &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{Name: ns + "-rwo-only"},
		Provisioner: node.Provisioner,
		Parameters:  map[string]string{node.AccessModesParameter: "ReadWriteOnce"},
	}
	create(t, class)
	t.Cleanup(func() { _ = stack.Client.Delete(ctx, class) })
	return class
}
