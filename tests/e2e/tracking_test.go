package e2e

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking/mlflow"
	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking/mlflow/mlflowtest"
)

// TestMLflowTracksTheExampleTrainer: the example trainer's progress, read by the operator from rank 0,
// becomes the metrics of the job's MLflow run with step = epoch, each epoch at most once and with the
// value the trainer printed for it; the trainer's own metric (epoch_seconds) lands in the same run
// through MLFLOW_RUN_ID; the run is FINISHED when the job completes, and FAILED when a rank crashes.
func TestMLflowTracksTheExampleTrainer(t *testing.T) {
	s := mlflowtest.NewServer()
	defer s.Close()
	tracked := func(tj *mlv1.TrainingJob) { tj.Spec.Monitoring = &mlv1.MonitoringSpec{MLflowTrackingURI: s.URL} }

	t.Run("completed", func(t *testing.T) {
		ns, name := newNamespace(t), "tracked"
		create(t, trainerJob(ns, name, 2, 6, "--epoch-delay=400ms").With(tracked).Obj())
		tj := waitForState(t, ns, name, mlv1.StateCompleted, 3*time.Minute)
		run := waitForRunStatus(t, s, ns, name, mlflow.RunFinished)
		if run.Info.EndTime != tj.Status.CompletionTime.UnixMilli() {
			t.Errorf("run end %d, job completed at %d", run.Info.EndTime, tj.Status.CompletionTime.UnixMilli())
		}
		printed := losses(rankLog(t, ns, name, 0))
		history := s.History(run.Info.RunID, "loss")
		if len(history) < 3 {
			t.Errorf("only %d of 6 epochs logged (rank 0 is read every 300 ms, an epoch takes 400 ms or more): %v", len(history), history)
		}
		t.Logf("loss logged at steps %v", history)
		last := int64(0)
		for _, m := range history {
			want, ok := printed[int(m.Step)]
			if !ok || m.Step <= last || math.Abs(m.Value-want) > 1e-6 {
				t.Errorf("loss %g at step %d after step %d; rank 0 printed %g for epoch %d (printed: %v)", m.Value, m.Step, last, want, m.Step, printed)
			}
			last = m.Step
		}
		if mine := s.History(run.Info.RunID, "epoch_seconds"); len(mine) != 6 || mine[0].Step != 1 || mine[5].Step != 6 {
			t.Errorf("the trainer's own epoch_seconds in the run: %v, want steps 1 to 6", mine)
		}
		if log := rankLog(t, ns, name, 0); !strings.Contains(log, "logging to MLflow run "+run.Info.RunID) {
			t.Errorf("rank 0 did not get MLFLOW_RUN_ID %s:\n%s", run.Info.RunID, log)
		}
	})
	t.Run("crashed", func(t *testing.T) {
		ns, name := newNamespace(t), "crashes"
		create(t, trainerJob(ns, name, 2, 20, "--epoch-delay=500ms", "--fail-at=1:4:1").BackoffLimit(0, mlv1.RestartNever).With(tracked).Obj())
		waitForState(t, ns, name, mlv1.StateFailed, 3*time.Minute)
		run := waitForRunStatus(t, s, ns, name, mlflow.RunFailed)
		if len(s.History(run.Info.RunID, "loss")) == 0 {
			t.Errorf("no loss logged before the crash")
		}
	})
}

// waitForRunStatus waits for the job's run, named in its status, to have the status.
func waitForRunStatus(t *testing.T, s *mlflowtest.Server, ns, name, status string) mlflow.Run {
	t.Helper()
	var run mlflow.Run
	eventually(t, time.Minute, "run "+status, func() error {
		tj := getTJ(t, ns, name)
		if tj.Status.MLflow == nil {
			return fmt.Errorf("no run in the status")
		}
		var err error
		if run, err = (&mlflow.Client{BaseURL: s.URL}).GetRun(ctx, tj.Status.MLflow.RunID); err == nil && run.Info.Status != status {
			err = fmt.Errorf("run %+v", run.Info)
		}
		return err
	})
	return run
}
