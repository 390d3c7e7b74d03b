//go:build frameworks

// Package frameworks runs the Python examples with the real frameworks (Debian's PyTorch and XGBoost,
// installed by hack/frameworks.sh) as TrainingJobs on the local stack: the operator's environment
// contract, resolved by the process node as the kubelet would, is all the scripts get. `make
// test-frameworks` runs it (the build tag keeps it out of `make test`: the packages take minutes to
// install).
package frameworks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/node"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

var (
	stack *local.Stack
	ctx   = context.Background()
)

// TestMain puts the frameworks' python3 (FRAMEWORKS_PYTHON, printed by hack/frameworks.sh) first on the
// process nodes' PATH (torchrun comes with the same package).
func TestMain(m *testing.M) {
	python := os.Getenv("FRAMEWORKS_PYTHON")
	if python == "" {
		fmt.Fprintln(os.Stderr, "frameworks: FRAMEWORKS_PYTHON is not set: run make test-frameworks (hack/frameworks.sh installs the frameworks)")
		os.Exit(1)
	}
	shims, err := os.MkdirTemp("", "frameworks-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "frameworks:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(shims)
	if err := os.WriteFile(filepath.Join(shims, "python3"), []byte(fmt.Sprintf("#!/bin/sh\nexec %s \"$@\"\n", python)), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "frameworks:", err)
		os.Exit(1)
	}
	os.Exit(stacktest.Main(m, "frameworks", &stack, func(o *local.Options, bin string) {
		o.Path = []string{shims, bin}
		// The default runner, as its image has it (Dockerfile.runner).
		o.NodeEnv = map[string]string{"PYTHONPATH": filepath.Join(testenv.RepoRoot(), "runner")}
	}))
}

// torchrun --tee prefixes [default0]:
var checksum = regexp.MustCompile(`(?m)^(?:\[\w+\]:)?rank (\d+) of (\d+)\b.*?(?:checksum|model) (\S+)$`)

// TestPyTorchDDP: DDP with gloo on two CPU ranks, started with plain python (env://: RANK, WORLD_SIZE,
// MASTER_*) and with torchrun (only PET_*): the job completes, both ranks end with the same weights,
// rank 0's progress reaches the status and its checkpoints are seen.
func TestPyTorchDDP(t *testing.T) {
	for _, launcher := range [][]string{{"python3"}, {"torchrun"}} {
		t.Run(launcher[0], func(t *testing.T) {
			ns := newNamespace(t)
			tj := tjtest.NewTJ(ns, "ddp").Workers(2).GPUs(0).Epochs(4).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Image = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
				tj.Spec.Command = append(launcher, "examples/python/pytorch_ddp.py", "--epoch-delay=0.4")
				if launcher[0] == "torchrun" {
					// Debian's torch 1.13 on Python 3.11: torchrun's default --redirects/--tee "0" parse to None
					// (IntFlag iteration skips 0 since 3.11; fixed in torch 2.0), so it fails before starting
					// anything. Tee stdout instead; nothing else is given to torchrun but our PET_* variables.
					tj.Spec.Env = []corev1.EnvVar{{Name: "PET_REDIRECTS", Value: "1"}, {Name: "PET_TEE", Value: "1"}}
				}
				tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Frequency: ptr.To[int32](2)}
			}).Obj()
			create(t, tj)
			done := waitFinished(t, ns, "ddp", 4*time.Minute)
			logs := rankLogs(t, ns, "ddp", 2)
			assertSameChecksum(t, logs, 2)
			if launcher[0] == "python3" && !regexp.MustCompile(`\(local rank 0\) checksum`).MatchString(logs[0]) {
				t.Errorf("LOCAL_RANK is not 0 for a script started with plain python:\n%s", logs[0])
			}
			assertProgress(t, done, 4)
		})
	}
}

// TestTwoJobsOnOneMachine: two PyTorch jobs run at once on the process nodes, whose pods share the host's
// network: both rank 0s listen on the wildcard address and port 29500 (TCPStore), each only on its own pod
// address (the node's bind shim), and each job's ranks find their own rank 0.
func TestTwoJobsOnOneMachine(t *testing.T) {
	ns := newNamespace(t)
	for _, name := range []string{"left", "right"} {
		create(t, tjtest.NewTJ(ns, name).Workers(2).GPUs(0).Epochs(3).With(func(tj *mlv1.TrainingJob) {
			tj.Spec.Image = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
			tj.Spec.Command = []string{"python3", "examples/python/pytorch_ddp.py", "--epoch-delay=0.5"}
		}).Obj())
	}
	for _, name := range []string{"left", "right"} {
		waitFinished(t, ns, name, 4*time.Minute)
		assertSameChecksum(t, rankLogs(t, ns, name, 2), 2)
	}
}

// TestPyTorchElastic: an elastic job (1 to 4 workers) started with 2 is scaled to 4, then to 3, while it
// runs: the Job follows, torchrun's c10d rendezvous admits and drops workers (its workers restart from the
// newest checkpoint each time), the status follows, and the run completes with 3 workers.
func TestPyTorchElastic(t *testing.T) {
	ns := newNamespace(t)
	create(t, tjtest.NewTJ(ns, "elastic").Workers(2).GPUs(0).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Image = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
		tj.Spec.Command = []string{"torchrun", "examples/python/pytorch_ddp.py", "--epochs=40", "--epoch-delay=0.5"}
		tj.Spec.Elastic = &mlv1.ElasticSpec{MinWorkers: 1, MaxWorkers: 4}
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true)}
		// PET_REDIRECTS/PET_TEE: Debian's torchrun bug (see TestPyTorchDDP); a short last call, so that a
		// rendezvous below maxWorkers closes quickly.
		tj.Spec.Env = []corev1.EnvVar{{Name: "PET_REDIRECTS", Value: "1"}, {Name: "PET_TEE", Value: "1"},
			{Name: "PET_RDZV_CONF", Value: "last_call_timeout=2"}}
	}).Obj())
	// Each size is reached when some pod's global rank 0 trains with it (ranks move between pods at every
	// rendezvous); then the next change is made.
	for _, step := range []struct{ training, next int32 }{{training: 2, next: 4}, {training: 4, next: 3}} {
		waitLog(t, ns, "elastic", 4, fmt.Sprintf(`(?m)world=%d$`, step.training))
		tj := &mlv1.TrainingJob{}
		if err := stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "elastic"}, tj); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(tj.DeepCopy())
		tj.Spec.NumWorkers = step.next
		if err := stack.Client.Patch(ctx, tj, patch); err != nil {
			t.Fatalf("scaling to %d while %s: %v", step.next, tj.Status.State, err)
		}
		waitWorkers(t, ns, "elastic", func(w mlv1.WorkerCounts) bool { return w.Active == step.next })
	}
	waitLog(t, ns, "elastic", 4, `(?m)world=3$`)
	done := waitFinished(t, ns, "elastic", 5*time.Minute)
	if done.Status.Workers.Succeeded != 3 {
		t.Errorf("workers %+v, want 3 succeeded", done.Status.Workers)
	}
	// Every change of membership restarted the workers, which resumed from the newest checkpoint.
	waitLog(t, ns, "elastic", 3, `resumed from \S+/checkpoint-epoch-\d+ \(epoch \d+, step \d+\)`)
}

// waitLog waits until one of the first workers' logs matches re (a bound on a hang).
func waitLog(t *testing.T, ns, name string, workers int, re string) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		logs := rankLogs(t, ns, name, workers)
		for _, log := range logs {
			if regexp.MustCompile(re).MatchString(log) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no worker's log matches %s:\n%v", name, re, logs)
		}
	}
}

// waitWorkers waits until the job's status.workers satisfy ok (a bound on a hang).
func waitWorkers(t *testing.T, ns, name string, ok func(mlv1.WorkerCounts) bool) {
	t.Helper()
	tj := &mlv1.TrainingJob{}
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		if err := stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tj); err != nil {
			t.Fatal(err)
		}
		if ok(tj.Status.Workers) {
			return
		}
		if tj.Status.State == mlv1.StateFailed || time.Now().After(deadline) {
			t.Fatalf("%s: state %s (%s), workers %+v", name, tj.Status.State, tj.Status.FailureReason, tj.Status.Workers)
		}
	}
}

// TestPyTorchResume: a second job resumes from the first one's checkpoint (RESUME_FROM from
// checkpoint.resumeFrom, in a claim both jobs share) and trains only the epochs left.
func TestPyTorchResume(t *testing.T) {
	ns := newNamespace(t)
	create(t, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}})
	job := func(name string, epochs int32, resumeFrom string) *mlv1.TrainingJob {
		return tjtest.NewTJ(ns, name).Workers(2).GPUs(0).Epochs(epochs).With(func(tj *mlv1.TrainingJob) {
			tj.Spec.Image = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
			tj.Spec.Command = []string{"python3", "examples/python/pytorch_ddp.py", "--epoch-delay=0.2"}
			tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), ResumeFrom: resumeFrom,
				Storage: &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "shared"}}
		}).Obj()
	}
	create(t, job("first", 3, ""))
	first := builders.CheckpointRoot(waitFinished(t, ns, "first", 4*time.Minute)) // its run's directory
	create(t, job("second", 5, "pvc://"+first+"/checkpoint-epoch-3"))
	done := waitFinished(t, ns, "second", 4*time.Minute)
	logs := rankLogs(t, ns, "second", 2)
	for rank, log := range logs {
		// The claim's mount path, as the process node rewrites it to the claim's host directory.
		resumed := regexp.MustCompile(`resumed from \S*/shared/` + regexp.QuoteMeta(first) + `/checkpoint-epoch-3 \(epoch 3, step 0\)`)
		if !resumed.MatchString(log) {
			t.Errorf("rank %d did not resume from the first job's epoch 3:\n%s", rank, log)
		}
	}
	if regexp.MustCompile(`(?m)^epoch [123]/`).MatchString(logs[0]) || !regexp.MustCompile(`(?m)^epoch 5/5`).MatchString(logs[0]) {
		t.Errorf("rank 0 should train epochs 4 and 5 only:\n%s", logs[0])
	}
	assertSameChecksum(t, logs, 2)
	if epochOf(done) != 5 {
		t.Errorf("newest checkpoint of the second job: epoch %d, want 5", epochOf(done))
	}
}

// TestXGBoost: rank 0 runs the Rabit tracker and both ranks train one model together through the DMLC_*
// variables; boosting rounds are the progress epochs and the checkpoints.
func TestXGBoost(t *testing.T) {
	ns := newNamespace(t)
	tj := tjtest.NewTJ(ns, "xgb").Workers(2).GPUs(0).Framework(mlv1.FrameworkXGBoost).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Image = "python:3.12-slim"
		tj.Spec.Command = []string{"python3", "examples/python/xgboost_dist.py", "--rounds=10", "--round-delay=0.2"}
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Frequency: ptr.To[int32](5)}
	}).Obj()
	create(t, tj)
	done := waitFinished(t, ns, "xgb", 4*time.Minute)
	assertSameChecksum(t, rankLogs(t, ns, "xgb", 2), 2)
	assertProgress(t, done, 10)
}

// TestDefaultRunner: the minimal TrainingJob (model, dataset, numWorkers; no image, no command) trains
// with the default runner: a small CNN on the synthetic set on two ranks, and torchvision's ResNet-18 on
// FakeData; an unknown model fails at once, saying what the runner supports.
func TestDefaultRunner(t *testing.T) {
	ns := newNamespace(t)
	minimal := func(name, model, dataset string, workers, epochs int32) *mlv1.TrainingJob {
		return tjtest.NewTJ(ns, name).NoCommand().Workers(workers).GPUs(0).Epochs(epochs).With(func(tj *mlv1.TrainingJob) {
			tj.Spec.Model, tj.Spec.Dataset = model, dataset
			tj.Spec.Hyperparameters.AdditionalParams = map[string]string{"samples": "512", "epochDelaySeconds": "0.4"}
			tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true)}
		}).Obj()
	}
	create(t, minimal("cnn", "cnn", "synthetic", 2, 4), minimal("resnet", "resnet18", "fakedata", 1, 2))
	done := waitFinished(t, ns, "cnn", 4*time.Minute)
	assertSameChecksum(t, rankLogs(t, ns, "cnn", 2), 2)
	assertProgress(t, done, 4)
	if m := done.Status.Metrics; m == nil || m.Accuracy == nil || m.Loss == nil {
		t.Errorf("no loss and accuracy in status.metrics: %+v", m)
	}
	assertProgress(t, waitFinished(t, ns, "resnet", 4*time.Minute), 2)

	create(t, minimal("unknown", "gpt-9", "synthetic", 1, 1))
	tj := &mlv1.TrainingJob{}
	for deadline := time.Now().Add(2 * time.Minute); tj.Status.State != mlv1.StateFailed; time.Sleep(time.Second) {
		if err := stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "unknown"}, tj); err != nil || time.Now().After(deadline) {
			t.Fatalf("unknown model: state %q, err %v; want Failed", tj.Status.State, err)
		}
	}
	want := "unknown model 'gpt-9': the default runner trains cnn, mlp"
	if !regexp.MustCompile(regexp.QuoteMeta(want)).MatchString(tj.Status.FailureReason) {
		t.Errorf("failureReason %q does not say %q", tj.Status.FailureReason, want)
	}
}

// TestMPI: networking.backend mpi with real Open MPI and OpenSSH: rank 0's pod runs mpirun over the
// operator's hostfile and SSH key pair; both pods' SSH servers start one MPI process each, the processes
// all-reduce with mpi4py, and the TrainingJob completes when rank 0 does (the SSH servers are stopped).
func TestMPI(t *testing.T) {
	ns := newNamespace(t)
	create(t, tjtest.NewTJ(ns, "mpi").Workers(2).GPUs(0).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Image = "mpioperator/openmpi:v0.6.0"
		tj.Spec.Networking = &mlv1.NetworkingSpec{Backend: mlv1.BackendMPI}
		tj.Spec.Command = []string{"mpirun", "-np", "2", "--map-by", "node", "-x", "PATH", "python3", "examples/python/mpi_allreduce.py"}
	}).Obj())
	waitFinished(t, ns, "mpi", 3*time.Minute)
	log := rankLogs(t, ns, "mpi", 1)[0]
	ranks := regexp.MustCompile(`(?m)^rank (\d) of 2 on \S+ checksum (\S+)$`).FindAllStringSubmatch(log, -1)
	if len(ranks) != 2 || ranks[0][2] != ranks[1][2] {
		t.Errorf("want two MPI ranks with the same checksum in rank 0's log (mpirun gathers their output):\n%s", log)
	}
}

func newNamespace(t *testing.T) string {
	t.Helper()
	return stacktest.NewNamespace(t, stack.Client, "fw-")
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	stacktest.Create(t, stack.Client, objs...)
}

// waitFinished waits for the job to end (a bound on a hang) and fails the test unless it Completed.
func waitFinished(t *testing.T, ns, name string, timeout time.Duration) *mlv1.TrainingJob {
	t.Helper()
	tj := &mlv1.TrainingJob{}
	for deadline := time.Now().Add(timeout); ; time.Sleep(time.Second) {
		if err := stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tj); err != nil {
			t.Fatal(err)
		}
		if tj.Status.State == mlv1.StateCompleted && tj.Status.Checkpoint != nil == tj.CheckpointEnabled() {
			return tj
		}
		if tj.Status.State == mlv1.StateFailed || time.Now().After(deadline) {
			logs := rankLogs(t, ns, name, int(tj.Spec.NumWorkers))
			t.Fatalf("%s: state %s (%s), want Completed; rank logs:\n%v", name, tj.Status.State, tj.Status.FailureReason, logs)
		}
	}
}

// rankLogs returns the trainer logs of each rank's newest pod ("" for a rank without one yet).
func rankLogs(t *testing.T, ns, name string, workers int) []string {
	t.Helper()
	logs := make([]string, workers)
	for rank := range logs {
		path, err := node.LogPath(stack.DataRoot, ns, fmt.Sprintf("%s-worker-%d-*", name, rank), names.ContainerName)
		if err != nil {
			continue
		}
		data, _ := os.ReadFile(path)
		logs[rank] = string(data)
	}
	return logs
}

// assertSameChecksum: every rank printed "rank R of N ... checksum|model X" with the same X.
func assertSameChecksum(t *testing.T, logs []string, world int) {
	t.Helper()
	var first string
	for rank, log := range logs {
		m := checksum.FindStringSubmatch(log)
		switch {
		case m == nil || m[1] != fmt.Sprint(rank) || m[2] != fmt.Sprint(world):
			t.Errorf("rank %d printed no checksum as rank %d of %d:\n%s", rank, rank, world, log)
		case rank == 0:
			first = m[3]
		case m[3] != first:
			t.Errorf("rank %d ended with %s, rank 0 with %s: the ranks did not train together", rank, m[3], first)
		}
	}
}

// assertProgress: rank 0's progress reached the status while it ran (the final reading may miss the last
// epochs of a fast run: the rank is gone), it is 100% at the end, and the newest checkpoint the operator
// saw is the last epoch's.
func assertProgress(t *testing.T, tj *mlv1.TrainingJob, epochs int) {
	t.Helper()
	if tj.Status.Progress != "100%" || tj.Status.CurrentEpoch < 2 || epochOf(tj) != epochs {
		t.Errorf("progress %q, epoch %d, newest checkpoint %d; want 100%%, at least 2 and %d",
			tj.Status.Progress, tj.Status.CurrentEpoch, epochOf(tj), epochs)
	}
}

// epochOf returns the epoch of the job's newest checkpoint the operator has seen (0: none).
func epochOf(tj *mlv1.TrainingJob) int {
	if tj.Status.Checkpoint == nil {
		return 0
	}
	return int(tj.Status.Checkpoint.LatestEpoch)
}
