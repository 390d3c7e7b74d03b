//go:build cluster

package cluster

import (
	"regexp"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/images"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// rankLines finds "rank R of N ... checksum C" lines (the runner's and the MPI example's last line) in a log.
var rankLines = regexp.MustCompile(`(?m)^rank (\d+) of (\d+)\b.*?checksum (\S+)$`)

// sameChecksum: the log holds one line per rank of n, all with the same checksum (the ranks trained one
// model together).
func sameChecksum(t *testing.T, what, log string, n int) {
	t.Helper()
	lines := rankLines.FindAllStringSubmatch(log, -1)
	ranks := map[string]bool{}
	for _, l := range lines {
		ranks[l[1]] = true
		if l[3] != lines[0][3] {
			t.Errorf("%s: ranks disagree on the checksum:\n%s", what, log)
		}
	}
	if len(ranks) != n {
		t.Errorf("%s: want a checksum line of each of %d ranks:\n%s", what, n, log)
	}
}

// TestMinimalYAMLOnRunnerImage: the minimal TrainingJob (model, dataset, numWorkers; no image, no command)
// runs the operator's default runner image (Dockerfile.runner, built here on a Debian root filesystem with
// Debian's PyTorch): two ranks on two nodes train the CNN with DDP over the cluster DNS, report progress
// and complete; both ranks end with the same model.
func TestMinimalYAMLOnRunnerImage(t *testing.T) {
	ns := stacktest.NewNamespace(t, stack.Client, "runner")
	tj := tjtest.NewTJ(ns, "minimal").NoCommand().Workers(2).GPUs(0).Epochs(3).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Image = ""                                  // the default: images.Runner
		tj.Spec.Model, tj.Spec.Dataset = "cnn", "synthetic" // MNIST would be downloaded: these machines have no internet
		tj.Spec.Hyperparameters.AdditionalParams = map[string]string{"samples": "512", "epochDelaySeconds": "0.3"}
	}).Obj()
	spread(tj)
	stacktest.Create(t, stack.Client, tj)
	done := waitForEnd(t, ns, tj.Name, 5*time.Minute)
	if st := done.Status; st.State != mlv1.StateCompleted || st.TotalEpochs != 3 || st.Metrics == nil || st.Metrics.Loss == nil {
		t.Fatalf("state %s, %d epochs, metrics %+v: want Completed after 3 epochs with a loss: %s",
			st.State, st.TotalEpochs, st.Metrics, st.FailureReason)
	}
	pods := workerPods(t, ns, tj.Name, 0)
	var log string
	for rank, p := range pods {
		if got := p.Spec.Containers; len(got) > 0 && got[0].Image != images.Runner {
			t.Errorf("rank %s ran %s, want the default runner image %s", rank, got[0].Image, images.Runner)
		}
		log += kubectl(t, "logs", "-n", ns, p.Name, "-c", names.ContainerName)
	}
	sameChecksum(t, "the runner's ranks", log, 2)
}

// TestMPIInContainers: networking.backend mpi in real containers: every rank's pod starts OpenSSH's
// server with only the capabilities the builders grant a root server (SETUID, SETGID, SYS_CHROOT), rank 0
// runs Open MPI's mpirun over the operator's hostfile and key pair across two nodes, the two MPI processes
// all-reduce with mpi4py, and the job completes when rank 0 does.
func TestMPIInContainers(t *testing.T) {
	ns := stacktest.NewNamespace(t, stack.Client, "mpi")
	tj := tjtest.NewTJ(ns, "mpi").Workers(2).GPUs(0).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Image = images.MPIExamples
		tj.Spec.Networking = &mlv1.NetworkingSpec{Backend: mlv1.BackendMPI}
		tj.Spec.Command = []string{"mpirun", "-np", "2", "--map-by", "node", "-x", "PATH", "python3", "examples/python/mpi_allreduce.py"}
		tj.Spec.Args = nil
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(false)}
	}).Obj()
	spread(tj)
	stacktest.Create(t, stack.Client, tj)
	done := waitForEnd(t, ns, tj.Name, 4*time.Minute)
	if done.Status.State != mlv1.StateCompleted {
		t.Fatalf("state %s: %s", done.Status.State, done.Status.FailureReason)
	}
	pod := workerPods(t, ns, tj.Name, 0)["0"]
	log := kubectl(t, "logs", "-n", ns, pod.Name, "-c", names.ContainerName)
	sameChecksum(t, "rank 0's pod (mpirun gathers both processes' output)", log, 2)
}
