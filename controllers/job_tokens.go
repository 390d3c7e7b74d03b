package controllers

import (
	"context"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// ensureTokenSecret creates the job's token Secret (builders.TokenSecret), owned by the job, before the
// Job whose workers read it. It never reads an existing one: the operator derives the tokens again from
// its key, so it needs no read access to Secrets.
func (r *JobReconciler) ensureTokenSecret(ctx context.Context, tj *mlv1.TrainingJob) error {
	secret := builders.TokenSecret(tj, r.Options)
	if secret == nil {
		return nil
	}
	return r.createOwned(ctx, tj, secret)
}
