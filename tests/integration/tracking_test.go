package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking"
	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking/mlflow"
	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking/mlflow/mlflowtest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// trackingOptions make the TrackingController quick to give up and retry, as the server is on loopback.
func trackingOptions(cfg *controllers.Config) {
	cfg.MLflowTimeout, cfg.MLflowRetry = time.Second, 200*time.Millisecond
}

// mlflowRun reads the job's run from the fake server (as the status names it).
func mlflowRun(t *testing.T, s *mlflowtest.Server, auth string, tj *mlv1.TrainingJob) (mlv1.MLflowStatus, mlflow.Run) {
	t.Helper()
	var st mlv1.MLflowStatus
	var run mlflow.Run
	eventually(t, "the job's MLflow run in its status", func(ctx context.Context) error {
		got, err := getTJ(ctx, tj)
		if err != nil || got.Status.MLflow == nil {
			return fmt.Errorf("status.mlflow %+v (%v)", got.Status.MLflow, err)
		}
		st = *got.Status.MLflow
		run, err = (&mlflow.Client{BaseURL: s.URL, Authorization: auth}).GetRun(ctx, st.RunID)
		return err
	})
	return st, run
}

// waitLogged waits until the status says epoch is logged.
func waitLogged(t *testing.T, tj *mlv1.TrainingJob, epoch int32) *mlv1.TrainingJob {
	t.Helper()
	var got *mlv1.TrainingJob
	eventually(t, fmt.Sprintf("epoch %d logged", epoch), func(ctx context.Context) error {
		var err error
		if got, err = getTJ(ctx, tj); err != nil || got.Status.MLflow == nil || got.Status.MLflow.LoggedEpoch != epoch {
			return fmt.Errorf("status.mlflow %+v, epoch %d (%v)", got.Status.MLflow, got.Status.CurrentEpoch, err)
		}
		return nil
	})
	return got
}

func steps(h []mlflowtest.Metric) []string {
	var out []string
	for _, m := range h {
		out = append(out, fmt.Sprintf("%d:%g", m.Step, m.Value))
	}
	return out
}

func tagMap(tags []mlflow.Tag) map[string]string {
	m := map[string]string{}
	for _, t := range tags {
		m[t.Key] = t.Value
	}
	return m
}

// TestMLflowRunFollowsTheJob: a tracked job gets its run before its workers start (its ids in the
// ConfigMap, the workers' env refers to them), tagged and with the hyperparameters as params; every new
// epoch rank 0 reports is logged once with step = epoch, through a storm of 429s and an operator restart;
// the newest checkpoint is tagged; the run is FINISHED at the job's completion time; the credentials from
// the Secret are sent and appear nowhere in the API.
func TestMLflowRunFollowsTheJob(t *testing.T) {
	const token = "tok-7f3a9c1e"
	s := mlflowtest.NewServer()
	defer s.Close()
	s.Authorization = "Bearer " + token
	ns := newNamespace(t)
	startControllerManager(t)
	stop := startOperator(t, ns, trackingOptions)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mlflow", Namespace: ns},
		StringData: map[string]string{builders.MLflowTokenKey: token}}
	if err := env.Client.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	rank0 := newFakeRank0(t)
	rank0.set(map[string]float64{"training_epochs_total": 10})
	tj := startMonitoredJob(t, ns, "tracked", rank0, func(tj *mlv1.TrainingJob) {
		tj.Spec.Monitoring.MLflowTrackingURI, tj.Spec.Monitoring.MLflowCredentialsSecret = s.URL, "mlflow"
		tj.Spec.Hyperparameters.AdditionalParams = map[string]string{"dropout": "0.1"}
	})
	st, run := mlflowRun(t, s, s.Authorization, tj)

	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: names.ConfigMapName(tj)}, cm); err != nil {
		t.Fatal(err)
	}
	type tracked struct {
		ConfigMapRunID, ConfigMapExperimentID, RunName, RunStatus, Link string
	}
	got := tracked{
		ConfigMapRunID:        cm.Data[names.MLflowRunIDKey],
		ConfigMapExperimentID: cm.Data[names.MLflowExperimentIDKey],
		RunName:               run.Info.RunName,
		RunStatus:             run.Info.Status,
		Link:                  st.URL,
	}
	want := tracked{
		ConfigMapRunID:        st.RunID,
		ConfigMapExperimentID: st.ExperimentID,
		RunName:               "tracked",
		RunStatus:             mlflow.RunRunning,
		Link:                  s.URL + "/#/experiments/" + st.ExperimentID + "/runs/" + st.RunID,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ConfigMap run and experiment ids, run name and status, link (-want +got):\n%s", diff)
	}
	type tagged struct {
		UIDTag, NamespaceTag, NumWorkersTag, EpochsParam, DropoutParam string
	}
	tags, params := tagMap(run.Data.Tags), tagMap(run.Data.Params)
	gotTags := tagged{
		UIDTag:        tags[tracking.UIDTag],
		NamespaceTag:  tags["trainingjob.namespace"],
		NumWorkersTag: tags["trainingjob.num_workers"],
		EpochsParam:   params["epochs"],
		DropoutParam:  params["dropout"],
	}
	wantTags := tagged{UIDTag: string(tj.UID), NamespaceTag: ns, NumWorkersTag: "2", EpochsParam: "10", DropoutParam: "0.1"}
	if diff := cmp.Diff(wantTags, gotTags); diff != "" {
		t.Errorf("tags %v params %v (-want +got):\n%s", tags, params, diff)
	}
	if row := table(t, ns).Rows[0].Cells; row[len(row)-1] != st.URL {
		t.Errorf("kubectl get -o wide: last column %v, want the run's link %s", row[len(row)-1], st.URL)
	}
	mc := &mlflow.Client{BaseURL: s.URL, Authorization: s.Authorization}
	if exp, err := mc.GetExperimentByName(context.Background(), ns); err != nil || exp.ID != st.ExperimentID {
		t.Errorf("experiment named after the namespace: %+v (%v), want id %s", exp, err, st.ExperimentID)
	}

	for epoch := 1; epoch <= 3; epoch++ {
		if epoch == 2 {
			s.FailNext(http.StatusTooManyRequests, http.StatusTooManyRequests, http.StatusTooManyRequests, http.StatusServiceUnavailable)
		}
		rank0.set(map[string]float64{"training_epoch": float64(epoch), "training_loss": 1 / float64(epoch),
			"training_accuracy": 0.5 + float64(epoch)/10})
		waitLogged(t, tj, int32(epoch))
	}
	stop()
	startOperator(t, ns, trackingOptions) // stopped at the test's cleanup
	rank0.set(map[string]float64{"training_epoch": 4, "training_loss": 0.25})
	waitLogged(t, tj, 4)
	// Workers restarted from the checkpoint of epoch 2 report epochs 3 and 4 again: not logged twice.
	for _, e := range []struct{ epoch, loss float64 }{{epoch: 3, loss: 0.3}, {epoch: 4, loss: 0.24}, {epoch: 5, loss: 0.2}} {
		rank0.set(map[string]float64{"training_epoch": e.epoch, "training_loss": e.loss})
		eventually(t, fmt.Sprintf("epoch %g read", e.epoch), func(ctx context.Context) error {
			got, err := getTJ(ctx, tj)
			if err == nil && got.Status.CurrentEpoch != int32(e.epoch) {
				err = fmt.Errorf("epoch %d", got.Status.CurrentEpoch)
			}
			return err
		})
	}
	waitLogged(t, tj, 5)
	if diff := cmp.Diff([]string{"1:1", "2:0.5", "3:0.3333333333333333", "4:0.25", "5:0.2"}, steps(s.History(st.RunID, "loss"))); diff != "" {
		t.Errorf("loss history step:value, each epoch once through 429s, an operator restart and a gang restart (-want +got):\n%s", diff)
	}

	// The checkpoint is reported by the CheckpointController; here the test writes what it would.
	patchStatus(t, tj, func(st *mlv1.TrainingJobStatus) {
		st.Checkpoint = &mlv1.CheckpointStatus{Latest: "/checkpoints/tracked/checkpoint-epoch-4", LatestEpoch: 4}
	})
	eventually(t, "checkpoint tag", func(ctx context.Context) error {
		run, err := (&mlflow.Client{BaseURL: s.URL, Authorization: s.Authorization}).GetRun(ctx, st.RunID)
		if err == nil && tagMap(run.Data.Tags)[tracking.CheckpointTag] != "/checkpoints/tracked/checkpoint-epoch-4" {
			err = fmt.Errorf("tags %v", tagMap(run.Data.Tags))
		}
		return err
	})

	for _, p := range workerPods(t, tj, 2) {
		setPodStatus(t, &p, corev1.PodSucceeded, terminated(0, "Completed"), 0)
	}
	done := waitForState(t, client.ObjectKeyFromObject(tj), mlv1.StateCompleted)
	eventually(t, "run FINISHED", func(ctx context.Context) error {
		got, err := getTJ(ctx, tj)
		if err != nil || got.Status.MLflow.RunStatus != mlflow.RunFinished ||
			condition(got, mlv1.ConditionExperimentTracked).Reason != derive.ReasonRunClosed {
			return fmt.Errorf("status.mlflow %+v, condition %+v (%v)",
				got.Status.MLflow, condition(got, mlv1.ConditionExperimentTracked), err)
		}
		done = got
		return nil
	})
	_, run = mlflowRun(t, s, s.Authorization, tj)
	type ended struct {
		Status  string
		EndTime int64
	}
	wantEnd := ended{Status: mlflow.RunFinished, EndTime: done.Status.CompletionTime.UnixMilli()}
	if diff := cmp.Diff(wantEnd, ended{Status: run.Info.Status, EndTime: run.Info.EndTime}); diff != "" {
		t.Errorf("run %+v, want FINISHED at the completion time (-want +got):\n%s", run.Info, diff)
	}
	assertNoSecret(t, done, token)
	reasons, err := eventReasons(context.Background(), done)
	if err != nil || !slices.Contains(reasons, "Normal/"+derive.ReasonRunActive) ||
		!slices.Contains(reasons, "Normal/"+derive.ReasonRunClosed) {
		t.Errorf("events %v (%v), want RunActive and RunClosed", reasons, err)
	}
}

// patchStatus changes the status as another controller would.
func patchStatus(t *testing.T, tj *mlv1.TrainingJob, f func(*mlv1.TrainingJobStatus)) {
	t.Helper()
	eventually(t, "status write", func(ctx context.Context) error {
		got, err := getTJ(ctx, tj)
		if err != nil {
			return err
		}
		f(&got.Status)
		return env.Client.Status().Update(ctx, got)
	})
}

// assertNoSecret: the token is in no status, ConfigMap, event or Job of the job.
func assertNoSecret(t *testing.T, tj *mlv1.TrainingJob, token string) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: tj.Namespace, Name: names.ConfigMapName(tj)}, cm); err != nil {
		t.Fatal(err)
	}
	notes, err := eventNotes(context.Background(), tj)
	if err != nil {
		t.Fatal(err)
	}
	job := getJob(t, tj)
	for what, v := range map[string]any{"status": tj.Status, "configmap": cm.Data, "events": notes, "job": job.Spec} {
		data, _ := json.Marshal(v)
		if strings.Contains(string(data), token) {
			t.Errorf("the token appears in the %s: %s", what, data)
		}
	}
}

// TestMLflowServerDownDoesNotHoldTheJob: with the tracking server down the workers start after one
// attempt (without a run id), ExperimentTracked says why with a Warning event; when the server is back the
// run is created, its ids reach the ConfigMap, and the metrics still in the status are logged.
func TestMLflowServerDownDoesNotHoldTheJob(t *testing.T) {
	s := mlflowtest.NewServer()
	defer s.Close()
	s.Down(true)
	ns := newNamespace(t)
	startControllerManager(t)
	startOperator(t, ns, trackingOptions)
	rank0 := newFakeRank0(t)
	rank0.set(map[string]float64{"training_epochs_total": 10, "training_epoch": 2, "training_loss": 0.5})
	tj := startMonitoredJob(t, ns, "down", rank0, func(tj *mlv1.TrainingJob) { tj.Spec.Monitoring.MLflowTrackingURI = s.URL })
	got, err := getTJ(context.Background(), tj)
	if err != nil {
		t.Fatal(err)
	}
	c := condition(got, mlv1.ConditionExperimentTracked)
	if c.Status != metav1.ConditionFalse || c.Reason != derive.ReasonTrackingServerUnavailable ||
		!strings.Contains(c.Message, "the training goes on") {
		t.Errorf("ExperimentTracked %+v while the server is down", c)
	}
	eventually(t, "Warning event", func(ctx context.Context) error {
		reasons, err := eventReasons(ctx, got)
		if err == nil && !slices.Contains(reasons, "Warning/"+derive.ReasonTrackingServerUnavailable) {
			err = fmt.Errorf("events %v", reasons)
		}
		return err
	})
	s.Down(false)
	got = waitLogged(t, tj, 2)
	if c := condition(got, mlv1.ConditionExperimentTracked); c.Status != metav1.ConditionTrue {
		t.Errorf("ExperimentTracked %+v once the server answers", c)
	}
	if diff := cmp.Diff([]string{"2:0.5"}, steps(s.History(got.Status.MLflow.RunID, "loss"))); diff != "" {
		t.Errorf("loss caught up (-want +got):\n%s", diff)
	}
	eventually(t, "run id in the ConfigMap", func(ctx context.Context) error {
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: names.ConfigMapName(tj)}, cm); err != nil {
			return err
		}
		if cm.Data[names.MLflowRunIDKey] != got.Status.MLflow.RunID {
			return fmt.Errorf("configmap data %v", cm.Data)
		}
		return nil
	})
}

// TestMLflowRunFoundAgain: an operator stopped after creating a job's run and before recording it (here
// the run exists before any operator sees the job) adopts that run and the last epoch it logged: one run,
// no epoch twice.
func TestMLflowRunFoundAgain(t *testing.T) {
	s := mlflowtest.NewServer()
	defer s.Close()
	ns := newNamespace(t)
	tj := tjtest.NewTJ(ns, "again").Workers(1).GPUs(0).Image("busybox:1.36", "train").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Monitoring = &mlv1.MonitoringSpec{MLflowTrackingURI: s.URL}
	}).Obj()
	ctx := context.Background()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	c := &mlflow.Client{BaseURL: s.URL}
	exp, err := c.EnsureExperiment(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	earlier, err := c.CreateRun(ctx, exp, tj.Name, time.Now(), []mlflow.Tag{{Key: tracking.UIDTag, Value: string(tj.UID)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.LogBatch(ctx, earlier.RunID, []mlflow.Metric{{Key: "loss", Value: 0.9, Timestamp: 1, Step: 3}}, nil,
		[]mlflow.Tag{{Key: tracking.LoggedEpochTag, Value: "3"}}); err != nil {
		t.Fatal(err)
	}
	startOperator(t, ns, trackingOptions)
	st, _ := mlflowRun(t, s, "", tj)
	type resumed struct {
		RunID       string
		LoggedEpoch int32
		Runs        int
	}
	want := resumed{RunID: earlier.RunID, LoggedEpoch: 3, Runs: 1}
	if diff := cmp.Diff(want, resumed{RunID: st.RunID, LoggedEpoch: st.LoggedEpoch, Runs: len(s.Runs(exp))}); diff != "" {
		t.Errorf("status.mlflow %+v: want the earlier run, epoch 3 logged, one run (-want +got):\n%s", st, diff)
	}
}

// TestMLflowRunEnds: the operator's default server and Secret track jobs that name none; two jobs
// created at once share one new experiment; a failed job's run is FAILED, a job deleted while running
// KILLED.
func TestMLflowRunEnds(t *testing.T) {
	const user, password = "ops", "pw-91d2"
	s := mlflowtest.NewServer()
	defer s.Close()
	s.Authorization = "Basic b3BzOnB3LTkxZDI=" // ops:pw-91d2
	ns := newNamespace(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "operator-mlflow", Namespace: ns},
		StringData: map[string]string{builders.MLflowUsernameKey: user, builders.MLflowPasswordKey: password}}
	ctx := context.Background()
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	startControllerManager(t)
	startOperator(t, ns, trackingOptions, func(cfg *controllers.Config) {
		cfg.Builders.MLflowTrackingURI, cfg.MLflowCredentials = s.URL, client.ObjectKeyFromObject(secret)
	})
	var jobs []*mlv1.TrainingJob
	var wg sync.WaitGroup
	for _, name := range []string{"fails", "deleted"} {
		tj := tjtest.NewTJ(ns, name).Workers(1).GPUs(0).Image("busybox:1.36", "train").BackoffLimit(0, mlv1.RestartNever).
			With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Monitoring = &mlv1.MonitoringSpec{MLflowExperiment: "shared-" + ns}
			}).Obj()
		jobs = append(jobs, tj)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := env.Client.Create(ctx, tj); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, tj := range jobs {
		pod := workerPods(t, tj, 1)[0]
		setPodStatus(t, &pod, corev1.PodRunning, running(), 0)
		waitForState(t, client.ObjectKeyFromObject(tj), mlv1.StateRunning)
	}
	failing, deleted := jobs[0], jobs[1]
	fst, _ := mlflowRun(t, s, s.Authorization, failing)
	dst, _ := mlflowRun(t, s, s.Authorization, deleted)
	type shared struct {
		ExperimentID string
		Runs         int
	}
	want := shared{ExperimentID: fst.ExperimentID, Runs: 2}
	if diff := cmp.Diff(want, shared{ExperimentID: dst.ExperimentID, Runs: len(s.Runs(fst.ExperimentID))}); diff != "" {
		t.Errorf("the deleted job's experiment and the runs in the failing job's %s: "+
			"want one shared experiment with two runs (-want +got):\n%s", fst.ExperimentID, diff)
	}
	pod := workerPods(t, failing, 1)[0]
	setPodStatus(t, &pod, corev1.PodFailed, terminated(1, "Error"), 0)
	waitForState(t, client.ObjectKeyFromObject(failing), mlv1.StateFailed)
	if err := env.Client.Delete(ctx, deleted); err != nil {
		t.Fatal(err)
	}
	c := &mlflow.Client{BaseURL: s.URL, Authorization: s.Authorization}
	eventually(t, "runs FAILED and KILLED", func(ctx context.Context) error {
		var got []string
		for _, id := range []string{fst.RunID, dst.RunID} {
			run, err := c.GetRun(ctx, id)
			if err != nil {
				return err
			}
			got = append(got, run.Info.Status)
		}
		if diff := cmp.Diff([]string{mlflow.RunFailed, mlflow.RunKilled}, got); diff != "" {
			return fmt.Errorf("run statuses (-want +got):\n%s", diff)
		}
		return nil
	})
}
