package derive

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
)

// NodeTrouble is why a node can no longer run or report its pods, "" when it can: it is gone (n is nil),
// or its Ready condition is not True (the node lifecycle controller sets Unknown once the kubelet has not
// renewed its lease for node-monitor-grace-period, 50 s by default).
func NodeTrouble(n *corev1.Node) string {
	if n == nil {
		return "is gone"
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return fmt.Sprintf("is not Ready (%s: %s)", c.Reason, c.Message)
		}
	}
	return ""
}

// Ended: the pod reached a terminal phase.
func Ended(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// Stranded: the pod has not ended and its node is in trouble (trouble maps node names to NodeTrouble).
// Nobody will report its end until the node comes back or the control plane removes the pod (the pod
// garbage collector does so for a deleted Node, not for an unreachable one), so waiting for it would
// hang the run.
func Stranded(p *corev1.Pod, trouble map[string]string) bool {
	return !Ended(p) && p.Spec.NodeName != "" && trouble[p.Spec.NodeName] != ""
}

// attemptFailure is the Job condition that says the current attempt failed: Failed, or FailureTarget
// (the Job controller has decided the Job fails and waits for its pods to end before it adds Failed)
// when every pod that has not ended is stranded on a lost node. Pods that still stop on a healthy node
// are waited for: a new gang never starts beside workers of the old one.
func attemptFailure(obs Observed) *batchv1.JobCondition {
	if c := JobCondition(obs.Job, batchv1.JobFailed); c != nil {
		return c
	}
	c := JobCondition(obs.Job, batchv1.JobFailureTarget)
	if c == nil {
		return nil
	}
	stranded := 0
	for i := range obs.Pods {
		switch p := &obs.Pods[i]; {
		case Stranded(p, obs.NodeTrouble):
			stranded++
		case !Ended(p):
			return nil
		}
	}
	if stranded == 0 {
		return nil // every pod has ended: Failed follows at once
	}
	return c
}

// lostNodes describes the workers whose node is in trouble, for example "rank 1's node n-2 is gone".
func lostNodes(obs Observed) []string {
	var lost []string
	for _, p := range ByRank(obs.Pods) {
		if why := obs.NodeTrouble[p.Spec.NodeName]; why != "" && p.Spec.NodeName != "" {
			lost = append(lost, fmt.Sprintf("rank %s's node %s %s", p.Labels[names.RankLabel], p.Spec.NodeName, why))
		}
	}
	return lost
}
