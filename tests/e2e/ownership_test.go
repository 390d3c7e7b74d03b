package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking/mlflow/mlflowtest"
)

// TestManagedFieldsOwnership: after a run that every controller wrote to (workers and state, progress,
// checkpoints, an MLflow run), the API server's managedFields say that each status field and condition was
// written by its one owner of the ownership table (controllers.OwnershipViolations), with server-side
// apply, and that each of the four field managers wrote.
func TestManagedFieldsOwnership(t *testing.T) {
	s := mlflowtest.NewServer()
	defer s.Close()
	ns, name := newNamespace(t), "owned"
	create(t, claim(ns), trainerJob(ns, name, 2, 4, "--epoch-delay=300ms").With(withPVCCheckpoints(2)).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Monitoring = &mlv1.MonitoringSpec{MLflowTrackingURI: s.URL}
	}).Obj())
	waitForState(t, ns, name, mlv1.StateCompleted, 2*time.Minute)
	want := []string{"trainingjob", "trainingjob-checkpoint", "trainingjob-status", "trainingjob-tracking"}
	eventually(t, 30*time.Second, "the status written by its owners only, and by all four", func() error {
		tj := getTJ(t, ns, name)
		if v := controllers.OwnershipViolations(tj); len(v) > 0 {
			return fmt.Errorf("ownership violated: %s", strings.Join(v, "; "))
		}
		var wrote []string
		for _, e := range tj.ManagedFields {
			if e.Subresource == "status" && e.Operation == metav1.ManagedFieldsOperationApply {
				wrote = append(wrote, e.Manager)
			}
		}
		sort.Strings(wrote)
		if diff := cmp.Diff(want, wrote); diff != "" {
			return fmt.Errorf("status field managers (-want +got):\n%s", diff)
		}
		return nil
	})
}
