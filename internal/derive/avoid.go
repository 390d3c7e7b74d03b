package derive

import (
	"fmt"
	"sort"
	"strings"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/text"
)

// avoidNodes adds the nodes a failure is attributed to to status.avoidedNodes, which the builders turn
// into node affinity NotIn for every worker of later attempts. Only evidence about a node counts: the node
// was lost (gone, or not Ready and tainted), another rank failed there in the previous failed attempt
// (twoRanksFailed), or a rule with avoidNode decided. The same rank failing twice on its node is as
// likely the program (a rank SIGKILLed twice from outside cost a whole gang its restart in place), and is
// no evidence. At most failurePolicy.maxAvoidedNodes stay, the newest (0 turns avoidance off). It
// records the failing rank's node as lastFailureNode. Avoidance stops short of the last schedulable nodes:
// a node is not avoided when the schedulable nodes left would not hold every worker by their allocatable
// resources (f.schedulable); the note returned says which ("" when none).
func avoidNodes(tj *mlv1.TrainingJob, st *mlv1.TrainingJobStatus, f failure) (note string) {
	limit := int(*tj.Spec.FailurePolicy.MaxAvoidedNodes)
	var kept []string
	add := func(node, why string) {
		if node == "" || limit == 0 || avoided(st, node) {
			return
		}
		if !roomToAvoid(st, f, node) {
			kept = append(kept, node)
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
	case twoRanksFailed(st, f):
		add(f.node, fmt.Sprintf("rank %s failed there in attempt %d, rank %s in attempt %d",
			lastFailingRank(st), st.Attempt-1, f.rank, st.Attempt))
	}
	if over := len(st.AvoidedNodes) - limit; over > 0 {
		st.AvoidedNodes = append([]mlv1.AvoidedNode(nil), st.AvoidedNodes[over:]...)
	}
	st.LastFailureNode = f.node
	if len(kept) == 0 {
		return ""
	}
	return fmt.Sprintf("; not avoiding node %s: the other schedulable nodes would not hold the %d workers", strings.Join(kept, ", "),
		f.workers)
}

// twoRanksFailed reports whether the failing rank's node also held the failing rank of the previous failed
// attempt, and the two are different ranks: a fault the node gives whatever runs there. A disruption
// (preemption, eviction) says nothing about the node, nor does a failure whose rank is not known.
func twoRanksFailed(st *mlv1.TrainingJobStatus, f failure) bool {
	last := lastFailingRank(st)
	return f.kind != disruption && f.node != "" && f.node == st.LastFailureNode && f.rank != "" && last != "" && f.rank != last
}

// lastFailingRank returns the rank whose exit caused the latest gang restart, "" when it was no rank's
// exit: status.lastFailure begins with it ("rank 1 (pod …) exited with code 137", describeExit), so no
// field of its own keeps it (as LastAttemptHung reads a hang there).
func lastFailingRank(st *mlv1.TrainingJobStatus) string {
	rest, ok := strings.CutPrefix(st.LastFailure, "rank ")
	if !ok {
		return ""
	}
	rank, _, ok := strings.Cut(rest, " (pod ")
	if !ok || rank == "" || strings.ContainsRune(rank, ' ') {
		return ""
	}
	return rank
}

// roomToAvoid reports whether the schedulable nodes other than node and those avoided hold every worker (at
// least one) by their allocatable resources; true when the schedulable nodes were not read.
func roomToAvoid(st *mlv1.TrainingJobStatus, f failure, node string) bool {
	if f.schedulable == nil {
		return true
	}
	var room int32
	for n, holds := range f.schedulable {
		if n != node && !avoided(st, n) {
			room += holds
		}
	}
	return room >= max(f.workers, 1)
}

func avoided(st *mlv1.TrainingJobStatus, node string) bool {
	for _, a := range st.AvoidedNodes {
		if a.Name == node {
			return true
		}
	}
	return false
}
