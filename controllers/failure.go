package controllers

import (
	"fmt"
	"sort"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
)

// failureMessage explains a failed Job: the Job's own reason, then the first rank whose trainer exited
// with a non-zero code, so "exit code 137 (OOMKilled)" reaches the user without reading pods.
func failureMessage(c *batchv1.JobCondition, pods []corev1.Pod) string {
	msg := c.Reason
	if c.Message != "" {
		msg += ": " + c.Message
	}
	if rank := failedRank(pods); rank != "" {
		msg += "; " + rank
	}
	const limit = 1024
	if len(msg) > limit {
		msg = msg[:limit]
	}
	return msg
}

// failedRank describes the lowest rank with a non-zero exit code, looking at current and last states.
func failedRank(pods []corev1.Pod) string {
	for _, p := range byRank(pods) {
		for _, cs := range p.Status.ContainerStatuses {
			for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
				if t != nil && t.ExitCode != 0 {
					return describeExit(p, cs.Name, t)
				}
			}
		}
	}
	return ""
}

func describeExit(p *corev1.Pod, container string, t *corev1.ContainerStateTerminated) string {
	s := fmt.Sprintf("rank %s (pod %s, container %s) exited with code %d", p.Labels[builders.RankLabel], p.Name, container, t.ExitCode)
	if t.Reason != "" && t.Reason != "Error" {
		s += " (" + t.Reason + ")"
	}
	if t.Message != "" {
		s += ": " + t.Message
	}
	return s
}

// byRank returns the pods ordered by rank, pods without a rank last.
func byRank(pods []corev1.Pod) []*corev1.Pod {
	sorted := make([]*corev1.Pod, len(pods))
	for i := range pods {
		sorted[i] = &pods[i]
	}
	sort.SliceStable(sorted, func(i, j int) bool { return rankOf(sorted[i]) < rankOf(sorted[j]) })
	return sorted
}

func rankOf(p *corev1.Pod) int {
	r, err := strconv.Atoi(p.Labels[builders.RankLabel])
	if err != nil {
		return int(^uint(0) >> 1)
	}
	return r
}
