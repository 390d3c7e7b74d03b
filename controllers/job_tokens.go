package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// ensureTokenSecret creates the job's token Secret (builders.TokenSecret), owned by the job, before the
// Job whose workers read it. The operator derives the tokens again from its key; it reads an existing
// Secret of the name (uncached) only to see that the job controls it: one made by someone else (squatted
// before the job) would hand the workers tokens the operator does not hold, and the Job is not created.
func (r *JobReconciler) ensureTokenSecret(ctx context.Context, tj *mlv1.TrainingJob) error {
	secret := builders.TokenSecret(tj, r.Options)
	if secret == nil {
		return nil
	}
	if err := controllerutil.SetControllerReference(tj, secret, r.Scheme); err != nil {
		return fmt.Errorf("setting owner of Secret %s: %w", secret.Name, err)
	}
	err := r.Create(ctx, secret)
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("creating Secret %s: %w", secret.Name, err)
		}
		return nil
	}
	held := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(secret), held); err != nil {
		return fmt.Errorf("reading Secret %s: %w", secret.Name, err)
	}
	if !metav1.IsControlledBy(held, tj) {
		return &specError{fmt.Errorf("the operator refuses to start the workers: the Secret %s, which would hold the job's tokens, "+
			"exists and is not this job's (made before it, by someone else); delete it", secret.Name)}
	}
	return nil
}
