package controllers

import (
	"context"
	"errors"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// Finding rank 0: the StatusController reads its progress endpoint and the CheckpointController its
// checkpoint agent, both at the address of its running pod.

// rank0Addr returns host:port of rank 0's running pod of the current attempt.
func rank0Addr(ctx context.Context, c client.Reader, tj *mlv1.TrainingJob, port int32) (string, error) {
	pods := &corev1.PodList{}
	labels := client.MatchingLabels{names.NameLabel: tj.Name, names.RankLabel: "0", names.AttemptLabel: strconv.Itoa(int(tj.Status.Attempt))}
	if err := c.List(ctx, pods, client.InNamespace(tj.Namespace), labels); err != nil {
		return "", err
	}
	return runningRank0(tj, pods.Items, port)
}

// runningRank0 returns host:port of the running pod of the current attempt among rank 0's pods.
func runningRank0(tj *mlv1.TrainingJob, pods []corev1.Pod, port int32) (string, error) {
	for _, p := range pods {
		if names.JobAttempt(&p) == tj.Status.Attempt && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" &&
			p.DeletionTimestamp == nil {
			return podAddr(&p, port), nil
		}
	}
	return "", errors.New("rank 0 has no running pod")
}

// podAddr returns host:port of a pod's port.
func podAddr(p *corev1.Pod, port int32) string {
	return net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port)))
}

// unwrapURLError drops net/http's "Get URL:" wrapping, which the caller's message already carries.
func unwrapURLError(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}
