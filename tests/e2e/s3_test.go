package e2e

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/storetest"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/node"
)

// startS3 runs versitygw (hack/objstore.sh builds it; $VERSITYGW) with a bucket, until the test ends.
func startS3(t *testing.T, bucket string) (*storetest.VersityGW, *checkpoint.S3Store) {
	t.Helper()
	gw := storetest.NewVersityGW(t, "e2e-access", "e2e-secret-key")
	return gw, gw.Bucket(bucket)
}

// s3Keys returns a Secret named name holding the test server's access key and secretKey (e2eSecretKey: the
// right one).
func s3Keys(ns, name, secretKey string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		StringData: map[string]string{checkpoint.SecretS3AccessKey: "e2e-access", checkpoint.SecretS3SecretKey: secretKey}}
}

const e2eSecretKey = "e2e-secret-key"

// TestCheckpointsOnS3: the example trainer writes its checkpoints to an S3 bucket (a real S3-compatible
// server, reached with the storage Secret's keys), rank 0's agent rotates them, and a killed rank 0
// resumes from the newest one (see objectStorageScenario).
func TestCheckpointsOnS3(t *testing.T) {
	t.Parallel() // its own namespace: runs beside the other long tests once the rest are done
	ns := newNamespace(t)
	gw, store := startS3(t, "ckpt")
	create(t, s3Keys(ns, "s3-keys", e2eSecretKey))
	objectStorageScenario(t, ns, store, "s3://ckpt/", &mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "ckpt", Prefix: "runs",
		Endpoint: gw.Endpoint, SecretRef: &corev1.LocalObjectReference{Name: "s3-keys"}})
	assertNoSecretLeak(t, ns, "e2e-secret-key")
}

// assertNoSecretLeak checks a run's every artifact for a Secret's value: the operator's, the control
// plane's and the pods' logs, and the namespace's TrainingJobs (status included), ConfigMaps, Jobs and
// events. Only the Secret itself may hold it (and a Secret volume's files, which are the Secret, and
// etcd's data, where the API server stores it).
func assertNoSecretLeak(t *testing.T, ns, secret string) {
	t.Helper()
	root := filepath.Dir(stack.DataRoot)
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			if d != nil && d.IsDir() && (d.Name() == "volumes" || path == stack.Cluster.EtcdDir()) {
				return filepath.SkipDir
			}
			return err
		}
		if strings.HasSuffix(path, ".kubeconfig") || d.Name() == "kubeconfig" || filepath.Base(filepath.Dir(path)) == "bin" {
			return nil
		}
		data, err := os.ReadFile(path)
		files++
		if err == nil && strings.Contains(string(data), secret) {
			t.Errorf("the storage Secret's value is in %s", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 10 {
		t.Fatalf("only %d files under %s: the logs were not found", files, root)
	}
	for _, l := range []client.ObjectList{
		&mlv1.TrainingJobList{}, &corev1.ConfigMapList{}, &batchv1.JobList{}, &eventsv1.EventList{}, &corev1.PodList{},
	} {
		if err := stack.Client.List(ctx, l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(l)
		if strings.Contains(string(data), secret) {
			t.Errorf("the storage Secret's value is in the namespace's %T", l)
		}
	}
}

// TestWrongS3CredentialsAreReported: with keys the S3 server refuses, the job says so — the condition
// CheckpointStorageReady=False (StorageError, the server's message) and a Warning event — instead of
// failing silently; the agent keeps running and reporting. (The trainer exits 1 when it cannot list its
// checkpoints: under the default restartPolicy Gang that fails the run at once with the trainer's message;
// here OnFailure restarts it in place, so the agent's own report is what is seen.)
func TestWrongS3CredentialsAreReported(t *testing.T) {
	ns, name := newNamespace(t), "badkeys"
	gw, _ := startS3(t, "ckpt")
	endpoint := gw.Endpoint
	create(t, s3Keys(ns, "s3-keys", "not-the-secret"))
	create(t, trainerJob(ns, name, 1, 20, "--epoch-delay=1s").BackoffLimit(100, mlv1.RestartOnFailure).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Frequency: ptr.To[int32](10), Storage: &mlv1.CheckpointStorage{
			Type: mlv1.StorageS3, S3Bucket: "ckpt", Endpoint: endpoint, SecretRef: &corev1.LocalObjectReference{Name: "s3-keys"}}}
	}).Obj())
	eventually(t, 2*time.Minute, "CheckpointStorageReady=False StorageError and a Warning event", func() error {
		c := condition(getTJ(t, ns, name), "CheckpointStorageReady")
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "StorageError" || !strings.Contains(c.Message, "SignatureDoesNotMatch") {
			return fmt.Errorf("condition %+v", c)
		}
		events := &eventsv1.EventList{}
		if err := stack.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "StorageError" && e.Note == c.Message {
				return nil
			}
		}
		return fmt.Errorf("no StorageError event among %d", len(events.Items))
	})
	if err := stack.Client.Delete(ctx, getTJ(t, ns, name)); err != nil {
		t.Fatal(err)
	}
}

// TestObjectStorageDown: the S3 server goes down while a run writes and rotates checkpoints, and stays
// down through a gang restart. The TrainingJob says so (CheckpointStorageReady=False, StorageError, a
// Warning event) while the run goes on (the trainer skips a checkpoint it cannot write); nothing is
// deleted and RESUME_FROM keeps naming a checkpoint that exists; the new attempt's rank 0 waits for the
// storage, resumes from RESUME_FROM once it is back, and the run completes with the condition True again.
func TestObjectStorageDown(t *testing.T) {
	t.Parallel() // its own namespace: runs beside the other long tests once the rest are done
	ns, name := newNamespace(t), "outage"
	gw, _ := startS3(t, "ckpt")
	create(t, s3Keys(ns, "s3-keys", e2eSecretKey))
	tj := trainerJob(ns, name, 2, 60, "--epoch-delay=300ms").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Frequency: ptr.To[int32](1), Retention: ptr.To[int32](2),
			Storage: &mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "ckpt", Endpoint: gw.Endpoint,
				SecretRef: &corev1.LocalObjectReference{Name: "s3-keys"}}}
	}).Obj()
	create(t, tj)
	pids := runningPIDs(t, ns, name, 2)
	prefix := "s3://ckpt/" + builders.CheckpointRoot(tj) + "/"
	seen := waitForResumeFrom(t, ns, name, prefix, 2)
	gw.Stop()
	eventually(t, time.Minute, "CheckpointStorageReady=False while the run goes on", func() error {
		got := getTJ(t, ns, name)
		c := condition(got, mlv1.ConditionCheckpointStorageReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "StorageError" || got.Status.State != mlv1.StateRunning {
			return fmt.Errorf("state %s, condition %+v", got.Status.State, c)
		}
		return nil
	})
	resumeFrom := resumeFromValue(t, ns, name)
	marker := filepath.Join(gw.Data(), "ckpt", strings.TrimPrefix(resumeFrom, "s3://ckpt/"), checkpoint.Marker)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("RESUME_FROM %s does not exist during the outage: %v", resumeFrom, err)
	}
	if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil { // a gang restart while the storage is down
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the new attempt's rank 0 waiting for the storage", func() error {
		log, err := logOf(ns, name+"-worker-0-*")
		if err != nil || getTJ(t, ns, name).Status.Attempt != 1 || !strings.Contains(log, "storage unreachable, retrying") {
			return fmt.Errorf("attempt %d, log: %v %q", getTJ(t, ns, name).Status.Attempt, err, log)
		}
		return nil
	})
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("RESUME_FROM %s was deleted during the outage: %v", resumeFrom, err)
	}
	gw.Start()
	done := waitForState(t, ns, name, mlv1.StateCompleted, 3*time.Minute)
	assertResumed(t, ns, name, prefix, seen, 60)
	if c := condition(done, mlv1.ConditionCheckpointStorageReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("after the outage: CheckpointStorageReady %+v", c)
	}
	assertEvent(t, ns, "StorageError", "connection refused")
	t.Logf("outage: RESUME_FROM %s kept; restartCount %d, attempt %d", resumeFrom, done.Status.RestartCount, done.Status.Attempt)
}

func resumeFromValue(t *testing.T, ns, name string) string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-config"}, cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data[names.ResumeFromKey]
}

// logOf returns the trainer log of the newest pod matching the glob, or an error while there is none.
func logOf(ns, pod string) (string, error) {
	path, err := node.LogPath(stack.DataRoot, ns, pod, names.ContainerName)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(path)
	return string(data), err
}
