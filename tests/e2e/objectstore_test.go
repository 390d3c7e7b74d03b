package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/api/option"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// TestCheckpointsOnGCS: the same scenario on the GCS emulator, which the pods reach through
// STORAGE_EMULATOR_HOST (set by the process nodes, as a cluster provides its identity to pods).
func TestCheckpointsOnGCS(t *testing.T) {
	t.Parallel() // its own namespace: runs beside the other long tests once the rest are done
	ns := newNamespace(t)
	gcs.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: "ckpt-" + ns})
	store, err := checkpoint.NewGCSStore(context.Background(), "ckpt-"+ns,
		option.WithEndpoint(gcs.URL()+"/storage/v1/"), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	objectStorageScenario(t, ns, store, "gs://ckpt-"+ns+"/", &mlv1.CheckpointStorage{Type: mlv1.StorageGCS, GCSBucket: "ckpt-" + ns})
}

var resumedURI = regexp.MustCompile(`resuming from (\S+/checkpoint-epoch-(\d+)(?:-step-\d+)?) \(epoch (\d+)`)

// objectStorageScenario: 2 ranks of the example trainer write a checkpoint every epoch to CHECKPOINT_URI
// in object storage, retention 2. While they run, status.checkpoint and the ConfigMap's RESUME_FROM follow
// the newest checkpoint. Rank 0 is killed; the gang restarts, and rank 0 resumes from RESUME_FROM,
// at least as new as the newest checkpoint the operator had seen when it was killed; the epochs continue
// and the loss keeps falling. At the end the newest 2 checkpoints are left in the bucket (with at most the
// two a restart could still have resumed from), and the status names the last one.
func objectStorageScenario(t *testing.T, ns string, store checkpoint.Store, uriPrefix string, storage *mlv1.CheckpointStorage) {
	const name, epochs = "ckpt", 12
	tj := trainerJob(ns, name, 2, epochs, "--epoch-delay=400ms").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Frequency: ptr.To[int32](1), Retention: ptr.To[int32](2),
			Storage: storage}
	}).Obj()
	create(t, tj)
	pids := runningPIDs(t, ns, name, 2)
	root := builders.CheckpointRoot(tj)
	seen := waitForResumeFrom(t, ns, name, uriPrefix+root+"/", 3)
	killRank0(t, ns, name, pids[0])
	assertResumed(t, ns, name, uriPrefix+root+"/", seen, epochs)
	want := []string{checkpoint.Dir(epochs - 1), checkpoint.Dir(epochs)}
	// Besides the newest 2, at most the two a restart could still have been told to resume from when rank 0's
	// agent stopped (assertRotatedAtTheEnd), and the status counts what is left.
	eventually(t, time.Minute, "the newest 2 checkpoints left, named by the status", func() error {
		left, err := listCheckpoints(store, root)
		if err != nil {
			return err
		}
		if len(left) < len(want) || len(left) > len(want)+2 {
			return fmt.Errorf("bucket: %v, want %v and at most 2 older ones", left, want)
		}
		if diff := cmp.Diff(want, left[len(left)-len(want):]); diff != "" {
			return fmt.Errorf("bucket's newest (-want +got):\n%s", diff)
		}
		if c := getTJ(t, ns, name).Status.Checkpoint; c == nil || c.Latest != uriPrefix+root+"/"+want[1] || int(c.Count) != len(left) {
			return fmt.Errorf("status.checkpoint %+v", c)
		}
		return nil
	})
	// The agent's final report, which status.checkpoint takes once the pods stopped.
	var agent *corev1.ContainerStateTerminated
	for _, cs := range workerPods(t, ns, name)[0].Status.InitContainerStatuses {
		if cs.Name == names.AgentContainerName {
			agent = cs.State.Terminated
		}
	}
	if agent == nil || !strings.Contains(agent.Message, `"latest":"`+uriPrefix+root+"/"+want[1]+`"`) {
		t.Errorf("rank 0's agent stopped with %+v; want a final report naming %s", agent, want[1])
	}
}

// waitForResumeFrom waits until the ConfigMap's RESUME_FROM names the checkpoint status.checkpoint calls
// the newest, at epoch min or later, and returns that epoch.
func waitForResumeFrom(t *testing.T, ns, name, prefix string, min int) int {
	t.Helper()
	var epoch int
	eventually(t, 2*time.Minute, "RESUME_FROM following status.checkpoint", func() error {
		tj := getTJ(t, ns, name)
		c := tj.Status.Checkpoint
		cm := &corev1.ConfigMap{}
		if err := stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: names.ConfigMapName(tj)}, cm); err != nil {
			return err
		}
		if c == nil || c.LatestEpoch < int32(min) || c.Latest != prefix+checkpoint.Dir(int(c.LatestEpoch)) ||
			cm.Data[names.ResumeFromKey] != c.Latest {
			return fmt.Errorf("status.checkpoint %+v, RESUME_FROM %q", c, cm.Data[names.ResumeFromKey])
		}
		epoch = int(c.LatestEpoch)
		return nil
	})
	return epoch
}

// killRank0 SIGKILLs rank 0's trainer and waits for the job to complete after the restart.
func killRank0(t *testing.T, ns, name string, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if done := waitForState(t, ns, name, mlv1.StateCompleted, 3*time.Minute); done.Status.RestartCount == 0 {
		t.Errorf("restartCount 0 after killing rank 0")
	}
}

// assertResumed checks that rank 0 resumed from a checkpoint under prefix at epoch seen or later, did not
// start over, and lowered the loss every epoch after it up to the last.
func assertResumed(t *testing.T, ns, name, prefix string, seen, epochs int) {
	t.Helper()
	log := rankLog(t, ns, name, 0)
	m := resumedURI.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("rank 0 did not resume:\n%s", log)
	}
	from, _ := strconv.Atoi(m[2])
	after := log[strings.Index(log, m[0]):]
	if !strings.HasPrefix(m[1], prefix) || from < seen || strings.Contains(after, fmt.Sprintf("epoch 1/%d ", epochs)) {
		t.Errorf("rank 0 resumed from %s; want a checkpoint under %s at epoch %d or later, without starting over:\n%s", m[1], prefix, seen, after)
	}
	assertLossFalls(t, after, from+1, epochs)
}

// listCheckpoints names the checkpoints (complete or not) under root.
func listCheckpoints(s checkpoint.Store, root string) ([]string, error) {
	objs, err := s.List(ctx, root+"/")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range checkpoint.Scan(root, objs) {
		out = append(out, c.Name)
	}
	return out, nil
}
