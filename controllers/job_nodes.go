package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list

// attemptFailing reports whether the current attempt has failed, or is known to fail
// (derive.AttemptFailure).
func attemptFailing(tj *mlv1.TrainingJob, obs derive.Observed) bool {
	return derive.AttemptFailure(tj, obs) != nil
}

// nodeTrouble reads the nodes of pods from the API server, one read per node, and maps the lost
// ones to why (derive.NodeTrouble). wait is how long until the first NotReady node counts as lost,
// or 0.
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

// withoutStranded drops the pods that have not ended on a lost node (derive.Stranded): they hold
// nothing a new attempt needs. It reads nodes only when a pod has not ended.
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

// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get

// heartbeats reads the Leases (kube-node-lease) of the nodes of unended pods on healthy nodes, one
// read per node. A missing Lease or an RBAC denial (an older chart) yields no heartbeat, and the
// verdict does not wait for one.
func heartbeats(ctx context.Context, reader client.Reader, pods []corev1.Pod,
	trouble map[string]string) (map[string]derive.Heartbeat, error) {
	out := map[string]derive.Heartbeat{}
	seen := map[string]bool{}
	for _, p := range pods {
		name := p.Spec.NodeName
		if name == "" || seen[name] || derive.Ended(&p) || trouble[name] != "" {
			continue
		}
		seen[name] = true
		lease := &coordinationv1.Lease{}
		found, err := getOptional(ctx, reader, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: name}, lease)
		if apierrors.IsForbidden(err) {
			ctrl.LoggerFrom(ctx).V(1).Info("cannot read nodes' leases: a lost node's fate is not waited for", "error", err.Error())
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if found && lease.Spec.RenewTime != nil && lease.Spec.LeaseDurationSeconds != nil {
			out[name] = derive.Heartbeat{Renewed: lease.Spec.RenewTime.Time, Duration: time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second}
		}
	}
	return out, nil
}

// nodeFateLeft returns when to recheck a failed attempt whose verdict waits for a worker's node
// (derive.NodeFateLeft). Lease renewals send no event.
func nodeFateLeft(tj *mlv1.TrainingJob, obs derive.Observed, now time.Time) (time.Duration, bool) {
	c := derive.AttemptFailure(tj, obs)
	if c == nil || len(obs.Heartbeats) == 0 {
		return 0, false
	}
	left, _ := derive.NodeFateLeft(obs, c.LastTransitionTime.Time, now, true)
	return min(left, nodeRecheck), left > 0
}

// nodeRecheck is how often a failing attempt rechecks a NotReady node that is not lost yet;
// tainting it sends no event.
const nodeRecheck = time.Second

// settleLeft returns how long the verdict on the attempt's failure still waits for its pods to
// report (derive.SettleLeft); false when the attempt has not failed.
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

// schedulableNodes maps the nodes the workers could run on to how many workers each fits
// (derive.Observed.Schedulable), or nil unless the failing attempt may avoid a node (mayAvoid). It
// reads requests from a stored pod, so admission's additions count, and stops listing once the
// nodes hold every worker.
func schedulableNodes(ctx context.Context, reader client.Reader, tj *mlv1.TrainingJob, obs derive.Observed) (map[string]int32, error) {
	if !mayAvoid(tj, obs) || len(obs.Pods) == 0 {
		return nil, nil
	}
	pod := &corev1.Pod{}
	if found, err := getOptional(ctx, reader, client.ObjectKeyFromObject(&obs.Pods[0]), pod); err != nil || !found {
		return nil, err
	}
	affinity, req, workers := nodeaffinity.GetRequiredNodeAffinity(pod), podRequests(pod), max(tj.Spec.NumWorkers, 1)
	out := map[string]int32{}
	list := &corev1.NodeList{}
	opt := client.ListOptions{Limit: nodePage, LabelSelector: labels.SelectorFromSet(pod.Spec.NodeSelector)}
	for ; !holdsAll(out, len(tj.Status.AvoidedNodes)+1, workers); opt.Continue = list.Continue {
		if err := reader.List(ctx, list, &opt); err != nil {
			return nil, fmt.Errorf("listing nodes: %w", err)
		}
		for i := range list.Items {
			if n := &list.Items[i]; placeable(n, pod, affinity) {
				out[n.Name] = holds(n, req, workers)
			}
		}
		if list.Continue == "" {
			break
		}
	}
	if len(out) == 0 {
		// The workers ran somewhere: a count of none is a miscount, not a full cluster.
		return nil, nil
	}
	return out, nil
}

// holdsAll reports whether the nodes hold the workers even without the `without` largest of them.
func holdsAll(nodes map[string]int32, without int, workers int32) bool {
	all := slices.Sorted(maps.Values(nodes))
	var sum int32
	for _, h := range all[:max(0, len(all)-without)] {
		sum += h
	}
	return sum >= workers
}

// podRequests returns what the scheduler counts for a worker pod: its containers' and sidecars'
// requests.
func podRequests(pod *corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{}
	add := func(c corev1.Container) {
		for name, q := range c.Resources.Requests {
			sum := out[name]
			sum.Add(q)
			out[name] = sum
		}
	}
	for _, c := range pod.Spec.Containers {
		add(c)
	}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	return out
}

// holds returns how many workers with these requests fit on node n's allocatable resources, at most
// workers.
func holds(n *corev1.Node, req corev1.ResourceList, workers int32) int32 {
	most := int64(workers)
	for name, q := range req {
		if q.IsZero() {
			continue
		}
		alloc, ok := n.Status.Allocatable[name]
		if !ok {
			return 0
		}
		most = min(most, alloc.MilliValue()/q.MilliValue())
	}
	return int32(most)
}

// nodePage is how many nodes one list request reads.
const nodePage = 100

// mayAvoid reports whether the failing attempt may avoid another node: a worker's node is in
// trouble, a worker runs where the previous failure did, or a rule avoids the failing rank's node.
// Never with maxAvoidedNodes 0.
func mayAvoid(tj *mlv1.TrainingJob, obs derive.Observed) bool {
	fp := tj.Spec.FailurePolicy
	if fp == nil || fp.MaxAvoidedNodes == nil || *fp.MaxAvoidedNodes == 0 {
		return false
	}
	last := tj.Status.LastFailureNode
	onLast := func(p corev1.Pod) bool { return last != "" && p.Spec.NodeName == last }
	if len(obs.NodeTrouble) > 0 || slices.ContainsFunc(obs.Pods, onLast) || slices.ContainsFunc(obs.Gone, onLast) {
		return true
	}
	return slices.ContainsFunc(fp.Rules, func(r mlv1.FailureRule) bool { return r.AvoidNode })
}

// placeable reports whether the scheduler could place pod on n, ignoring resources: n is Ready, not
// cordoned, matches the node selector and required affinity, and has no untolerated NoSchedule or
// NoExecute taint.
func placeable(n *corev1.Node, pod *corev1.Pod, affinity nodeaffinity.RequiredNodeAffinity) bool {
	if n.Spec.Unschedulable || !nodeReady(n) {
		return false
	}
	if ok, err := affinity.Match(n); err != nil || !ok {
		return false
	}
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, pod.Spec.Tolerations,
		func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, false)
	return !untolerated
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// schedulable returns the failing attempt's schedulable nodes (schedulableNodes), read once per
// attempt.
func (r *JobReconciler) schedulable(ctx context.Context, tj *mlv1.TrainingJob, obs derive.Observed) (map[string]int32, error) {
	key := client.ObjectKeyFromObject(tj)
	var read map[string]int32
	r.memory.peek(key, func(j *jobMemory) {
		if at := j.schedulable; at.nodes != nil && at.uid == tj.UID && at.attempt == tj.Status.Attempt {
			read = at.nodes
		}
	})
	if read != nil {
		return read, nil
	}
	nodes, err := schedulableNodes(ctx, r.APIReader, tj, obs)
	if err == nil && nodes != nil {
		r.memory.with(key, func(j *jobMemory) {
			j.schedulable = schedulableAt{uid: tj.UID, attempt: tj.Status.Attempt, nodes: nodes}
		})
	}
	return nodes, err
}
