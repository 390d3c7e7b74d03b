package main

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
)

// The bench plays Kubernetes' Job controller and the kubelet for every job, as cheaply as they would write:
// startWorkers creates the worker's pod and reports it Running and Ready, with the Job's active and
// ready counts, and waits until every TrainingJob is Running; finishWorker reports the pod Succeeded and
// the Job Complete.
func (b *bench) startWorkers(ctx context.Context) error {
	if err := benchkit.Parallel(b.n, clients, func(i int) error { return b.startWorker(ctx, i) }); err != nil {
		return err
	}
	_, err := b.seen.wait(10*time.Minute, "Running", func(j *jobSeen) bool { return j.state == mlv1.StateRunning })
	return err
}

func podName(i int) string { return jobName(i) + "-worker-0" }

func (b *bench) startWorker(ctx context.Context, i int) error {
	job := b.seen.job(jobName(i))
	if job == nil {
		return fmt.Errorf("no Job seen for %s", jobName(i))
	}
	labels := job.Spec.Template.Labels
	labels[names.RankLabel] = "0"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName(i), Namespace: ns, Labels: labels,
			Annotations:     map[string]string{names.RankAnnotation: "0"},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: names.ContainerName, Image: "bench:1"}}, NodeName: "bench-node"},
	}
	if err := b.k.Create(ctx, pod); err != nil {
		return err
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}}, StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: names.ContainerName, Image: "bench:1", Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}}
	if err := b.k.Status().Update(ctx, pod); err != nil {
		return err
	}
	job.Status.StartTime, job.Status.Active, job.Status.Ready = &now, 1, ptr.To[int32](1)
	return b.k.Status().Update(ctx, job)
}

func (b *bench) finishWorker(ctx context.Context, i int) error {
	pod := &corev1.Pod{}
	if err := b.k.Get(ctx, keyOf(podName(i)), pod); err != nil {
		return err
	}
	now := metav1.Now()
	pod.Status.Phase = corev1.PodSucceeded
	pod.Status.Conditions[0].Status = corev1.ConditionFalse
	pod.Status.ContainerStatuses[0].Ready = false
	pod.Status.ContainerStatuses[0].State = corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: now}}
	if err := b.k.Status().Update(ctx, pod); err != nil {
		return err
	}
	job := &batchv1.Job{}
	if err := b.k.Get(ctx, keyOf(jobName(i)+"-worker"), job); err != nil {
		return err
	}
	job.Status.Active, job.Status.Ready, job.Status.Succeeded, job.Status.CompletedIndexes = 0, ptr.To[int32](0), 1, "0"
	job.Status.CompletionTime = &now
	for _, t := range []batchv1.JobConditionType{batchv1.JobSuccessCriteriaMet, batchv1.JobComplete} {
		job.Status.Conditions = append(job.Status.Conditions,
			batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: now})
	}
	return b.k.Status().Update(ctx, job)
}
