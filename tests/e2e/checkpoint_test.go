package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/node"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
)

func claim(ns string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "checkpoints", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

func withPVCCheckpoints(retention int32) func(*mlv1.TrainingJob) {
	return func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Frequency: ptr.To[int32](1), Retention: ptr.To(retention),
			Storage: &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "checkpoints"}}
	}
}

// runDir returns where the job's run keeps its checkpoints on the claim, as the process node stores them:
// the claim's directory and the job's checkpoint root (its name's and its run ID).
func runDir(t *testing.T, claim, ns, name string) string {
	t.Helper()
	return filepath.Join(node.ClaimDir(stack.DataRoot, ns, claim), builders.CheckpointRoot(getTJ(t, ns, name)))
}

// completeCheckpoints lists the job's complete checkpoints on the claim "checkpoints".
func completeCheckpoints(t *testing.T, ns, name string) []string {
	t.Helper()
	return completeIn(runDir(t, "checkpoints", ns, name))
}

// completeIn lists the complete checkpoints in dir.
func completeIn(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), checkpoint.Marker)); err == nil {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// TestCheckpointRotationOnPVC: the trainer writes a checkpoint every epoch; rank 0's checkpoint agent
// keeps the newest 2, status.checkpoint follows, and after the run only the last 2 are left.
func TestCheckpointRotationOnPVC(t *testing.T) {
	ns, name := newNamespace(t), "rotate"
	create(t, claim(ns), trainerJob(ns, name, 2, 8, "--epoch-delay=300ms").With(withPVCCheckpoints(2)).Obj())
	eventually(t, 2*time.Minute, "status.checkpoint with 2 kept", func() error {
		tj := getTJ(t, ns, name)
		c := tj.Status.Checkpoint
		if c == nil || c.Count != 2 || c.LatestEpoch < 3 ||
			!strings.HasSuffix(c.Latest, fmt.Sprintf("checkpoint-epoch-%d", c.LatestEpoch)) || c.SizeBytes == 0 {
			return fmt.Errorf("status.checkpoint %+v (state %s)", c, tj.Status.State)
		}
		return nil
	})
	waitForState(t, ns, name, mlv1.StateCompleted, 2*time.Minute)
	assertRotatedAtTheEnd(t, completeCheckpoints(t, ns, name), []string{"checkpoint-epoch-7", "checkpoint-epoch-8"})
	// The last scrape may have been before the last epoch: the finished run's status agrees with itself.
	eventually(t, 30*time.Second, "a completed run at epoch 8/8, 100%, newest checkpoint epoch 8", func() error {
		if got, want := stacktest.Settled(getTJ(t, ns, name).Status), "100% epoch 8/8 checkpoint 8"; got != want {
			return fmt.Errorf("status says %q, want %q", got, want)
		}
		return nil
	})
}

// assertRotatedAtTheEnd checks what a finished run left: the newest checkpoints (retention of them), and
// besides them at most the two a restart could still have been told to resume from when rank 0's agent
// stopped (docs/checkpoints.md): what RESUME_FROM named as the agent last heard, and the newest it had
// reported whose acknowledgement had not come back yet. With reads as fast as the epochs, whether they
// are there depends on the machine's load.
func assertRotatedAtTheEnd(t *testing.T, left, newest []string) {
	t.Helper()
	if len(left) < len(newest) || len(left) > len(newest)+2 {
		t.Fatalf("checkpoints left on the claim: %v, want %v and at most 2 older ones", left, newest)
	}
	if diff := cmp.Diff(newest, left[len(left)-len(newest):]); diff != "" {
		t.Errorf("newest checkpoints left on the claim (-want +got):\n%s", diff)
	}
}

// TestRestartResumesFromTheNewestCheckpoint: rank 0 is killed mid-run; the whole gang restarts
// (restartPolicy Gang, the default), rank 0 resumes from RESUME_FROM, the newest complete checkpoint the
// operator had seen (or a newer one), the epochs continue from there and the loss keeps falling.
func TestRestartResumesFromTheNewestCheckpoint(t *testing.T) {
	t.Parallel() // its own namespace: runs beside the other long tests once the rest are done
	ns, name := newNamespace(t), "resume"
	create(t, claim(ns), trainerJob(ns, name, 2, 12, "--epoch-delay=300ms").With(withPVCCheckpoints(3)).Obj())
	pids := runningPIDs(t, ns, name, 2)
	prefix := runDir(t, "checkpoints", ns, name) + "/"
	seen := waitForResumeFrom(t, ns, name, prefix, 2)
	killRank0(t, ns, name, pids[0])
	assertResumed(t, ns, name, prefix, seen, 12)
}

// TestResumeFromIsCheckedBeforeWorkersStart: with resumeFrom naming a checkpoint that does not exist, the
// resume check fails before any trainer starts and the TrainingJob fails naming the URI; with resumeFrom
// naming a complete checkpoint the trainer resumes from it.
func TestResumeFromIsCheckedBeforeWorkersStart(t *testing.T) {
	ns := newNamespace(t)
	create(t, claim(ns))
	from := fmt.Sprintf("/checkpoints/%s/old/checkpoint-epoch-4", ns)
	resumeFrom := func(tj *mlv1.TrainingJob) { tj.Spec.Checkpoint.ResumeFrom = from }

	create(t, trainerJob(ns, "missing", 1, 6, "--epoch-delay=100ms").With(withPVCCheckpoints(2)).With(resumeFrom).Obj())
	// The process node rewrites the container path in the check's arguments to the claim's host directory.
	hostFrom := filepath.Join(node.ClaimDir(stack.DataRoot, ns, "checkpoints"), ns, "old", "checkpoint-epoch-4")
	want := "container resume-check) exited with code 1: manager: resumeFrom " + hostFrom + " does not exist"
	eventually(t, 2*time.Minute, "a Warning event naming the missing checkpoint", func() error {
		events := &eventsv1.EventList{}
		if err := stack.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, want) {
				return nil
			}
		}
		var notes []string
		for _, e := range events.Items {
			notes = append(notes, e.Type+"/"+e.Reason+": "+e.Note)
		}
		return fmt.Errorf("no event names it:\n%s", strings.Join(notes, "\n"))
	})
	waitForState(t, ns, "missing", mlv1.StateFailed, 2*time.Minute)
	if _, err := node.LogPath(stack.DataRoot, ns, "missing-worker-0-*", "trainer"); err == nil {
		t.Errorf("the trainer ran although resumeFrom is missing")
	}

	dir := hostFrom
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	model := `{"epoch":4,"weights":[0,0,0,0,0,0,0,0,0],"loss":0.7}`
	for f, data := range map[string]string{"model.json": model, checkpoint.Marker: `{"epoch":4}`} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	create(t, trainerJob(ns, "present", 1, 6, "--epoch-delay=100ms").With(withPVCCheckpoints(2)).With(resumeFrom).Obj())
	waitForState(t, ns, "present", mlv1.StateCompleted, 2*time.Minute)
	log := rankLog(t, ns, "present", 0)
	if !strings.Contains(log, "resuming from "+dir) || strings.Contains(log, "epoch 1/6 ") || !strings.Contains(log, "epoch 5/6 ") {
		t.Errorf("rank 0 did not resume from resumeFrom at epoch 4:\n%s", log)
	}
}

// TestSuspendResumeContinuesFromTheNewestCheckpoint: a running job is suspended (its pods are deleted)
// and resumed; the new pods get RESUME_FROM from the ConfigMap, naming the newest checkpoint the operator
// had seen, and training continues from it instead of starting over.
func TestSuspendResumeContinuesFromTheNewestCheckpoint(t *testing.T) {
	t.Parallel() // its own namespace: runs beside the other long tests once the rest are done
	ns, name := newNamespace(t), "suspend"
	create(t, claim(ns), trainerJob(ns, name, 2, 30, "--epoch-delay=300ms").With(withPVCCheckpoints(2)).Obj())
	runningPIDs(t, ns, name, 2)
	prefix := runDir(t, "checkpoints", ns, name) + "/"
	seen := waitForResumeFrom(t, ns, name, prefix, 3)
	setSuspend(t, ns, name, true)
	waitForState(t, ns, name, mlv1.StateSuspended, time.Minute)
	eventually(t, time.Minute, "no worker pods", func() error {
		if p := workerPods(t, ns, name); len(p) != 0 {
			return fmt.Errorf("%d pods left", len(p))
		}
		return nil
	})
	setSuspend(t, ns, name, false)
	waitForState(t, ns, name, mlv1.StateCompleted, 3*time.Minute)
	assertResumed(t, ns, name, prefix, seen, 30)
}

func setSuspend(t *testing.T, ns, name string, suspend bool) {
	t.Helper()
	tj := getTJ(t, ns, name)
	patch := client.MergeFrom(tj.DeepCopy())
	tj.Spec.Suspend = ptr.To(suspend)
	if err := stack.Client.Patch(ctx, tj, patch); err != nil {
		t.Fatal(err)
	}
}

// TestSameNameStartsFresh: a TrainingJob created again under a deleted one's name starts fresh: its rank 0
// resumes from nothing although the first run's checkpoints are kept on the claim, and the status and one
// event name them. A third run under the name continues the second explicitly, through resumeFrom.
func TestSameNameStartsFresh(t *testing.T) {
	t.Parallel() // its own namespace: runs beside the other long tests once the rest are done
	ns, name := newNamespace(t), "same"
	create(t, claim(ns))
	every2 := func(tj *mlv1.TrainingJob) { tj.Spec.Checkpoint.Frequency = ptr.To[int32](2) }
	run := func(epochs int32, resumeFrom string) (*mlv1.TrainingJob, string) {
		t.Helper()
		tj := trainerJob(ns, name, 2, epochs, "--epoch-delay=100ms").With(withPVCCheckpoints(2)).With(every2).With(func(tj *mlv1.TrainingJob) {
			tj.Spec.Checkpoint.ResumeFrom = resumeFrom
		}).Obj()
		create(t, tj)
		waitForState(t, ns, name, mlv1.StateCompleted, 2*time.Minute)
		var done *mlv1.TrainingJob
		eventually(t, time.Minute, "the final checkpoint in the status", func() error {
			done = getTJ(t, ns, name)
			if c := done.Status.Checkpoint; c == nil || c.LatestEpoch != epochs {
				return fmt.Errorf("status.checkpoint %+v", c)
			}
			return nil
		})
		log := rankLog(t, ns, name, 0)
		if err := stack.Client.Delete(ctx, done); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "the TrainingJob and its pods gone", func() error {
			if p := workerPods(t, ns, name); len(p) != 0 {
				return fmt.Errorf("%d pods left", len(p))
			}
			if err := stack.Client.Get(ctx, client.ObjectKeyFromObject(done), &mlv1.TrainingJob{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("the TrainingJob is still there (%v)", err)
			}
			return nil
		})
		return done, log
	}
	first, _ := run(6, "")
	// As the agent sees it: /checkpoints/... in a container, the claim's host directory on a process node.
	firstNewest := "/" + builders.CheckpointRoot(first) + "/checkpoint-epoch-6"

	second, log := run(4, "")
	if strings.Contains(log, "resuming from") {
		t.Errorf("the second run resumed from a checkpoint (the deleted run's?):\n%s", log)
	}
	if !strings.Contains(log, "epoch 1/4 ") {
		t.Errorf("the second run did not train from epoch 1:\n%s", log)
	}
	if second.Status.RunID == "" || second.Status.RunID == first.Status.RunID {
		t.Errorf("runIDs %q then %q, want two different ones", first.Status.RunID, second.Status.RunID)
	}
	var earlier []string
	if c := second.Status.Checkpoint; c != nil {
		earlier = c.EarlierRuns
	}
	if len(earlier) != 1 || !strings.HasSuffix(earlier[0], firstNewest) {
		t.Errorf("status.checkpoint.earlierRuns %q, want the first run's newest, ...%s", earlier, firstNewest)
	}
	if got := earlierRunEvents(t, second); len(got) != 1 || !strings.Contains(got[0], firstNewest) {
		t.Errorf("EarlierRunsFound events %q, want one naming %s", got, firstNewest)
	}

	secondNewest := "/checkpoints/" + builders.CheckpointRoot(second) + "/checkpoint-epoch-4"
	_, log = run(6, secondNewest)
	if !strings.Contains(log, "epoch 4, step 0") || strings.Contains(log, "epoch 1/6 ") {
		t.Errorf("the third run did not continue the second from its epoch 4 (resumeFrom %s):\n%s", secondNewest, log)
	}
}

// earlierRunEvents returns the notes of the EarlierRunsFound events of the job (this run, by its UID).
func earlierRunEvents(t *testing.T, tj *mlv1.TrainingJob) []string {
	t.Helper()
	events := &eventsv1.EventList{}
	if err := stack.Client.List(ctx, events, client.InNamespace(tj.Namespace)); err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, e := range events.Items {
		if e.Reason == "EarlierRunsFound" && e.Regarding.UID == tj.UID {
			notes = append(notes, e.Note)
		}
	}
	return notes
}
