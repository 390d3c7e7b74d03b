package integration

import (
	"context"
	"fmt"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestGangRestartSurvivesOperatorRestarts: the operator is killed at each point of a gang restart —
// before it saw the failure, after it recorded the new attempt but before it deleted the old Job, after it
// deleted the old Job but before it created the new one — and a new operator finishes the restart: one
// Job, of the next attempt, and the restart counted exactly once.
func TestGangRestartSurvivesOperatorRestarts(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	startControllerManager(t)
	stop := startOperator(t, ns)
	windows := []struct {
		name string
		// crash leaves what the killed operator had done of the restart.
		crash func(t *testing.T, tj *mlv1.TrainingJob)
	}{
		{"killed before it saw the failure", func(*testing.T, *mlv1.TrainingJob) {}},
		{"killed after recording the attempt", recordAttempt},
		{"killed after deleting the old Job", func(t *testing.T, tj *mlv1.TrainingJob) {
			recordAttempt(t, tj)
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: tj.Namespace, Name: names.JobName(tj)}}
			if err := env.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
				t.Fatal(err)
			}
		}},
	}
	var jobs []*mlv1.TrainingJob
	for i := range windows {
		tj := tjtest.NewTJ(ns, fmt.Sprintf("crash-%d", i)).Workers(2).GPUs(0).Image("busybox:1.36", "train").Obj()
		if err := env.Client.Create(ctx, tj); err != nil {
			t.Fatal(err)
		}
		for _, p := range workerPods(t, tj, 2) {
			setPodStatus(t, &p, corev1.PodRunning, running(), 0)
		}
		jobs = append(jobs, waitForState(t, client.ObjectKeyFromObject(tj), mlv1.StateRunning))
	}
	stop()
	for i, w := range windows {
		tj := jobs[i]
		pods := workerPods(t, tj, 2)
		setPodStatus(t, &pods[1], corev1.PodFailed, terminated(137, "OOMKilled"), 0)
		eventually(t, "the Job controller fails the attempt", func(ctx context.Context) error {
			job := &batchv1.Job{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: names.JobName(tj)}, job); err != nil {
				return err
			}
			for _, c := range job.Status.Conditions {
				if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("conditions %+v", job.Status.Conditions)
		})
		w.crash(t, tj)
	}
	startOperator(t, ns)
	for i, w := range windows {
		t.Run(w.name, func(t *testing.T) {
			tj := jobs[i]
			eventually(t, "one Job of attempt 1 and the restart counted once", func(ctx context.Context) error {
				var list batchv1.JobList
				if err := env.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{names.NameLabel: tj.Name}); err != nil {
					return err
				}
				got := &mlv1.TrainingJob{}
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tj), got); err != nil {
					return err
				}
				if len(list.Items) != 1 || list.Items[0].Labels[names.AttemptLabel] != "1" || got.Status.Attempt != 1 || got.Status.RestartCount != 1 {
					return fmt.Errorf("%d jobs (%v), attempt %d, restartCount %d", len(list.Items), attempts(list.Items), got.Status.Attempt, got.Status.RestartCount)
				}
				return nil
			})
			// The new attempt's workers run; the restart is over and still counted once.
			pods := workerPods(t, tj, 2)
			for i := range pods {
				setPodStatus(t, &pods[i], corev1.PodRunning, running(), 0)
			}
			got := waitForState(t, client.ObjectKeyFromObject(tj), mlv1.StateRunning)
			if got.Status.RestartCount != 1 || condition(got, mlv1.ConditionRestarting).Status != metav1.ConditionFalse {
				t.Errorf("after the restart: restartCount %d, Restarting %+v", got.Status.RestartCount, condition(got, mlv1.ConditionRestarting))
			}
		})
	}
}

// recordAttempt writes what the JobController writes when it decides a gang restart.
func recordAttempt(t *testing.T, tj *mlv1.TrainingJob) {
	t.Helper()
	eventually(t, "status write", func(ctx context.Context) error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tj), tj); err != nil {
			return err
		}
		tj.Status.Attempt, tj.Status.RestartCount, tj.Status.State = 1, 1, mlv1.StateInitializing
		tj.Status.LastFailure = "rank 1 exited with code 137 (OOMKilled)"
		meta.SetStatusCondition(&tj.Status.Conditions, metav1.Condition{Type: mlv1.ConditionRestarting, Status: metav1.ConditionTrue,
			Reason: "Restarting", Message: "restart 1/3: " + tj.Status.LastFailure + "; starting attempt 1"})
		return env.Client.Status().Update(ctx, tj)
	})
}

func attempts(jobs []batchv1.Job) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.Labels[names.AttemptLabel])
	}
	return out
}

// TestGangRestartBeforeEveryWorkerRan: a rank that fails while the others start (the job still
// Initializing, so the restart changes no state) still gets its new attempt: the new Job is created
// (a regression the chaos suite found: the restart's status write woke no controller).
func TestGangRestartBeforeEveryWorkerRan(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	startControllerManager(t)
	startOperator(t, ns)
	tj := tjtest.NewTJ(ns, "early").Workers(2).GPUs(0).Image("busybox:1.36", "train").Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	pods := workerPods(t, tj, 2)
	waitForState(t, client.ObjectKeyFromObject(tj), mlv1.StateInitializing)
	setPodStatus(t, &pods[0], corev1.PodRunning, running(), 0)
	setPodStatus(t, &pods[1], corev1.PodFailed, terminated(137, "OOMKilled"), 0)
	eventually(t, "a Job of attempt 1", func(ctx context.Context) error {
		job := &batchv1.Job{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: names.JobName(tj)}, job); err != nil {
			return err
		}
		if job.Labels[names.AttemptLabel] != "1" {
			return fmt.Errorf("job of attempt %q", job.Labels[names.AttemptLabel])
		}
		return nil
	})
}
