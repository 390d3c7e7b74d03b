// Package tjtest has a fluent builder of TrainingJobs for tests.
package tjtest

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// TJ is a fluent builder of TrainingJobs for tests.
type TJ struct{ tj mlv1.TrainingJob }

// NewTJ starts a minimal valid TrainingJob: model, dataset, numWorkers and a command run in the
// framework's default image (without one the default image would train nothing; see NoCommand).
func NewTJ(namespace, name string) *TJ {
	return &TJ{tj: mlv1.TrainingJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: mlv1.GroupVersion.String(), Kind: "TrainingJob"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       mlv1.TrainingJobSpec{Model: "cnn", Dataset: "mnist", NumWorkers: 2, Command: []string{"python3", "train.py"}},
	}}
}

// NoCommand removes the command: the shortest YAML a user can write, which runs the default image as it is.
func (b *TJ) NoCommand() *TJ { b.tj.Spec.Command = nil; return b }

// Workers sets numWorkers.
func (b *TJ) Workers(n int32) *TJ { b.tj.Spec.NumWorkers = n; return b }

// GPUs sets gpusPerWorker.
func (b *TJ) GPUs(n int32) *TJ { b.tj.Spec.GPUsPerWorker = ptr.To(n); return b }

// Framework sets framework.
func (b *TJ) Framework(f mlv1.Framework) *TJ { b.tj.Spec.Framework = f; return b }

// Image sets image and command.
func (b *TJ) Image(image string, command ...string) *TJ {
	b.tj.Spec.Image, b.tj.Spec.Command = image, command
	return b
}

// Env appends a literal environment variable.
func (b *TJ) Env(name, value string) *TJ {
	b.tj.Spec.Env = append(b.tj.Spec.Env, corev1.EnvVar{Name: name, Value: value})
	return b
}

// Epochs sets hyperparameters.epochs.
func (b *TJ) Epochs(n int32) *TJ {
	b.hp().Epochs = ptr.To(n)
	return b
}

// BackoffLimit sets failurePolicy.backoffLimit and restartPolicy.
func (b *TJ) BackoffLimit(n int32, policy mlv1.RestartPolicy) *TJ {
	b.tj.Spec.FailurePolicy = &mlv1.FailurePolicy{BackoffLimit: ptr.To(n), RestartPolicy: policy}
	return b
}

// Checkpoints enables checkpoints every epoch on storage (nil: none named, so the operator chooses).
func (b *TJ) Checkpoints(storage *mlv1.CheckpointStorage) *TJ {
	b.tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Frequency: ptr.To[int32](1), Storage: storage}
	return b
}

// Suspend sets suspend.
func (b *TJ) Suspend(s bool) *TJ { b.tj.Spec.Suspend = ptr.To(s); return b }

// Queue names the Kueue LocalQueue in spec.scheduling.queueName.
func (b *TJ) Queue(q string) *TJ {
	if b.tj.Spec.Scheduling == nil {
		b.tj.Spec.Scheduling = &mlv1.SchedulingSpec{}
	}
	b.tj.Spec.Scheduling.QueueName = q
	return b
}

// Label sets a label of the TrainingJob.
func (b *TJ) Label(k, v string) *TJ {
	if b.tj.Labels == nil {
		b.tj.Labels = map[string]string{}
	}
	b.tj.Labels[k] = v
	return b
}

// With applies any change.
func (b *TJ) With(f func(*mlv1.TrainingJob)) *TJ { f(&b.tj); return b }

// Obj returns the TrainingJob built, with the spec's defaults applied (mlv1.TrainingJob.Default), as the
// controllers read it; Raw is it as written.
func (b *TJ) Obj() *mlv1.TrainingJob { return b.tj.Defaulted() }

// Raw returns the TrainingJob built, as a user writes it: no defaults applied.
func (b *TJ) Raw() *mlv1.TrainingJob { return b.tj.DeepCopy() }

func (b *TJ) hp() *mlv1.Hyperparameters {
	if b.tj.Spec.Hyperparameters == nil {
		b.tj.Spec.Hyperparameters = &mlv1.Hyperparameters{}
	}
	return b.tj.Spec.Hyperparameters
}
