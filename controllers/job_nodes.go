package controllers

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/controllers/derive"
)

// attemptFailed: the current attempt's Job has failed.
func attemptFailed(obs derive.Observed) bool {
	return obs.Job != nil && derive.JobCondition(obs.Job, batchv1.JobFailed) != nil
}

// lostNodes describes the pods of a failed attempt whose node is gone or not Ready. Nodes are read from
// the API server (the operator holds no node informer), once per failed attempt's reconcile, at most one
// read per worker's node.
func (r *JobReconciler) lostNodes(ctx context.Context, pods []corev1.Pod) ([]string, error) {
	var lost []string
	seen := map[string]string{}
	for _, p := range derive.ByRank(pods) {
		name := p.Spec.NodeName
		if name == "" {
			continue
		}
		why, ok := seen[name]
		if !ok {
			node := &corev1.Node{}
			found, err := getOptional(ctx, r.APIReader, client.ObjectKey{Name: name}, node)
			if err != nil {
				return nil, err
			}
			why = nodeTrouble(found, node)
			seen[name] = why
		}
		if why != "" {
			lost = append(lost, fmt.Sprintf("rank %s's node %s %s", p.Labels[builders.RankLabel], name, why))
		}
	}
	return lost, nil
}

// nodeTrouble is why a node cannot run its pods any more ("" when it can): gone, or not Ready.
func nodeTrouble(found bool, n *corev1.Node) string {
	if !found {
		return "is gone"
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return fmt.Sprintf("is not Ready (%s: %s)", c.Reason, c.Message)
		}
	}
	return ""
}
