package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// step is a named point of a lifecycle, recognised from the TrainingJob as the API server holds it.
type step struct {
	name string
	at   func(*mlv1.TrainingJob) bool
}

// steps are the points of a gang-restart lifecycle at which the operator is killed, in order.
var steps = []step{
	{name: "accepted (first status write)", at: func(tj *mlv1.TrainingJob) bool { return tj.Status.State != "" }},
	{name: "Initializing", at: func(tj *mlv1.TrainingJob) bool {
		return tj.Status.State == mlv1.StateInitializing || tj.Status.State == mlv1.StateRunning
	}},
	{name: "Running", at: func(tj *mlv1.TrainingJob) bool { return tj.Status.State == mlv1.StateRunning }},
	{name: "checkpoint rotation", at: func(tj *mlv1.TrainingJob) bool {
		return tj.Status.Checkpoint != nil && tj.Status.Checkpoint.LatestEpoch >= 2
	}},
	{name: "gang restart recorded", at: func(tj *mlv1.TrainingJob) bool { return tj.Status.Attempt == 1 }},
	{name: "Completed", at: func(tj *mlv1.TrainingJob) bool { return tj.Status.State == mlv1.StateCompleted }},
}

// TestOperatorKilledAtEachStep: one gang-restart lifecycle with the operator SIGKILLed as soon as each
// named step is seen, and restarted a second later; then a TrainingJob deleted while the operator is down.
// The job ends as it would have, and the deleted job's children and series are gone.
func TestOperatorKilledAtEachStep(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	lc := lifecycles[1] // the gang restart
	tj := createJob(t, ns, lc)
	key := client.ObjectKeyFromObject(tj)
	var seen []string
	for _, s := range steps {
		got := &mlv1.TrainingJob{}
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if err := stack.Client.Get(ctx, key, got); err != nil {
				t.Fatal(err)
			}
			if s.at(got) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("step %q not reached (seen %v); status %+v", s.name, seen, got.Status)
			}
		}
		stack.KillOperator()
		seen = append(seen, s.name)
		time.Sleep(time.Second)
		if err := stack.StartOperator(); err != nil {
			t.Fatal(err)
		}
	}
	ok := checkJob(t, tj, lc, metricsAddr)
	if !ok {
		t.Errorf("killed at %v", seen)
	}
	record("operator SIGKILLed at each named step", "-", len(seen), 1, count(ok))

	gone := createJob(t, ns, lifecycles[0])
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		got := &mlv1.TrainingJob{}
		if err := stack.Client.Get(ctx, client.ObjectKeyFromObject(gone), got); err != nil {
			t.Fatal(err)
		}
		if got.Status.State == mlv1.StateRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second job never ran")
		}
	}
	stack.KillOperator()
	if err := stack.Client.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if err := stack.StartOperator(); err != nil {
		t.Fatal(err)
	}
	deleted := assertDeleted(t, gone)
	record("TrainingJob deleted while the operator is down", "-", 1, 1, count(deleted))
	t.Logf("steps report: operator killed at %v and after a deletion; the job ended correctly and the deleted one left nothing", seen)
}

// assertDeleted waits until a deleted job's Job is gone (owner references) and its series are dropped.
func assertDeleted(t *testing.T, tj *mlv1.TrainingJob) bool {
	t.Helper()
	series := fmt.Sprintf(`namespace=%q,training_job=%q`, tj.Namespace, tj.Name)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		err := stack.Client.Get(context.Background(), client.ObjectKey{Namespace: tj.Namespace, Name: names.JobName(tj)}, &batchv1.Job{})
		body, _ := scrapeMetrics()
		jobGone, seriesGone := apierrors.IsNotFound(err), !strings.Contains(body, series)
		if jobGone && seriesGone {
			return true
		}
		if time.Now().After(deadline) {
			t.Errorf("after deleting %s: Job gone %t, series gone %t", tj.Name, jobGone, seriesGone)
			return false
		}
	}
}
