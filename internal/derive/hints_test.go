package derive

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
)

// shmCrash is what a PyTorch DataLoader with worker processes printed on a real node with containerd's
// 64 MiB /dev/shm: the cause is lines above the traceback's last three.
const shmCrash = `epoch 1/3 starting
shm MiB 64
ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).
Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py", line 1132, in _try_get_data
    data = self._data_queue.get(timeout=timeout)
  File "/usr/lib/python3.11/multiprocessing/queues.py", line 113, in get
    if not self._poll(timeout):
  File "/usr/lib/python3/dist-packages/torch/utils/_signal_handling.py", line 66, in handler
    _error_if_any_worker_fails()
RuntimeError: DataLoader worker (pid 42) is killed by signal: Bus error. ` +
	`It is possible that dataloader's workers are out of shared memory. Please try to raise your shared memory limit.
`

// TestFailureHints: a failed rank's cause, recognised anywhere in its last lines, comes ahead of them in
// the failure's description with what fixes it.
func TestFailureHints(t *testing.T) {
	cases := []struct {
		name, log, more, want string
	}{
		{name: "shared memory", log: shmCrash, more: "", want: "raise resources.sharedMemory"},
		{
			name: "shared memory above the termination message",
			log:  "RuntimeError: DataLoader worker (pid(s) 7) exited unexpectedly\n",
			more: shmCrash,
			want: "raise resources.sharedMemory",
		},
		{
			name: "CUDA out of memory",
			log:  "step 10\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)\n",
			more: "",
			want: "the GPU ran out of memory",
		},
		{
			name: "an NCCL watchdog",
			log: "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, Timeout(ms)=600000) " +
				"ran for 600047 milliseconds before timing out.\nterminate called\n",
			more: "",
			want: "an NCCL collective timed out",
		},
		{name: "no known cause", log: "Traceback (most recent call last):\nValueError: bad label 12\n", more: "epoch 1\n", want: ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a-worker-0-x", Labels: map[string]string{names.RankLabel: "0"}}}
			got := describeExit(p, "trainer", &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: tc.log}, tc.more)
			hint, lines, _ := strings.Cut(got, "]: ")
			switch {
			case tc.want == "" && strings.Contains(got, "["):
				t.Errorf("a hint where none applies: %q", got)
			case tc.want != "" && (!strings.Contains(hint, tc.want) || lines == ""):
				t.Errorf("description %q, want the hint %q ahead of the last lines", got, tc.want)
			case !strings.HasSuffix(got, strings.TrimSpace(tc.log[strings.LastIndex(strings.TrimSpace(tc.log), "\n")+1:])):
				t.Errorf("description %q does not end with the log's last line", got)
			}
		})
	}
}

// TestHintLogPods: the JobController reads the logs of the ranks whose exit describes the failure (the
// first, and those tied with it) and only when their termination message names no cause already.
func TestHintLogPods(t *testing.T) {
	cases := []struct {
		name string
		pods []corev1.Pod
		want []string
	}{
		{
			name: "the first exit, not its bystander",
			pods: []corev1.Pod{pod("0", corev1.PodFailed).exited(1, "Error", false).at(2).p,
				pod("1", corev1.PodFailed).exited(137, "Error", false).at(1).p},
			want: []string{"w-1"},
		},
		{
			name: "two ranks in the same second",
			pods: []corev1.Pod{pod("0", corev1.PodFailed).exited(1, "Error", false).at(1).p,
				pod("1", corev1.PodFailed).exited(1, "Error", false).at(1).p},
			want: []string{"w-0", "w-1"},
		},
		{
			name: "a cause already in the message",
			pods: []corev1.Pod{pod("0", corev1.PodFailed).exited(1, "Error", false).message(shmCrash).p},
			want: nil,
		},
		{name: "only the agent failed", pods: []corev1.Pod{pod("0", corev1.PodRunning).agentExited(1, 1).p}, want: nil},
		{name: "nothing failed", pods: []corev1.Pod{pod("0", corev1.PodRunning).p}, want: nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, p := range HintLogPods(tc.pods) {
				got = append(got, p.Name)
			}
			if !slices.Equal(tc.want, got) {
				t.Errorf("pods %v, want %v", got, tc.want)
			}
		})
	}
}

// TestExitLinesPrintable: the program's last lines reach the status without what a terminal acts on (a
// window title, a link, clearing the screen), and a cut tail stays valid UTF-8.
func TestExitLinesPrintable(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a-worker-0-x", Labels: map[string]string{names.RankLabel: "0"}}}
	for _, tc := range []struct {
		name, log, want string
	}{
		{name: "escapes", log: "\x1b]0;pwned\x07\x1b[2J\x1b]8;;http://evil.example/\x1b\\click\x1b[8m hidden\x1b[0m\n",
			want: "rank 0 (pod a-worker-0-x, container trainer) exited with code 1: click hidden"},
		{name: "a cut inside a character", log: strings.Repeat("é", 400),
			want: "rank 0 (pod a-worker-0-x, container trainer) exited with code 1: …" + strings.Repeat("é", 256)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := describeExit(p, "trainer", &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: tc.log}, "")
			if got != tc.want {
				t.Errorf("describeExit = %q, want %q", got, tc.want)
			}
		})
	}
}
