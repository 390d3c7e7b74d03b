package derive

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	"github.com/trainingjob-operator/trainingjob-operator/internal/text"
)

// failureMessage returns the explanation of a failed Job: the Job's own reason, then the first rank whose
// trainer exited with a non-zero code, so "exit code 137 (OOMKilled)" reaches the user without reading pods.
func failureMessage(c *batchv1.JobCondition, pods []corev1.Pod, logs map[string]string) string {
	msg := c.Reason
	if c.Message != "" {
		msg += ": " + c.Message
	}
	if rank := failedRank(pods, logs); rank != "" {
		msg += "; " + rank
	}
	const limit = 1024
	if len(msg) > limit {
		msg = msg[:limit]
	}
	return msg
}

// failedRank returns a description of the rank whose failure most likely caused the others ("" when no
// container exited with a non-zero code): the earliest non-zero exit (current or last state); among exits
// in the same second (the API's resolution), one killed by a signal other than SIGTERM (137: OOM or
// SIGKILL) comes before a plain error exit, which comes before SIGTERM (143, what stopping the other ranks
// sends); then the lowest rank. A rank that loses its peer usually exits with an error right after the peer
// dies, so the lowest failing rank alone would blame a bystander.
func failedRank(pods []corev1.Pod, logs map[string]string) string {
	if e := firstExit(pods); e != nil {
		return e.describe(logs)
	}
	return ""
}

// firstExit returns the exit failedRank describes, nil when no container exited with a non-zero code. Other
// ranks whose exit cannot be told apart from it (same second, same kind) are named with it: which one
// caused the other is then not known.
func firstExit(pods []corev1.Pod) *rankExit {
	exits := nonZeroExits(pods, false)
	if len(exits) == 0 {
		// Only the checkpoint agent's: it names a storage fault (it exits when it cannot work).
		exits = nonZeroExits(pods, true)
	}
	var best *rankExit
	for _, e := range exits {
		if best == nil || e.before(best) {
			best = e
		}
	}
	for _, e := range exits {
		if best != nil && e.pod != best.pod && !e.before(best) && !best.before(e) {
			best.ties = append(best.ties, e.pod.Labels[names.RankLabel])
			best.tied = append(best.tied, e)
		}
	}
	return best
}

// nonZeroExits returns the non-zero exits (current or last run, but not the end a restart in place gives every
// container) of the pods' containers: the checkpoint
// agent's only (agent), or every other's. A failed resume check (an init container) names the missing
// checkpoint; the agent, a sidecar that ends with its pod, is no cause while a trainer's exit is there:
// under load its own end (stopped with the attempt, or failing its final report) can be the earliest, and
// it blamed the agent for a failure the trainer had (a run of the demo).
func nonZeroExits(pods []corev1.Pod, agent bool) []*rankExit {
	var exits []*rankExit
	for _, p := range ByRank(pods) {
		for _, cs := range containerStatuses(p) {
			if (cs.Name == names.AgentContainerName) != agent {
				continue
			}
			for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
				if FailedEnd(t) {
					exits = append(exits, &rankExit{pod: p, container: cs.Name, t: t})
				}
			}
		}
	}
	return exits
}

type rankExit struct {
	pod       *corev1.Pod
	container string
	t         *corev1.ContainerStateTerminated
	// ties are the ranks that exited the same way in the same second, tied their exits.
	ties []string
	tied []*rankExit
}

// describe returns how the rank exited; logs (Observed.Logs) may hold more of its log than its
// termination message, where a hint's cause may be.
func (e *rankExit) describe(logs map[string]string) string {
	return describeExit(e.pod, e.container, e.t, logs[e.pod.Name], e.ties...)
}

// before reports whether e comes before o: by time, then by exitClass; byRank order breaks ties.
func (e *rankExit) before(o *rankExit) bool {
	if !e.t.FinishedAt.Equal(&o.t.FinishedAt) {
		return e.t.FinishedAt.Before(&o.t.FinishedAt)
	}
	return exitClass(e.t.ExitCode) < exitClass(o.t.ExitCode)
}

// exitClass returns an exit code's class: 0 killed by a signal other than SIGTERM, 1 error exit, 2 SIGTERM.
func exitClass(code int32) int {
	switch {
	case code == 143:
		return 2
	case code > 128:
		return 0
	}
	return 1
}

// describeExit returns how a container exited: its code and reason, a hint when its last lines (the
// termination message, and more of the log when known) show a cause the operator recognises, and the last
// lines.
func describeExit(p *corev1.Pod, container string, t *corev1.ContainerStateTerminated, moreLog string, ties ...string) string {
	s := fmt.Sprintf("rank %s (pod %s, container %s) exited with code %d", p.Labels[names.RankLabel], p.Name, container, t.ExitCode)
	if t.Reason != "" && t.Reason != "Error" {
		s += " (" + t.Reason + ")"
	}
	if len(ties) > 0 {
		s += fmt.Sprintf(" (rank %s too, in the same second)", strings.Join(ties, ", "))
	}
	if h := hintFor(moreLog + "\n" + t.Message); h != "" {
		s += " [" + h + "]"
	}
	if m := lastLines(t.Message, 3, 512); m != "" {
		s += ": " + m
	}
	return s
}

// lastLines returns the end of a termination message (which may be a log tail, with
// FallbackToLogsOnError): its last n lines once surrounding white space is trimmed, at most max bytes. The
// end of a crash's log is where its error is (a Python traceback ends with the exception).
// The program's escape sequences and control bytes are dropped (text.Printable): kubectl and the Python
// client show the message on a person's terminal.
func lastLines(msg string, n, max int) string {
	lines := strings.Split(strings.TrimSpace(text.Printable(msg)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := strings.Join(lines, "\n")
	if len(out) > max {
		out = "…" + text.Last(out, max)
	}
	return out
}

// ByRank returns the pods ordered by rank, pods without a rank last.
func ByRank(pods []corev1.Pod) []*corev1.Pod {
	sorted := make([]*corev1.Pod, len(pods))
	for i := range pods {
		sorted[i] = &pods[i]
	}
	sort.SliceStable(sorted, func(i, j int) bool { return rankOf(sorted[i]) < rankOf(sorted[j]) })
	return sorted
}

func rankOf(p *corev1.Pod) int {
	r, err := strconv.Atoi(p.Labels[names.RankLabel])
	if err != nil {
		return int(^uint(0) >> 1)
	}
	return r
}
