package derive

import (
	"regexp"

	corev1 "k8s.io/api/core/v1"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
)

// hint is a cause a failed rank's last log lines show, and what fixes it.
type hint struct {
	match *regexp.Regexp
	says  string
}

// hints are the causes a failure names ahead of the rank's last lines, looked for anywhere in them (a
// traceback's tail names the symptom: "DataLoader worker (pid 42) is killed by signal: Bus error"; the
// cause is lines above it). First match wins.
var hints = []hint{
	{regexp.MustCompile(`insufficient shared memory \(shm\)|No space left on device.*(/dev/shm|shm)|unable to (open|write to) shared memory`),
		"/dev/shm is too small for the DataLoader's worker processes: raise resources.sharedMemory " +
			"(or the memory limit it is half of), or lower num_workers or the batch size"},
	{regexp.MustCompile(`CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|` +
		`RESOURCE_EXHAUSTED: Out of memory`),
		"the GPU ran out of memory: a smaller batch (hyperparameters.batchSize, with gradientAccumulationSteps " +
			"to keep the effective batch), mixedPrecision, or more GPUs"},
	{regexp.MustCompile(`(?i)NCCL.*(timeout|timed out)|Watchdog caught collective operation timeout|collective operation timeout`),
		"an NCCL collective timed out: a rank stalled or lost its network to the others (env NCCL_DEBUG=INFO says which; " +
			"a failurePolicy rule onMessage 'NCCL.*[Tt]imeout' can restart without counting)"},
}

// HintLogPods returns the pods whose trainer's log the failure's description reads for a hint
// (Observed.Logs): the rank that exited first and those tied with it, each when its termination message
// shows no cause the operator recognises. Only they are described, so only their logs are worth reading.
func HintLogPods(pods []corev1.Pod) []*corev1.Pod {
	e := firstExit(pods)
	if e == nil {
		return nil
	}
	var out []*corev1.Pod
	for _, x := range append([]*rankExit{e}, e.tied...) {
		if x.container == names.ContainerName && hintFor(x.t.Message) == "" {
			out = append(out, x.pod)
		}
	}
	return out
}

// hintFor returns the hint for a termination message, "" when none matches.
func hintFor(msg string) string {
	for _, h := range hints {
		if h.match.MatchString(msg) {
			return h.says
		}
	}
	return ""
}
