package controllers

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// CheckpointReconciler is the CheckpointController. It follows rank 0's checkpoint agent into
// status.checkpoint, CheckpointStorageReady and the checkpoint series, and alone writes the
// ConfigMap's RESUME_FROM. Before each attempt starts, it settles RESUME_FROM for it and marks the
// ConfigMap, which the JobController waits for.
type CheckpointReconciler struct {
	// writes remembers this process's status writes, shared by the four controllers (statusWrites).
	writes *statusWrites
	client.Client
	// APIReader reads the nodes of stranded pods (not cached).
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.Clock
	Agent     *agentapi.Client
	// Interval is the default time between two reads of a Running job's agent.
	Interval time.Duration
	Workers  int
	// TokenKey is the key the builders derive each job's agent token from
	// (builders.Options.AgentTokenKey). It is used when the cached rank 0 pod does not show its own
	// token.
	TokenKey builders.SecretKey
	// MountRoots are the host directories a process node mounts volumes from (Config.CheckpointMountRoots).
	MountRoots []string

	// reports is the agent's last report per job, for the increase of its cumulative counts.
	reports poller[agentapi.Status]
	// finals remembers, per job, the newest final report a stopped rank 0 agent left in a delivered
	// pod. A pod deleted as it stops is gone before a reconcile reads it.
	finals sync.Map
	// fresh holds, per job, the attempt for which the previous attempt's rank 0 agent, restarting in
	// place, reported after the restart's decision (inPlaceReport).
	fresh sync.Map
}

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;patch

// Reconcile keeps status.checkpoint and the ConfigMap's RESUME_FROM in step with the job's
// checkpoints. The status goes first, so RESUME_FROM never names a checkpoint the status does not
// know. Its steps:
//  1. get the TrainingJob, with checkpoints on (a deleted one's remembered reports are dropped);
//  2. wait while the cache has not seen this process's last status write;
//  3. get the job's ConfigMap (its creation brings the job back) and rank 0's pods;
//  4. put into the status the agents' reports: remembered, from stopped agents, and a read when
//     due;
//  5. write the status, once, when it changed, and tell of a storage fault;
//  6. settle and move RESUME_FROM from the status as written.
func (r *CheckpointReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	// 1. Get the TrainingJob.
	tj := &mlv1.TrainingJob{}
	if found, err := getManagedTrainingJob(ctx, r.Client, req.NamespacedName, tj); !found || err != nil || !tj.CheckpointEnabled() {
		if !found && err == nil {
			r.reports.forget(req.NamespacedName)
			r.finals.Delete(req.NamespacedName)
			r.fresh.Delete(req.NamespacedName)
		}
		return reconcile.Result{}, err
	}
	// 2. Wait for the cache to see our last status write.
	if r.writes.behind(tj) {
		return reconcile.Result{RequeueAfter: cacheLag}, nil
	}
	// 3. Get the ConfigMap and rank 0's pods.
	cm := &corev1.ConfigMap{}
	if found, err := getOptional(ctx, r.Client, client.ObjectKey{Namespace: tj.Namespace, Name: names.ConfigMapName(tj)}, cm); err != nil ||
		!found {
		return reconcile.Result{}, err
	}
	old := *tj.Status.DeepCopy()
	pods, err := r.rank0Pods(ctx, tj)
	if err != nil {
		return reconcile.Result{}, err
	}
	// 4. Put the agents' reports into the status.
	addr, res := r.observe(ctx, tj, cm, pods)
	// 5. Write the status.
	written, wres, err := applyStatus(ctx, r.Client, r.writes, tj, old, checkpointController)
	if written {
		r.recordStorageFault(tj, old)
		r.recordEarlierRuns(tj, old)
	}
	if err != nil || wres.Requeue { //nolint:staticcheck // a conflict: compute again on the object as it is now
		return wres, err
	}
	// 6. Settle RESUME_FROM.
	return result(res, r.syncResumeFrom(ctx, tj, cm, pods, addr))
}

// observe puts every known checkpoint report into tj.Status, reading the running agent when due. It
// returns the agent's address if it answered, and when to come back.
func (r *CheckpointReconciler) observe(ctx context.Context, tj *mlv1.TrainingJob, cm *corev1.ConfigMap,
	pods []corev1.Pod) (string, reconcile.Result) {
	now := metav1.NewTime(r.Clock.Now())
	derive.ApplyResumeFrom(&tj.Status, cm.Data[names.ResumeFromKey], builders.ResumeFrom(&mlv1.TrainingJob{Spec: tj.Spec}),
		r.place(tj))
	if a, ok := r.reports.peek(tj); ok {
		derive.ApplyFinalReport(&tj.Status, r.place(tj), a, now)
	}
	if a, ok := r.finals.Load(client.ObjectKeyFromObject(tj)); ok {
		derive.ApplyFinalReport(&tj.Status, r.place(tj), a.(agentapi.Status), now)
	}
	if a, ok := derive.FinalReport(pods); ok {
		derive.ApplyFinalReport(&tj.Status, r.place(tj), a, now)
	}
	if cm.Annotations[names.ResumeAttemptAnnotation] == strconv.Itoa(int(tj.Status.Attempt)) {
		derive.ApplyResumed(&tj.Status, cm.Annotations[names.ResumedFromAnnotation])
	}
	if tj.Status.State != mlv1.StateRunning {
		inPlace, err := r.restartingInPlace(ctx, tj)
		if err != nil || inPlace == "" {
			return "", reconcile.Result{}
		}
		return "", r.inPlaceReport(ctx, tj, cm, pods, inPlace)
	}
	return r.readWhenDue(ctx, tj, pods, now.Time)
}

// readWhenDue reads rank 0's agent into tj.Status and the series once the job's interval has
// passed. It returns the agent's address if it answered, and when to come back.
func (r *CheckpointReconciler) readWhenDue(ctx context.Context, tj *mlv1.TrainingJob, rank0 []corev1.Pod,
	now time.Time) (string, reconcile.Result) {
	every := interval(tj, r.Interval)
	wait, prev := r.reports.due(tj, now, every)
	if wait > 0 {
		return "", reconcile.Result{RequeueAfter: wait}
	}
	res := reconcile.Result{RequeueAfter: every}
	addr, err := runningRank0(tj, rank0, builders.AgentPort)
	var a agentapi.Status
	if err == nil {
		a, err = r.Agent.Status(ctx, addr)
	}
	if err != nil {
		derive.ApplyAgentError(&tj.Status, err, metav1.NewTime(now))
		return "", res
	}
	derive.ApplyCheckpoints(&tj.Status, r.place(tj), a, metav1.NewTime(now))
	l := []string{tj.Namespace, tj.Name}
	metrics.CheckpointSize.WithLabelValues(l...).Set(float64(a.SizeBytes))
	r.reports.with(prev, func(p *agentapi.Status) {
		metrics.CheckpointsCreated.WithLabelValues(l...).Add(float64(derive.Increase(p.Created, a.Created)))
		metrics.CheckpointsDeleted.WithLabelValues(l...).Add(float64(derive.Increase(p.Deleted, a.Deleted)))
		*p = a
	})
	return addr, res
}

// syncResumeFrom moves RESUME_FROM forward to the newest checkpoint in the status and marks it
// settled once no older rank 0 may report a newer one. It then tells the agent, which may rotate
// older checkpoints.
func (r *CheckpointReconciler) syncResumeFrom(ctx context.Context, tj *mlv1.TrainingJob, cm *corev1.ConfigMap, pods []corev1.Pod,
	addr string) error {
	current, had := cm.Data[names.ResumeFromKey]
	want := current
	if from := builders.ResumeFrom(tj); agentapi.Newer(from, current) {
		want = from
	}
	attempt := strconv.Itoa(int(tj.Status.Attempt))
	settle := cm.Annotations[names.ResumeAttemptAnnotation] != attempt
	if settle {
		running, err := r.olderRank0Running(ctx, tj, pods)
		if err != nil {
			return err
		}
		settle = !running
	}
	if want != current || !had || settle {
		patch := client.MergeFromWithOptions(cm.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[names.ResumeFromKey] = want
		if settle {
			metav1.SetMetaDataAnnotation(&cm.ObjectMeta, names.ResumeAttemptAnnotation, attempt)
			metav1.SetMetaDataAnnotation(&cm.ObjectMeta, names.ResumedFromAnnotation, want)
		}
		if err := r.Patch(ctx, cm, patch); err != nil {
			return fmt.Errorf("setting RESUME_FROM of %s: %w", klog.KObj(tj), err)
		}
		if settle {
			ctrl.LoggerFrom(ctx).V(1).Info("RESUME_FROM settled for the attempt", "attempt", tj.Status.Attempt, "resumeFrom", want)
		}
	}
	if addr != "" {
		if err := r.Agent.AcknowledgeResumeFrom(ctx, addr, cm.Data[names.ResumeFromKey], r.agentToken(tj, pods, addr)); err != nil {
			// Safe to skip: the agent protects what it reported until a later acknowledgement.
			ctrl.LoggerFrom(ctx).Info("telling rank 0's checkpoint agent what RESUME_FROM names", "error", err.Error())
		}
	}
	return nil
}

// agentToken returns the token of the agent at addr: the pod's own agentapi.TokenEnv value, so a
// running pod's token always works (pods built before the token Secret). If the pod reads it from the
// job's token Secret, or the cached pod shows none (slimPod), it derives it from TokenKey, as the
// Secret was made. Never logged.
func (r *CheckpointReconciler) agentToken(tj *mlv1.TrainingJob, pods []corev1.Pod, addr string) string {
	for _, p := range pods {
		if p.Status.PodIP == "" || podAddr(&p, builders.AgentPort) != addr {
			continue
		}
		for _, c := range p.Spec.InitContainers {
			if c.Name != names.AgentContainerName {
				continue
			}
			for _, e := range c.Env {
				switch {
				case e.Name != agentapi.TokenEnv:
				case e.ValueFrom != nil:
					return builders.AgentToken(tj, builders.Options{AgentTokenKey: r.TokenKey}) // the token Secret's
				default:
					return e.Value // a Job built before the token Secret
				}
			}
			return "" // a Job built before tokens: its agent has none
		}
	}
	return builders.AgentToken(tj, builders.Options{AgentTokenKey: r.TokenKey})
}

// olderRank0Running reports whether an older attempt's rank 0 pod has not ended, so its agent may
// still report a newer checkpoint. A pod stranded on a lost node is not waited for.
func (r *CheckpointReconciler) olderRank0Running(ctx context.Context, tj *mlv1.TrainingJob, pods []corev1.Pod) (bool, error) {
	var older []corev1.Pod
	inPlace, err := r.restartingInPlace(ctx, tj)
	if err != nil {
		return false, err
	}
	for _, p := range pods {
		restarts := inPlace != "" && p.Labels[names.ControllerUIDLabel] == inPlace && p.DeletionTimestamp == nil &&
			r.reportedSinceRestart(tj)
		if names.JobAttempt(&p) < tj.Status.Attempt && !derive.Ended(&p) && !restarts {
			older = append(older, p)
		}
	}
	if len(older) == 0 {
		return false, nil
	}
	left, err := withoutStranded(ctx, r.APIReader, older, r.Clock.Now())
	return len(left) > 0, err
}

// inPlaceReport reads the older attempt's rank 0 agent (a pod of the Job restarting in place, whose UID
// is inPlace) into tj.Status while the job restarts in place and RESUME_FROM is unsettled, until the
// agent reports after the restart's decision. The restarted containers leave no final report. res
// requeues for the next read.
func (r *CheckpointReconciler) inPlaceReport(ctx context.Context, tj *mlv1.TrainingJob, cm *corev1.ConfigMap,
	pods []corev1.Pod, inPlace string) reconcile.Result {
	key := client.ObjectKeyFromObject(tj)
	if cm.Annotations[names.ResumeAttemptAnnotation] == strconv.Itoa(int(tj.Status.Attempt)) || r.reportedSinceRestart(tj) {
		return reconcile.Result{}
	}
	c := meta.FindStatusCondition(tj.Status.Conditions, mlv1.ConditionRestarting)
	for _, p := range pods {
		if names.JobAttempt(&p) >= tj.Status.Attempt || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning ||
			p.Status.PodIP == "" || p.Labels[names.ControllerUIDLabel] != inPlace {
			continue
		}
		if a, err := r.Agent.Status(ctx, podAddr(&p, builders.AgentPort)); err == nil && a.Time.After(c.LastTransitionTime.Time) {
			derive.ApplyFinalReport(&tj.Status, r.place(tj), a, metav1.NewTime(r.Clock.Now()))
			r.fresh.Store(key, tj.Status.Attempt)
			return reconcile.Result{}
		}
	}
	return reconcile.Result{RequeueAfter: 500 * time.Millisecond}
}

// reportedSinceRestart reports whether the older rank 0 agent reported after the restart's decision
// (inPlaceReport), or there is nothing to wait for: no restart, or inPlaceReportWait has passed.
func (r *CheckpointReconciler) reportedSinceRestart(tj *mlv1.TrainingJob) bool {
	c := meta.FindStatusCondition(tj.Status.Conditions, mlv1.ConditionRestarting)
	if c == nil || c.Status != metav1.ConditionTrue || r.Clock.Since(c.LastTransitionTime.Time) >= inPlaceReportWait {
		return true
	}
	v, ok := r.fresh.Load(client.ObjectKeyFromObject(tj))
	return ok && v.(int32) == tj.Status.Attempt
}

// inPlaceReportWait bounds how long RESUME_FROM waits for a fresh report from a rank 0 restarting
// in place; after it, the newest known checkpoint is used.
const inPlaceReportWait = 10 * time.Second

// restartingInPlace returns the UID of the workers' Job when it restarts in place
// (names.InPlaceAnnotation), else "". Its older pods wait for RESUME_FROM; a Job being deleted is
// still waited for.
func (r *CheckpointReconciler) restartingInPlace(ctx context.Context, tj *mlv1.TrainingJob) (string, error) {
	job := &batchv1.Job{}
	found, err := getOptional(ctx, r.Client, client.ObjectKey{Namespace: tj.Namespace, Name: names.JobName(tj)}, job)
	if err != nil || !found || job.Annotations[names.InPlaceAnnotation] == "" || job.DeletionTimestamp != nil {
		return "", err
	}
	return string(job.UID), nil
}

// place returns where the job's checkpoints are, which the agents' reports must name.
func (r *CheckpointReconciler) place(tj *mlv1.TrainingJob) derive.Place {
	return derive.Place{NameRoot: builders.NameRoot(tj), RunRoot: builders.CheckpointRoot(tj), Store: builders.CheckpointStore(tj),
		Mount: builders.CheckpointMountPath, MountRoots: r.MountRoots}
}

// rank0Pods returns the rank 0 pods of every attempt still there. A pod of the current attempt (or
// a later one) must be the current Job's (madeBy): its agent is read and gets the job's token. An older
// attempt's Job is gone, so its pods are taken by their shape (ofJobName); what their reports name is
// held to the run's own directory (derive.Place).
func (r *CheckpointReconciler) rank0Pods(ctx context.Context, tj *mlv1.TrainingJob) ([]corev1.Pod, error) {
	var pods corev1.PodList
	rank0 := client.MatchingLabels{names.NameLabel: tj.Name, names.RankLabel: "0"}
	if err := r.List(ctx, &pods, client.InNamespace(tj.Namespace), rank0); err != nil {
		return nil, fmt.Errorf("listing rank 0 pods of %s: %w", klog.KObj(tj), err)
	}
	job := &batchv1.Job{}
	found, err := getOptional(ctx, r.Client, client.ObjectKey{Namespace: tj.Namespace, Name: names.JobName(tj)}, job)
	if err != nil {
		return nil, err
	}
	if !found {
		job = nil
	}
	return slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool {
		return !ofJobName(tj, &p) || !madeBy(job, &p) && !olderAttempt(tj, &p)
	}), nil
}

// olderAttempt reports whether p is labelled with an attempt before the job's, written as the operator
// writes it (a label "-1" or "x" is none).
func olderAttempt(tj *mlv1.TrainingJob, p *corev1.Pod) bool {
	l := p.Labels[names.AttemptLabel]
	n, err := strconv.Atoi(l)
	return err == nil && n >= 0 && strconv.Itoa(n) == l && int32(n) < tj.Status.Attempt
}

// ofJobName reports whether a Job of the job's name, of any attempt, controls p. Labels alone are
// not trusted: a hand-made pod must not report checkpoints or receive the agent token.
func ofJobName(tj *mlv1.TrainingJob, p *corev1.Pod) bool { return ofJobNamed(tj.Name, p) }

// ofJobNamed is ofJobName for the TrainingJob named name: Kubernetes' Job controller labels its pods
// with the UID it names in their controller reference.
func ofJobNamed(name string, p *corev1.Pod) bool {
	c := metav1.GetControllerOf(p)
	return c != nil && c.Kind == "Job" && c.Name == names.JobNameOf(name) && p.Labels[names.ControllerUIDLabel] == string(c.UID)
}

// recordStorageFault records a Warning when the agent starts reporting a storage error.
func (r *CheckpointReconciler) recordStorageFault(tj *mlv1.TrainingJob, old mlv1.TrainingJobStatus) {
	c := derive.ConditionReason(tj.Status, mlv1.ConditionCheckpointStorageReady)
	if c == derive.ReasonStorageError && derive.ConditionReason(old, mlv1.ConditionCheckpointStorageReady) != c {
		r.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, c, "Checkpoint", "%s",
			derive.ConditionMessage(tj.Status, mlv1.ConditionCheckpointStorageReady))
	}
}

// recordEarlierRuns records, once, that a new run found earlier runs' checkpoints under its name.
func (r *CheckpointReconciler) recordEarlierRuns(tj *mlv1.TrainingJob, old mlv1.TrainingJobStatus) {
	if msg, ok := derive.EarlierRunsFound(tj, old, tj.Status); ok {
		r.Recorder.Eventf(tj, nil, corev1.EventTypeNormal, derive.ReasonEarlierRuns, "Checkpoint", "%s", msg)
	}
}

// SetupWithManager registers the controller: TrainingJobs (spec and state changes), their
// ConfigMaps and rank 0's pods, whose stopped agents leave final reports.
func (r *CheckpointReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&mlv1.TrainingJob{}, builder.WithPredicates(specOrState)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(byNameLabel)).
		Watches(&corev1.Pod{}, r.recordingFinals(handler.EnqueueRequestsFromMapFunc(rank0ByNameLabel))).
		Named(checkpointController).
		WithOptions(controllerOptions(r.Workers)).
		Complete(metrics.Instrument(checkpointController, r))
}

func rank0ByNameLabel(ctx context.Context, obj client.Object) []reconcile.Request {
	if obj.GetLabels()[names.RankLabel] != "0" {
		return nil
	}
	return byNameLabel(ctx, obj)
}

// recordingFinals wraps next to remember the final report of every delivered rank 0 pod a Job of the
// job's name controls (finals).
func (r *CheckpointReconciler) recordingFinals(next handler.EventHandler) handler.EventHandler {
	return recordingPods(func(_ context.Context, p *corev1.Pod) {
		key, ok := trainingJobOf(p)
		if !ok || p.Labels[names.RankLabel] != "0" || !ofJobNamed(key.Name, p) {
			return
		}
		a, ok := derive.FinalReport([]corev1.Pod{*p})
		if !ok {
			return
		}
		if old, ok := r.finals.Load(key); !ok || old.(agentapi.Status).Time.Before(a.Time) {
			r.finals.Store(key, a)
		}
	}, next)
}
