package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// The PodGroup of a gang-scheduled job (Volcano or the scheduler-plugins coscheduler), created from
// builders.PodGroup as an unstructured object so neither scheduler's API is a dependency.
// +kubebuilder:rbac:groups=scheduling.volcano.sh;scheduling.x-k8s.io,resources=podgroups,verbs=get;create

// ensurePodGroup creates the workers' PodGroup when the job is gang-scheduled. If the cluster does
// not serve the PodGroup API, it returns an error naming it, so the job says why its workers wait.
func (r *JobReconciler) ensurePodGroup(ctx context.Context, tj *mlv1.TrainingJob) error {
	want := builders.PodGroup(tj, r.options(ctx))
	if want == nil {
		return nil
	}
	current := &unstructured.Unstructured{}
	current.SetGroupVersionKind(want.GroupVersionKind())
	found, err := getOptional(ctx, r.Client, client.ObjectKeyFromObject(want), current)
	if err == nil && !found {
		err = r.createOwned(ctx, tj, want)
	}
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		return &missingAPIError{
			fmt.Errorf("the %s API is not served by this cluster: install %s's CRDs, or remove scheduling.gang and the gang schedulerName: %w",
				want.GroupVersionKind().GroupKind(), builders.GangScheduler(tj), err),
		}
	}
	return err
}

// missingAPIError is a child whose API the cluster does not serve: like an admission rejection, it
// repeats until the cluster changes, and the job stays Pending saying so.
type missingAPIError struct{ error }

func (e *missingAPIError) Unwrap() error { return e.error }
