package controllers

import (
	"context"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
)

// Whether the cluster restarts pods in place: its API server keeps the rule, and a node declares
// the feature.

// inPlaceRestartServed reports whether the API server keeps a container's RestartAllContainers
// rule. No answer counts as no; gang restarts then recreate the pods and say why.
func inPlaceRestartServed(mgr ctrl.Manager) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	served, err := RestartRuleServed(ctx, mgr.GetClient())
	if err != nil {
		mgr.GetLogger().Info("gang restarts recreate the pods: the dry run of a RestartAllContainers rule failed", "error", err.Error())
		return false
	}
	mgr.GetLogger().Info("gang restarts", "ruleServed", served)
	return served
}

// RestartRuleServed reports whether the API server keeps a container's RestartAllContainers rule,
// using a dry-run Job in the default namespace.
func RestartRuleServed(ctx context.Context, c client.Client) (bool, error) {
	ctr := corev1.Container{Name: "probe", Image: "probe", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyNever),
		RestartPolicyRules: []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestartAllContainers,
			ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn,
				Values: []int32{controlapi.RestartCode}}}}}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{GenerateName: "trainingjob-operator-probe-", Namespace: metav1.NamespaceDefault},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{ctr}}}}}
	if err := c.Create(ctx, job, client.DryRunAll); err != nil {
		return false, err
	}
	cs := job.Spec.Template.Spec.Containers
	return len(cs) == 1 && len(cs[0].RestartPolicyRules) == 1, nil
}

// inPlaceSupport reports whether the cluster restarts pods in place: the API server keeps the rule
// and a node declares the feature. It looks for nodes from every second up to every five minutes
// until one does.
type inPlaceSupport struct {
	served bool
	reader client.Reader
	mu     sync.Mutex
	// declared: a node declared the feature (never looked for again); next: when to look again.
	declared bool
	next     time.Time
	wait     time.Duration
}

// available reports whether gang restarts may go in place now.
func (s *inPlaceSupport) available(ctx context.Context, now time.Time) bool {
	if !s.served {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.declared || now.Before(s.next) {
		return s.declared
	}
	s.wait = min(max(2*s.wait, time.Second), 5*time.Minute)
	s.next = now.Add(s.wait)
	declared, err := nodesDeclare(ctx, s.reader, restartAllContainersFeature)
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("looking for nodes that restart pods in place", "error", err.Error())
	}
	if declared {
		ctrl.LoggerFrom(ctx).V(1).Info("A node restarts pods in place: gang restarts go in place")
	}
	s.declared = declared
	return declared
}

// restartAllContainersFeature is the feature a kubelet declares (node.status.declaredFeatures) when
// it supports the rule; the scheduler places such pods only there.
const restartAllContainersFeature = "RestartAllContainersOnContainerExits"

// nodesDeclare reports whether a node of the first page of nodes declares feature.
func nodesDeclare(ctx context.Context, c client.Reader, feature string) (bool, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes, client.Limit(500)); err != nil {
		return false, err
	}
	for _, n := range nodes.Items {
		if slices.Contains(n.Status.DeclaredFeatures, feature) {
			return true, nil
		}
	}
	return false, nil
}
