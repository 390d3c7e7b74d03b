package controllers

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking"
	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking/mlflow"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// TrackingReconciler is the TrackingController. It keeps one MLflow run per tracked TrainingJob,
// found again by the job's uid tag, logs rank 0's metrics per epoch, tags the newest checkpoint and
// closes the run when the job ends. It alone writes status.mlflow, ExperimentTracked and the
// ConfigMap's MLFLOW_RUN_ID and MLFLOW_EXPERIMENT_ID. An unreachable server never stops training:
// the condition says so and it retries after Retry.
type TrackingReconciler struct {
	// writes remembers this process's status writes, shared by the four controllers (statusWrites).
	writes *statusWrites
	client.Client
	// APIReader reads credential Secrets (not cached: the operator holds no Secret in memory).
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.Clock
	Options   builders.Options
	// Credentials is the operator-wide Secret with the tracking credentials, for jobs that name none.
	Credentials client.ObjectKey
	HTTP        *http.Client
	// Timeout bounds the calls of one reconcile to the tracking server; Retry is the wait after a
	// failure.
	Timeout, Retry time.Duration
	Workers        int

	// runs is what this process knows of each tracked job's run (*trackedRun by NamespacedName), such
	// as a status write lost to a conflict or the run of a deleted job.
	runs sync.Map
}

// trackedRun is what the TrackingController remembers of a job's run. A job has one reconcile at a
// time, so no two goroutines share a trackedRun.
type trackedRun struct {
	uid    types.UID
	job    *mlv1.TrainingJob // identity and monitoring, for the credentials when the job is gone
	status mlv1.MLflowStatus
	// synced: the last epoch logged was read from the run's tags in this process.
	synced bool
	// checkpoint is the newest checkpoint tagged by this process; closeTries counts the attempts to
	// close the run of a deleted job.
	checkpoint string
	closeTries int
}

// maxCloseTries bounds the attempts to mark the run of a deleted job KILLED.
const maxCloseTries = 10

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

// Reconcile keeps a job's MLflow run in step with its status. Its steps:
//  1. get the TrainingJob (a deleted job's run is closed as KILLED) and its tracking server (none:
//     done);
//  2. wait while the cache has not seen this process's last status write;
//  3. bring the run in step with the status (create it, log progress, end it) and set
//     ExperimentTracked;
//  4. write the status, once, when it changed, with an event on a change of ExperimentTracked;
//  5. put the run into the ConfigMap's keys from the status as written; retry a failed call later.
func (r *TrackingReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	// 1. Get the TrainingJob.
	tj := &mlv1.TrainingJob{}
	found, err := getManagedTrainingJob(ctx, r.Client, req.NamespacedName, tj)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !found || !tj.DeletionTimestamp.IsZero() {
		return r.closeDeleted(ctx, req.NamespacedName), nil
	}
	uri := r.trackingURI(tj)
	if uri == "" {
		return reconcile.Result{}, nil
	}
	// 2. Wait for the cache to see our last status write.
	if r.writes.behind(tj) {
		return reconcile.Result{RequeueAfter: cacheLag}, nil
	}
	// 3. Bring the run in step with the status.
	old := *tj.Status.DeepCopy()
	terr := r.keepInStep(ctx, tj, uri, r.remember(tj))
	derive.ApplyTracking(&tj.Status, terr, r.Retry, metav1.NewTime(r.Clock.Now()))
	// 4. Write the status.
	written, res, err := applyStatus(ctx, r.Client, r.writes, tj, old, trackingController)
	if written {
		r.recordEvents(tj, old)
	}
	if err != nil || res.Requeue { //nolint:staticcheck // a conflict: compute again on the object as it is now
		return res, err
	}
	// 5. Put the run into the ConfigMap.
	if err := r.syncConfigMap(ctx, tj); err != nil {
		return result(reconcile.Result{}, err)
	}
	if terr != nil {
		return reconcile.Result{RequeueAfter: r.Retry}, nil
	}
	return reconcile.Result{}, nil
}

// trackingURI returns the server of the job's run: the one recorded with the run, else the spec's
// or the operator's default.
func (r *TrackingReconciler) trackingURI(tj *mlv1.TrainingJob) string {
	if m := tj.Status.MLflow; m != nil {
		return m.TrackingURI
	}
	return builders.MLflowTrackingURI(tj, r.Options)
}

// remember returns what this process knows of the job's run, after merging it with tj.Status both
// ways.
func (r *TrackingReconciler) remember(tj *mlv1.TrainingJob) *trackedRun {
	v, _ := r.runs.LoadOrStore(client.ObjectKeyFromObject(tj), &trackedRun{uid: tj.UID})
	run := v.(*trackedRun)
	// A new job of the same name.
	if run.uid != tj.UID {
		*run = trackedRun{uid: tj.UID}
	}
	run.job = &mlv1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: tj.Namespace, Name: tj.Name, UID: tj.UID},
		Spec:       mlv1.TrainingJobSpec{Monitoring: tj.Spec.Monitoring},
	}
	st := tj.Status.MLflow
	switch {
	case st == nil && run.status.RunID != "":
		tj.Status.MLflow = run.status.DeepCopy()
	case st != nil && st.RunID == run.status.RunID:
		st.LoggedEpoch = max(st.LoggedEpoch, run.status.LoggedEpoch)
		if closed(run.status.RunStatus) {
			st.RunStatus = run.status.RunStatus
		}
	}
	if tj.Status.MLflow != nil {
		run.status = *tj.Status.MLflow
	}
	return run
}

// keepInStep makes the calls the job's run needs within Timeout, and records the outcome in
// tj.Status.MLflow and run.
func (r *TrackingReconciler) keepInStep(ctx context.Context, tj *mlv1.TrainingJob, uri string, run *trackedRun) error {
	if !r.due(tj, run) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	c, err := r.client(ctx, tj, uri)
	if err != nil {
		return err
	}
	steps := []func(context.Context, *mlflow.Client, *mlv1.TrainingJob, *trackedRun) error{r.ensureRun, r.logProgress, r.closeRun}
	for _, step := range steps {
		err = step(ctx, c, tj, run)
		if tj.Status.MLflow != nil {
			run.status = *tj.Status.MLflow
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// due reports whether the run lacks something the status holds, or the last failure is due for a
// retry.
func (r *TrackingReconciler) due(tj *mlv1.TrainingJob, run *trackedRun) bool {
	m, st := tj.Status.MLflow, &tj.Status
	if m == nil || derive.ConditionReason(*st, mlv1.ConditionExperimentTracked) != derive.ReasonRunActive && !closed(m.RunStatus) {
		return true
	}
	return newEpoch(tj, m) || (st.Checkpoint != nil && checkpointLatest(tj) != run.checkpoint) ||
		(tracking.FinalStatus(st.State) != "" && m.RunStatus != tracking.FinalStatus(st.State))
}

// newEpoch reports whether rank 0 reported metrics of an epoch not logged yet, or the job ended
// with none logged. The epoch is the one the metrics were read at, not currentEpoch.
func newEpoch(tj *mlv1.TrainingJob, m *mlv1.MLflowStatus) bool {
	st := &tj.Status
	if st.Metrics == nil {
		return false
	}
	e := st.Metrics.Epoch
	return e > m.LoggedEpoch || (e == 0 && m.LoggedEpoch == 0 && tracking.FinalStatus(st.State) != "" && !closed(m.RunStatus))
}

// client returns a client for the tracking server at uri, with the credentials
// tracking.CredentialsSecret chooses. A uri mlflow.ParseBaseURL refuses gets no client, and the
// error names its field.
func (r *TrackingReconciler) client(ctx context.Context, tj *mlv1.TrainingJob, uri string) (*mlflow.Client, error) {
	if _, err := mlflow.ParseBaseURL(uri); err != nil {
		return nil, fmt.Errorf("%s: %w", uriField(tj), err)
	}
	var own client.ObjectKey
	if name := builders.MLflowCredentialsSecret(tj); name != "" {
		own = client.ObjectKey{Namespace: tj.Namespace, Name: name}
	}
	auth, err := r.authorization(ctx, tracking.CredentialsSecret(uri, own, r.Options.MLflowTrackingURI, r.Credentials))
	return r.newClient(uri, auth), err
}

// uriField returns where the job's tracking URI is set: its spec, else the operator's flag.
func uriField(tj *mlv1.TrainingJob) string {
	if m := tj.Spec.Monitoring; m.MLflowTrackingURI != "" {
		return "spec.monitoring.mlflowTrackingUri"
	}
	return "--mlflow-tracking-uri"
}

// newClient returns a client for the tracking server at uri that sends auth and retries within
// Timeout.
func (r *TrackingReconciler) newClient(uri, auth string) *mlflow.Client {
	return &mlflow.Client{BaseURL: uri, HTTP: r.HTTP, Authorization: auth, MaxBackoff: r.Timeout / 4}
}

// authorization returns the Authorization header from the Secret key, or "" for the zero key: a
// bearer token or basic auth. It never appears in errors.
func (r *TrackingReconciler) authorization(ctx context.Context, key client.ObjectKey) (string, error) {
	if key.Name == "" {
		return "", nil
	}
	s := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, key, s); apierrors.IsNotFound(err) {
		return "", &derive.MissingCredentialsError{Message: fmt.Sprintf("secret %s with the MLflow credentials does not exist", key)}
	} else if err != nil {
		return "", fmt.Errorf("reading secret %s with the MLflow credentials: %w", key, err)
	}
	if token := s.Data[builders.MLflowTokenKey]; len(token) > 0 {
		return "Bearer " + string(token), nil
	}
	if user := s.Data[builders.MLflowUsernameKey]; len(user) > 0 {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(string(user)+":"+string(s.Data[builders.MLflowPasswordKey]))), nil
	}
	return "", &derive.MissingCredentialsError{
		Message: fmt.Sprintf("secret %s has neither %s nor %s", key, builders.MLflowTokenKey, builders.MLflowUsernameKey),
	}
}

// ensureRun finds or creates the experiment and the job's run when the status names none. It adopts
// a run found by the uid tag with its last logged epoch, and logs params when the run has none.
func (r *TrackingReconciler) ensureRun(ctx context.Context, c *mlflow.Client, tj *mlv1.TrainingJob, run *trackedRun) error {
	if tj.Status.MLflow != nil {
		return nil
	}
	name := builders.MLflowExperiment(tj)
	exp, err := c.EnsureExperiment(ctx, name)
	if err != nil {
		return fmt.Errorf("finding or creating MLflow experiment %q: %w", name, err)
	}
	info, found, err := c.FindRunByTag(ctx, exp, tracking.UIDTag, string(tj.UID))
	if err != nil {
		return fmt.Errorf("looking for the job's MLflow run: %w", err)
	}
	logged, params := int32(0), true
	if found {
		got, err := c.GetRun(ctx, info.RunID)
		if err != nil {
			return fmt.Errorf("reading MLflow run %s: %w", info.RunID, err)
		}
		logged, params = tracking.LoggedEpoch(got.Data.Tags), len(got.Data.Params) == 0
	} else if info, err = c.CreateRun(ctx, exp, tj.Name, tj.CreationTimestamp.Time, tracking.RunTags(tj, r.Options)); err != nil {
		return fmt.Errorf("creating the job's MLflow run: %w", err)
	}
	if p := tracking.Params(tj); params && len(p) > 0 {
		if err := c.LogBatch(ctx, info.RunID, nil, p, nil); err != nil {
			return fmt.Errorf("logging the hyperparameters to MLflow run %s: %w", info.RunID, err)
		}
	}
	run.synced = true
	tj.Status.MLflow = &mlv1.MLflowStatus{TrackingURI: c.BaseURL, ExperimentID: exp, RunID: info.RunID,
		URL: tracking.RunURL(c.BaseURL, exp, info.RunID), RunStatus: info.Status, LoggedEpoch: logged}
	return nil
}

// logProgress logs the metrics of an epoch not logged yet and tags a newer checkpoint. It first
// reads the last logged epoch from the run, so a crash never logs an epoch twice.
func (r *TrackingReconciler) logProgress(ctx context.Context, c *mlflow.Client, tj *mlv1.TrainingJob, run *trackedRun) error {
	m, st := tj.Status.MLflow, &tj.Status
	if !run.synced && newEpoch(tj, m) {
		got, err := c.GetRun(ctx, m.RunID)
		if err != nil {
			return fmt.Errorf("reading MLflow run %s: %w", m.RunID, err)
		}
		m.LoggedEpoch, run.synced = max(m.LoggedEpoch, tracking.LoggedEpoch(got.Data.Tags)), true
	}
	var metrics []mlflow.Metric
	var tags []mlflow.Tag
	if newEpoch(tj, m) {
		metrics = tracking.EpochMetrics(st, r.Clock.Now())
		tags = append(tags, mlflow.Tag{Key: tracking.LoggedEpochTag, Value: strconv.Itoa(int(st.Metrics.Epoch))})
	}
	latest := checkpointLatest(tj)
	if latest != run.checkpoint {
		tags = append(tags, tracking.CheckpointTags(st)...)
	}
	if len(tags) == 0 {
		return nil
	}
	if err := c.LogBatch(ctx, m.RunID, metrics, nil, tags); err != nil {
		return fmt.Errorf("logging epoch %d to MLflow run %s: %w", st.Metrics.Epoch, m.RunID, err)
	}
	if len(metrics) > 0 {
		m.LoggedEpoch = st.Metrics.Epoch
	}
	run.checkpoint = latest
	return nil
}

// closeRun ends the run as the job ended, at its completion time.
func (r *TrackingReconciler) closeRun(ctx context.Context, c *mlflow.Client, tj *mlv1.TrainingJob, _ *trackedRun) error {
	m, want := tj.Status.MLflow, tracking.FinalStatus(tj.Status.State)
	if want == "" || m.RunStatus == want {
		return nil
	}
	end := r.Clock.Now()
	if t := tj.Status.CompletionTime; t != nil {
		end = t.Time
	}
	if err := c.UpdateRun(ctx, m.RunID, want, end); err != nil {
		return fmt.Errorf("closing MLflow run %s as %s: %w", m.RunID, want, err)
	}
	m.RunStatus = want
	return nil
}

func closed(runStatus string) bool {
	return runStatus == mlflow.RunFinished || runStatus == mlflow.RunFailed || runStatus == mlflow.RunKilled
}

// closeDeleted marks a deleted job's run KILLED, retrying after Retry up to maxCloseTries times,
// then forgets the job.
func (r *TrackingReconciler) closeDeleted(ctx context.Context, key types.NamespacedName) reconcile.Result {
	v, ok := r.runs.Load(key)
	if !ok {
		return reconcile.Result{}
	}
	run := v.(*trackedRun)
	if run.status.RunID == "" || closed(run.status.RunStatus) {
		r.runs.Delete(key)
		return reconcile.Result{}
	}
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	log := ctrl.LoggerFrom(ctx).WithValues("run", run.status.RunID)
	c, err := r.client(ctx, run.job, run.status.TrackingURI)
	// Deleted with its namespace: try without credentials.
	if derive.TrackingReason(err) == derive.ReasonTrackingCredentialsMissing {
		c, err = r.newClient(run.status.TrackingURI, ""), nil
	}
	if err == nil {
		err = c.UpdateRun(ctx, run.status.RunID, mlflow.RunKilled, r.Clock.Now())
	}
	if run.closeTries++; err != nil && run.closeTries < maxCloseTries {
		log.Info("cannot mark the MLflow run of the deleted job KILLED yet", "error", err.Error())
		return reconcile.Result{RequeueAfter: r.Retry}
	}
	if err != nil {
		log.Error(err, "giving up marking the MLflow run of the deleted job KILLED", "tries", run.closeTries)
	} else {
		log.Info("marked the MLflow run of the deleted job KILLED")
	}
	r.runs.Delete(key)
	return reconcile.Result{}
}

// syncConfigMap puts the run's IDs into the ConfigMap and marks it settled after the first attempt
// to create the run, successful or not. The JobController starts the first Job only then.
func (r *TrackingReconciler) syncConfigMap(ctx context.Context, tj *mlv1.TrainingJob) error {
	cm := &corev1.ConfigMap{}
	if found, err := getOptional(ctx, r.Client, client.ObjectKey{Namespace: tj.Namespace, Name: names.ConfigMapName(tj)}, cm); err != nil ||
		!found {
		// The ConfigMap's creation brings the job back.
		return err
	}
	want := map[string]string{}
	if m := tj.Status.MLflow; m != nil {
		want = map[string]string{names.MLflowRunIDKey: m.RunID, names.MLflowExperimentIDKey: m.ExperimentID}
	}
	if cm.Annotations[names.TrackingSettledAnnotation] == "true" && cm.Data[names.MLflowRunIDKey] == want[names.MLflowRunIDKey] &&
		cm.Data[names.MLflowExperimentIDKey] == want[names.MLflowExperimentIDKey] {
		return nil
	}
	patch := client.MergeFrom(cm.DeepCopy())
	metav1.SetMetaDataAnnotation(&cm.ObjectMeta, names.TrackingSettledAnnotation, "true")
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	for k, v := range want {
		cm.Data[k] = v
	}
	if err := r.Patch(ctx, cm, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("setting the MLflow run of configmap %s: %w", klog.KObj(cm), err)
	}
	return nil
}

// recordEvents records the run's creation and every change of ExperimentTracked's reason, as a
// Warning when tracking fails.
func (r *TrackingReconciler) recordEvents(tj *mlv1.TrainingJob, old mlv1.TrainingJobStatus) {
	st := tj.Status
	reason := derive.ConditionReason(st, mlv1.ConditionExperimentTracked)
	if reason == derive.ConditionReason(old, mlv1.ConditionExperimentTracked) || reason == "" {
		return
	}
	kind := corev1.EventTypeWarning
	if reason == derive.ReasonRunActive || reason == derive.ReasonRunClosed {
		kind = corev1.EventTypeNormal
	}
	r.Recorder.Eventf(tj, nil, kind, reason, "Track", "%s", derive.ConditionMessage(st, mlv1.ConditionExperimentTracked))
}

// SetupWithManager registers the controller: tracked TrainingJobs, and the creation of their
// ConfigMaps.
func (r *TrackingReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&mlv1.TrainingJob{}, builder.WithPredicates(trackingEvents(r.Options))).
		Owns(&corev1.ConfigMap{}, builder.WithPredicates(created)).
		Named(trackingController).
		WithOptions(controllerOptions(r.Workers)).
		Complete(metrics.Instrument(trackingController, r))
}
