package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

// Reading the ends of the trainers' logs: the JobController's failure hints, the StatusController's
// hangs.

// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get

// LogReader reads the last lines of a container's log, each prefixed with its RFC 3339 time.
type LogReader interface {
	TailLog(ctx context.Context, namespace, pod, container string, lines int64) (string, error)
}

// ClientsetLogs reads logs through the API server (pods/log).
type ClientsetLogs struct{ Clientset kubernetes.Interface }

// TailLog implements LogReader.
func (c ClientsetLogs) TailLog(ctx context.Context, namespace, pod, container string, lines int64) (string, error) {
	opts := &corev1.PodLogOptions{Container: container, TailLines: &lines, Timestamps: true, LimitBytes: ptr.To[int64](16 << 10)}
	data, err := c.Clientset.CoreV1().Pods(namespace).GetLogs(pod, opts).DoRaw(ctx)
	return string(data), err
}

// failedLogLines is how many lines of a failed trainer's log the JobController reads for a hint (at
// most 16 KiB): a traceback's cause often sits above the 2 KiB termination message.
const failedLogLines = 200

// failedLogs reads the log tails of the failed pods whose termination message shows no known cause
// (derive.HintLogPods). It skips logs it cannot read; the termination message still explains the
// failure.
func (r *JobReconciler) failedLogs(ctx context.Context, pods []corev1.Pod) map[string]string {
	if r.Logs == nil {
		return nil
	}
	var logs map[string]string
	for _, p := range derive.HintLogPods(pods) {
		text, err := r.Logs.TailLog(ctx, p.Namespace, p.Name, names.ContainerName, failedLogLines)
		if err != nil {
			ctrl.LoggerFrom(ctx).V(1).Info("reading a failed trainer's log", "pod", klog.KObj(p), "error", err.Error())
			continue
		}
		if logs == nil {
			logs = map[string]string{}
		}
		logs[p.Name] = text
	}
	return logs
}
