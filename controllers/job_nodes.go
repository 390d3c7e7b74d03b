package controllers

import (
	"context"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get

// attemptFailing reports whether the current attempt has failed, or is known to fail (derive.AttemptFailure).
func attemptFailing(tj *mlv1.TrainingJob, obs derive.Observed) bool {
	return derive.AttemptFailure(tj, obs) != nil
}

// nodeTrouble reads the nodes of pods from the API server (the operator holds no node informer: nodes
// are read only on the rare paths that need them, one read per node) and maps those that are lost to why
// (derive.NodeTrouble); wait is how long until the first node that is not Ready but does not count as
// lost yet will count (0 when there is none).
func nodeTrouble(ctx context.Context, reader client.Reader, pods []corev1.Pod,
	now time.Time) (trouble map[string]string, wait time.Duration, err error) {
	trouble = map[string]string{}
	seen := map[string]bool{}
	for _, p := range pods {
		name := p.Spec.NodeName
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		node := &corev1.Node{}
		found, err := getOptional(ctx, reader, client.ObjectKey{Name: name}, node)
		if err != nil {
			return nil, 0, err
		}
		if !found {
			node = nil
		}
		why, left := derive.NodeTrouble(node, now)
		if why != "" {
			trouble[name] = why
		}
		if left > 0 && (wait == 0 || left < wait) {
			wait = left
		}
	}
	return trouble, wait, nil
}

// withoutStranded leaves out the pods that have not ended on a lost node (derive.Stranded): they hold
// nothing a new attempt needs and will not end while the node is unreachable. Nodes are read only when a
// pod has not ended.
func withoutStranded(ctx context.Context, reader client.Reader, pods []corev1.Pod, now time.Time) ([]corev1.Pod, error) {
	running := pods[:0:0]
	for _, p := range pods {
		if !derive.Ended(&p) {
			running = append(running, p)
		}
	}
	if len(running) == 0 {
		return pods, nil
	}
	trouble, _, err := nodeTrouble(ctx, reader, running, now)
	if err != nil {
		return nil, err
	}
	out := pods[:0:0]
	for _, p := range pods {
		if !derive.Stranded(&p, trouble) {
			out = append(out, p)
		}
	}
	return out, nil
}

// nodeRecheck is how often a failing attempt looks again at a worker's node that is not Ready but does not
// count as lost yet: no event comes when the node lifecycle controller taints it.
const nodeRecheck = time.Second

// settleLeft returns how long the verdict on the current attempt's failure still waits for its pods to report
// (derive.SettleLeft); false when the attempt has not failed.
func settleLeft(obs derive.Observed, now time.Time) (time.Duration, bool) {
	if obs.Job == nil {
		return 0, false
	}
	c := derive.JobCondition(obs.Job, batchv1.JobFailed)
	if c == nil {
		return 0, false
	}
	return derive.SettleLeft(obs, c, metav1.NewTime(now)), true
}
