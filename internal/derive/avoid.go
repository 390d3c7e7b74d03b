package derive

import (
	"fmt"
	"sort"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/text"
)

// avoidNodes adds the nodes a failure is attributed to to status.avoidedNodes, which the builders turn
// into node affinity NotIn for every worker of later attempts: a lost node, the failing rank's node when
// it also held the failing rank of the previous failed attempt, the failing rank's node when a rule with
// avoidNode decided. At most failurePolicy.maxAvoidedNodes stay, the newest (0 turns avoidance off). It
// records the failing rank's node as lastFailureNode.
func avoidNodes(tj *mlv1.TrainingJob, st *mlv1.TrainingJobStatus, f failure) {
	limit := int(*tj.Spec.FailurePolicy.MaxAvoidedNodes)
	add := func(node, why string) {
		if node == "" || limit == 0 || avoided(st, node) {
			return
		}
		st.AvoidedNodes = append(st.AvoidedNodes, mlv1.AvoidedNode{Name: node, Reason: text.Cut(why, 512), Attempt: st.Attempt})
	}
	lost := make([]string, 0, len(f.lost))
	for n := range f.lost {
		lost = append(lost, n)
	}
	sort.Strings(lost)
	for _, n := range lost {
		add(n, "node "+f.lost[n])
	}
	switch {
	case f.avoidNode:
		add(f.node, fmt.Sprintf("%s matched the failure of attempt %d", f.rule, st.Attempt))
	case f.node != "" && f.node == st.LastFailureNode && f.kind != disruption:
		add(f.node, fmt.Sprintf("held the failing rank in attempts %d and %d", st.Attempt-1, st.Attempt))
	}
	if over := len(st.AvoidedNodes) - limit; over > 0 {
		st.AvoidedNodes = append([]mlv1.AvoidedNode(nil), st.AvoidedNodes[over:]...)
	}
	st.LastFailureNode = f.node
}

func avoided(st *mlv1.TrainingJobStatus, node string) bool {
	for _, a := range st.AvoidedNodes {
		if a.Name == node {
			return true
		}
	}
	return false
}
