package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
)

// Gang restarts in place (failurePolicy.restartStrategy InPlace, builders.InPlace). A trainer that fails is
// held by its supervisor, which fails the pod's readiness probe: the pod turns unready and the JobController
// reads how the trainer ended (heldExits), which the state machine then reads as any failed worker's end.
// When it decides on a restart, the JobController orders every worker's supervisor to restart into the new
// attempt (restartInPlace): each exits with the restart code, and the kubelet runs every container of the
// pod again, init containers included, keeping the pod. A pod that is gone (ended, being deleted) is
// replaced alone by the Job controller; its replacement's supervisor sees that it is behind the job's
// attempt (names.CurrentAttemptKey) and waits to be ordered too (labelReplacements, heldExits). A pod on a
// node the workers avoid now is deleted and replaced alone the same way; should its replacement be placed
// there again (the Job's template predates the avoidance), the gang is recreated (replacedOnAvoided). A pod
// that cannot be reached makes the whole gang recreated, as before. A recreate always says why (recreating).

// nextAttempt moves the workers of job, an older attempt's Job, to the current attempt: in place when the Job
// was built for it and the job still may, else by deleting the Job and its pods (the next Job is created once
// they are gone), saying why once when the job asked for in place.
func (r *JobReconciler) nextAttempt(ctx context.Context, tj *mlv1.TrainingJob, cm *corev1.ConfigMap, job *batchv1.Job,
	obs *derive.Observed) error {
	opts := r.options(ctx)
	why := builders.InPlaceUnavailable(tj, opts)
	if finished(tj) {
		why = "" // the run ended: its workers are only stopped
	}
	if job.Annotations[names.InPlaceAnnotation] != "" && builders.InPlace(tj, opts) && !finished(tj) && cm != nil {
		done, err := r.restartInPlace(ctx, tj, cm, job, obs)
		if done || err != nil {
			return err
		}
		why = "" // restartInPlace said why
	}
	if why != "" && job.DeletionTimestamp == nil {
		r.recreating(ctx, tj, job, corev1.EventTypeNormal, why)
	}
	obs.StartBlocked = fmt.Sprintf("stopping the workers of attempt %d", names.JobAttempt(job))
	return r.deleteAttempt(ctx, tj, job)
}

// recreating says why the workers' pods of job are recreated rather than restarted in place: an event on the
// TrainingJob, and a log line at level 1.
func (r *JobReconciler) recreating(ctx context.Context, tj *mlv1.TrainingJob, job *batchv1.Job, eventType, why string) {
	ctrl.LoggerFrom(ctx).V(1).Info("recreating the workers' pods", "trainingjob", klog.KObj(tj), "attempt", tj.Status.Attempt,
		"why", why)
	r.Recorder.Eventf(tj, job, eventType, derive.ReasonRestarting, "Recreate",
		"attempt %d: recreating the workers' pods: %s", tj.Status.Attempt, why)
}

// heldExits replaces, in obs.Pods, each pod whose supervisor holds a failed trainer of the current attempt
// by what the kubelet would show had the trainer's container ended: the pod Failed, the trainer terminated
// with the program's code and message. A pod is asked once per readiness change: only an unready pod
// whose trainer runs can be held. A pod whose supervisor is behind the attempt (a replacement waiting for
// its order, labelled by labelReplacements) is ordered into it.
func (r *JobReconciler) heldExits(ctx context.Context, tj *mlv1.TrainingJob, obs *derive.Observed) error {
	if obs.Job == nil || obs.Job.Annotations[names.InPlaceAnnotation] == "" {
		return nil
	}
	token, now := builders.ControlToken(tj, r.Options), r.Clock.Now()
	var ask []int
	room := r.silent.room(tj) // pods new to the silent memory it can take without starting anew
	for i := range obs.Pods {
		p := &obs.Pods[i]
		if _, ok := r.toAsk(tj, obs.Job, p, now); !ok || len(ask) == stopWorkers {
			continue // one round of stopWorkers calls at most: a reconcile holds a worker one timeout
		}
		if r.silent.get(tj, p.UID) == "" {
			if room == 0 {
				continue
			}
			room--
		}
		ask = append(ask, i)
	}
	behind := make([]bool, len(obs.Pods))
	parallel(len(ask), stopWorkers, func(j int) {
		i := ask[j]
		p := &obs.Pods[i]
		key, _ := r.heldKey(p)
		e, err := r.Control.Exit(ctx, podAddr(p, builders.SupervisorPort), controlapi.ExitToken(token, tokenPodUID(p)))
		r.answered(tj, p, err == nil, now)
		switch {
		case err != nil:
			ctrl.LoggerFrom(ctx).V(1).Info("reading a held exit", "pod", klog.KObj(p), "error", err.Error())
		case !e.Held && e.Attempt < tj.Status.Attempt && !finished(tj):
			behind[i] = true
		case !e.Held || e.Attempt != tj.Status.Attempt:
			r.notHeld.remember(tj, p.UID, key)
		default:
			asEnded(p, e)
		}
	})
	return r.orderBehind(ctx, tj, obs.Pods, behind)
}

// exitsAwaited says when supervisors are to be asked again: soon (exitRecheck) while one is to be asked
// (not answered yet), when a silent one's wait ends, and while one that answered it held nothing keeps its
// pod unready, at the end of that answer's window (askAgain: a trainer that failed since is held with the
// pod's readiness unchanged, which no watch event tells).
func (r *JobReconciler) exitsAwaited(tj *mlv1.TrainingJob, obs derive.Observed, now time.Time) (time.Duration, bool) {
	if obs.Job == nil || obs.Job.Annotations[names.InPlaceAnnotation] == "" {
		return 0, false
	}
	answered, wait := false, time.Duration(0)
	for i := range obs.Pods {
		p := &obs.Pods[i]
		if _, ask := r.toAsk(tj, obs.Job, p, now); ask {
			return exitRecheck, true
		}
		if d := r.silentFor(tj, p, now); d > 0 && madeBy(obs.Job, p) {
			wait = min(d, cmp.Or(wait, d))
		}
		_, held := mayBeHeld(p)
		answered = answered || held && madeBy(obs.Job, p)
	}
	again := askAgain - time.Duration(now.UnixNano()%int64(askAgain))
	if wait > 0 && (!answered || wait < again) {
		return wait, true
	}
	return again, answered
}

// toAsk says whether the supervisor of p, a pod of job, is to be asked how its trainer ended, and the key of
// its readiness (mayBeHeld): it may be held, has not answered for this readiness, and is not waited for
// after asks it left unanswered (silentFor). Only pods the Job made get the token (madeBy).
func (r *JobReconciler) toAsk(tj *mlv1.TrainingJob, job *batchv1.Job, p *corev1.Pod, now time.Time) (string, bool) {
	key, ok := r.heldKey(p)
	return key, ok && madeBy(job, p) && !r.notHeld.seen(tj, p.UID, key) && r.silentFor(tj, p, now) == 0 &&
		(r.silent.get(tj, p.UID) != "" || r.silent.room(tj) > 0) // a job with more silent pods than it can have waits
}

// madeBy says whether job made p: its controller is job (owner reference), and its label says so. A label
// alone is anybody's: pods a tenant makes by hand with a job's controller-uid label are never asked,
// ordered or given the token.
func madeBy(job *batchv1.Job, p *corev1.Pod) bool {
	ref := metav1.GetControllerOf(p)
	return job != nil && ref != nil && ref.UID == job.UID && ref.Kind == "Job" && p.Labels[names.ControllerUIDLabel] == string(job.UID)
}

// tokenPodUID returns the UID the supervisor of p derives its tokens for: the pod's, when its trainer has
// controlapi.PodUIDEnv; "" (the job's token itself) for a pod an older operator made.
func tokenPodUID(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == names.ContainerName && slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == controlapi.PodUIDEnv }) {
			return string(p.UID)
		}
	}
	return ""
}

// maxSilentWait is the longest a supervisor that leaves asks unanswered waits to be asked again: from
// exitRecheck, doubled with each ask in a row it left unanswered. Its trainer's hold ends on its own (the
// supervisor then exits and the pod fails), so waiting loses no failure; it keeps a stalled endpoint from
// holding the JobController's workers.
const maxSilentWait = 32 * time.Second

// answered remembers whether p's supervisor answered an ask made at now (silent: how many in a row it did
// not, and when the last was).
func (r *JobReconciler) answered(tj *mlv1.TrainingJob, p *corev1.Pod, ok bool, now time.Time) {
	if ok {
		r.silent.drop(tj, p.UID) // the memory holds only the silent: a job's many answering pods never fill it
		return
	}
	misses, _ := silence(r.silent.get(tj, p.UID))
	r.silent.remember(tj, p.UID, strconv.Itoa(misses+1)+" "+strconv.FormatInt(now.UnixNano(), 10))
}

// silentFor returns how long p's supervisor is not asked (0: it may be).
func (r *JobReconciler) silentFor(tj *mlv1.TrainingJob, p *corev1.Pod, now time.Time) time.Duration {
	misses, last := silence(r.silent.get(tj, p.UID))
	if misses == 0 {
		return 0
	}
	wait := min(exitRecheck<<min(misses-1, 6), maxSilentWait)
	return min(max(0, last.Add(wait).Sub(now)), wait) // a clock stepped back waits no longer
}

// silence reads a silent entry: the asks left unanswered in a row and when the last was.
func silence(v string) (int, time.Time) {
	n, at, ok := strings.Cut(v, " ")
	misses, err1 := strconv.Atoi(n)
	ns, err2 := strconv.ParseInt(at, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return 0, time.Time{}
	}
	return misses, time.Unix(0, ns)
}

// heldKey is mayBeHeld's key, good for askAgain: a pod unready from its start (its first probe not passed
// yet) whose trainer then fails stays unready, its readiness unchanged.
func (r *JobReconciler) heldKey(p *corev1.Pod) (string, bool) {
	key, ok := mayBeHeld(p)
	return key + "/" + strconv.FormatInt(r.Clock.Now().UnixNano()/int64(askAgain), 10), ok
}

// askAgain is how long a supervisor's answer that it holds nothing stands for a pod that stays unready.
const askAgain = 2 * time.Second

// exitRecheck is how soon a supervisor that did not answer is asked again.
const exitRecheck = time.Second

// orderBehind orders into the current attempt the pods marked behind: replacements whose supervisor waits for
// its order. An order already taken changes nothing.
func (r *JobReconciler) orderBehind(ctx context.Context, tj *mlv1.TrainingJob, pods []corev1.Pod, behind []bool) error {
	if !slices.Contains(behind, true) {
		return nil
	}
	cm := &corev1.ConfigMap{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: tj.Namespace, Name: names.ConfigMapName(tj)}, cm); err != nil {
		return fmt.Errorf("reading the ConfigMap to order a replaced worker: %w", err)
	}
	if tj.CheckpointEnabled() && !resumeSettled(tj, cm) {
		return nil // the CheckpointController's write triggers a reconcile
	}
	token, o := builders.ControlToken(tj, r.Options), inPlaceOrder(tj, cm)
	for i := range pods {
		if !behind[i] {
			continue
		}
		p := &pods[i]
		addr, order := podAddr(p, builders.SupervisorPort), controlapi.OrderToken(token, tokenPodUID(p), o)
		if err := r.Control.Restart(ctx, addr, order, o); err != nil {
			ctrl.LoggerFrom(ctx).V(1).Info("ordering a replaced worker", "pod", klog.KObj(p), "error", err.Error())
			continue // asked again (exitsAwaited)
		}
		if key, ok := r.heldKey(p); ok {
			r.notHeld.remember(tj, p.UID, key) // until its containers restart
		}
	}
	return nil
}

// mayBeHeld says whether a pod's trainer may be held (the pod runs, unready, its trainer running) and the
// key of its present readiness: its UID and when its Ready condition last changed.
func mayBeHeld(p *corev1.Pod) (string, bool) {
	cs := trainerStatus(p)
	ready := podReady(p)
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || p.Status.PodIP == "" || cs == nil ||
		cs.State.Running == nil || cs.Ready || ready == nil || ready.Status == corev1.ConditionTrue {
		return "", false
	}
	return string(p.UID) + "/" + ready.LastTransitionTime.UTC().Format(time.RFC3339Nano) + "/" + strconv.Itoa(int(cs.RestartCount)), true
}

func podReady(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func trainerStatus(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == names.ContainerName {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// asEnded makes p read as the kubelet would show it had its trainer's container ended as e says; its times
// to the second, as the kubelet's (ranks that fail in the same second are then told apart by how they
// ended, as for any failure).
func asEnded(p *corev1.Pod, e controlapi.Exit) {
	cs := trainerStatus(p)
	p.Status.Phase = corev1.PodFailed
	cs.Ready = false
	cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: e.ExitCode, Signal: e.Signal,
		Reason: "Error", Message: e.Message, StartedAt: metav1.NewTime(e.StartedAt.Truncate(time.Second)),
		FinishedAt: metav1.NewTime(e.FinishedAt.Truncate(time.Second))}}
}

// restartInPlace restarts the workers of job, an older attempt's Job built to restart in place, into the
// current attempt: once RESUME_FROM is settled for it, every running pod not yet moved is ordered to restart
// and then labelled with the attempt; the Job last. A pod that is gone (ended, being deleted) or not started
// is left to the Job controller, which replaces it (alone); the replacement waits for its order
// (labelReplacements, heldExits). A pod on a node the workers avoid now is deleted (replaceAvoided) and
// replaced alone the same way. done is false when the gang cannot restart in place (none left running, one
// not reachable, a replacement that would wait long): the caller recreates it.
func (r *JobReconciler) restartInPlace(ctx context.Context, tj *mlv1.TrainingJob, cm *corev1.ConfigMap, job *batchv1.Job,
	obs *derive.Observed) (done bool, err error) {
	if tj.CheckpointEnabled() && !resumeSettled(tj, cm) || cm.Data[names.CurrentAttemptKey] != strconv.Itoa(int(tj.Status.Attempt)) {
		obs.StartBlocked = waitingForResumeFrom
		return true, nil
	}
	var pods corev1.PodList
	ofJob := client.MatchingLabels{names.ControllerUIDLabel: string(job.UID)}
	if err := r.List(ctx, &pods, client.InNamespace(tj.Namespace), ofJob); err != nil {
		return false, fmt.Errorf("listing pods of %s: %w", klog.KObj(job), err)
	}
	mine := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return !madeBy(job, &p) }) // not a label alone
	restart, replace, left, why := inPlacePlan(tj, job, mine)
	if why == "" {
		var err error
		if why, err = onLostNode(ctx, r.APIReader, replace, r.Clock.Now()); err != nil {
			return true, err
		}
	}
	if why != "" {
		r.recreating(ctx, tj, job, corev1.EventTypeNormal, why)
		return false, nil
	}
	obs.StartBlocked = fmt.Sprintf("restarting the workers of attempt %d in place", names.JobAttempt(job))
	failed, err := r.order(ctx, tj, restart, inPlaceOrder(tj, cm))
	if err != nil {
		return true, err
	}
	if failed != "" {
		r.recreating(ctx, tj, job, corev1.EventTypeWarning, failed)
		return false, nil
	}
	if err := r.replaceAvoided(ctx, tj, replace); err != nil {
		return true, err
	}
	if err := r.labelOnce(ctx, tj, job, tj.Status.Attempt); err != nil {
		return true, err
	}
	// Once: a reconcile on a cache behind the Job's label finds the pods moved, or ordered (r.ordered).
	if said := "said/" + strconv.Itoa(int(tj.Status.Attempt)); !r.ordered.seen(tj, job.UID, said) {
		r.ordered.remember(tj, job.UID, said)
		r.Recorder.Eventf(tj, job, corev1.EventTypeNormal, derive.ReasonRestarting, "RestartInPlace",
			"attempt %d: %s", tj.Status.Attempt, restartedInPlace(restart, left))
	}
	return true, nil
}

func inPlaceOrder(tj *mlv1.TrainingJob, cm *corev1.ConfigMap) controlapi.Order {
	return controlapi.Order{Attempt: tj.Status.Attempt, GraceSeconds: orderGrace(tj), ResumeFrom: cm.Data[names.ResumeFromKey]}
}

// restartedInPlace says what a restart in place did: the pods restarted and those the Job controller replaces.
func restartedInPlace(restart []corev1.Pod, left []string) string {
	what := fmt.Sprintf("the %d workers' pods restart in place", len(restart))
	if len(restart) == 1 {
		what = "1 worker's pod restarts in place"
	}
	if len(left) > 0 {
		what += fmt.Sprintf("; the Job controller replaces %s, which joins once it runs", strings.Join(left, ", "))
	}
	return what
}

// inPlacePlan sorts the pods of job to restart in place: those to order (running, reachable, not moved
// yet), those to replace (on a node the workers avoid now: deleted, the Job controller replaces them) and
// those left to the Job controller (left, described: gone, not started or replaced; a replacement joins when
// it runs). An older attempt's end (a pod replaced then) is history. why says why the gang is recreated
// instead: no pod left to restart, or a gone or replaced pod whose replacement the Job controller would
// hold back for 20 s or more.
func inPlacePlan(tj *mlv1.TrainingJob, job *batchv1.Job, pods []corev1.Pod) (restart, replace []corev1.Pod, left []string, why string) {
	moved, gone := 0, 0
	ranks := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		rank := p.Labels[names.RankLabel]
		if !goneWorker(p) || names.JobAttempt(p) >= names.JobAttempt(job) {
			ranks[rank] = true
		}
		switch {
		case onAvoidedNode(tj, p) && !derive.Ended(p) && p.DeletionTimestamp == nil:
			gone++
			replace = append(replace, *p)
			left = append(left, fmt.Sprintf("pod %s (rank %s, on node %s, which the workers avoid now)", p.Name, rank, p.Spec.NodeName))
		case names.JobAttempt(p) == tj.Status.Attempt:
			moved++ // ordered and labelled already
		case goneWorker(p):
			if names.JobAttempt(p) < names.JobAttempt(job) {
				continue // an older attempt's end
			}
			gone++
			left = append(left, fmt.Sprintf("pod %s (rank %s, %s)", p.Name, rank, ended(p)))
		case p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning || trainerStatus(p) == nil || trainerStatus(p).State.Running == nil:
			left = append(left, fmt.Sprintf("pod %s (rank %s, not started)", p.Name, rank))
		default:
			restart = append(restart, *p)
		}
	}
	for r := range int(tj.Spec.NumWorkers) {
		if !ranks[strconv.Itoa(r)] { // its pod deleted and gone already
			gone++
			left = append(left, fmt.Sprintf("rank %d (its pod gone)", r))
		}
	}
	switch {
	case len(restart)+moved == 0:
		return nil, nil, nil, "no worker's pod is left running"
	case gone > 0 && job.Status.Failed >= slowReplacement:
		return nil, nil, nil, fmt.Sprintf("the Job controller would hold back the replacement of %s for 20 s or more "+
			"(its pod failure backoff, 10 s doubling with each of the Job's %d failed pods)", strings.Join(left, ", "), job.Status.Failed)
	}
	return restart, replace, left, ""
}

// onLostNode says why the gang is recreated when a pod to replace is on a node that is lost (gone or
// unreachable: nodeTrouble): it cannot stop there, and the Job controller does not replace a pod that has
// not ended, so its rank would wait for minutes (the pod garbage collector's, the taint's eviction); "" when
// none is. Only the nodes of pods to replace are read.
func onLostNode(ctx context.Context, reader client.Reader, replace []corev1.Pod, now time.Time) (string, error) {
	if len(replace) == 0 {
		return "", nil
	}
	trouble, _, err := nodeTrouble(ctx, reader, replace, now)
	if err != nil {
		return "", err
	}
	for _, p := range replace {
		if why := trouble[p.Spec.NodeName]; why != "" {
			return fmt.Sprintf("pod %s (rank %s) is on node %s, which %s: it cannot stop there to be replaced alone",
				p.Name, p.Labels[names.RankLabel], p.Spec.NodeName, why), nil
		}
	}
	return "", nil
}

// onAvoidedNode says whether p is on a node in status.avoidedNodes.
func onAvoidedNode(tj *mlv1.TrainingJob, p *corev1.Pod) bool {
	return p.Spec.NodeName != "" &&
		slices.ContainsFunc(tj.Status.AvoidedNodes, func(a mlv1.AvoidedNode) bool { return a.Name == p.Spec.NodeName })
}

// replacedKey marks, in r.ordered, a pod replaceAvoided deleted for an attempt: a cache that shows the Job
// labelled but not the pod's deletion yet does not take it for a replacement placed on the node again.
func replacedKey(attempt int32) string { return "replaced/" + strconv.Itoa(int(attempt)) }

// replaceAvoided deletes the pods of a restart in place that are on a node the workers avoid now, with the
// grace an order would give their trainers: the Job controller replaces each alone. Its template predates
// the avoidance, so replacedOnAvoided watches where the replacement goes.
func (r *JobReconciler) replaceAvoided(ctx context.Context, tj *mlv1.TrainingJob, pods []corev1.Pod) error {
	if len(pods) == 0 {
		return nil
	}
	replaced := make([]string, 0, len(pods))
	for i := range pods {
		replaced = append(replaced, pods[i].Name+" on "+pods[i].Spec.NodeName)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("replacing the workers' pods on nodes the workers avoid now; the others restart in place",
		"trainingjob", klog.KObj(tj), "attempt", tj.Status.Attempt, "pods", replaced)
	var mu sync.Mutex
	var errs []error
	parallel(len(pods), stopWorkers, func(i int) {
		p := &pods[i]
		err := r.Delete(ctx, p, client.Preconditions{UID: &p.UID}, client.GracePeriodSeconds(orderGrace(tj)))
		if err = ignoreNotFound(err); err != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("deleting pod %s on avoided node %s: %w", klog.KObj(p), p.Spec.NodeName, err))
			mu.Unlock()
			return
		}
		r.ordered.remember(tj, p.UID, replacedKey(tj.Status.Attempt))
	})
	return errors.Join(errs...)
}

// recreateOnAvoided recreates the gang of job, the current attempt's Job, when it restarted in place and
// the Job controller placed a pod of it on a node the workers avoid now (replacedOnAvoided), saying why:
// its Job and pods are deleted, and a new Job, whose template keeps every pod off the node, starts once
// they are gone. recreated says it did.
func (r *JobReconciler) recreateOnAvoided(ctx context.Context, tj *mlv1.TrainingJob, job *batchv1.Job,
	obs *derive.Observed) (recreated bool, err error) {
	why, err := r.replacedOnAvoided(ctx, tj, job)
	if err != nil || why == "" {
		return false, err
	}
	if job.DeletionTimestamp == nil {
		r.recreating(ctx, tj, job, corev1.EventTypeNormal, why)
	}
	obs.StartBlocked = fmt.Sprintf("stopping the workers of attempt %d", names.JobAttempt(job))
	return true, r.deleteAttempt(ctx, tj, job)
}

// replacedOnAvoided says why the gang of job, a Job that restarted in place into the current attempt, is to
// be recreated: a pod of it, not gone, is on a node the workers avoid now. Its template predates the
// avoidance, so the Job controller may place a replacement (replaceAvoided) on that node again; a new Job
// keeps every pod off it. "" when none is.
func (r *JobReconciler) replacedOnAvoided(ctx context.Context, tj *mlv1.TrainingJob, job *batchv1.Job) (string, error) {
	if job.Annotations[names.InPlaceAnnotation] == "" || finished(tj) || len(tj.Status.AvoidedNodes) == 0 {
		return "", nil
	}
	var pods corev1.PodList
	ofJob := client.MatchingLabels{names.ControllerUIDLabel: string(job.UID)}
	if err := r.List(ctx, &pods, client.InNamespace(tj.Namespace), ofJob); err != nil {
		return "", fmt.Errorf("listing pods of %s: %w", klog.KObj(job), err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !madeBy(job, p) || goneWorker(p) || !onAvoidedNode(tj, p) || r.ordered.seen(tj, p.UID, replacedKey(tj.Status.Attempt)) {
			continue
		}
		return fmt.Sprintf("pod %s (rank %s) is on node %s, which the workers avoid now: the Job controller placed it there "+
			"(the Job's template predates the avoidance)", p.Name, p.Labels[names.RankLabel], p.Spec.NodeName), nil
	}
	return "", nil
}

// slowReplacement is how many failed pods of a Job make its controller wait 20 s or more before it creates
// the next replacement: the gang is recreated then (a new Job starts with no backoff).
const slowReplacement = 2

// goneWorker says whether a worker's pod is gone for its rank: being deleted, ended, or its trainer's
// container ended (its supervisor ended with it; the kubelet keeps the pod Running while its sidecars stop).
func goneWorker(p *corev1.Pod) bool {
	cs := trainerStatus(p)
	return p.DeletionTimestamp != nil || derive.Ended(p) || cs != nil && cs.State.Terminated != nil
}

// ended describes how a gone worker's pod ended (goneWorker).
func ended(p *corev1.Pod) string {
	switch {
	case p.DeletionTimestamp != nil:
		return "being deleted"
	case !derive.Ended(p):
		return "its trainer's container ended"
	}
	return strings.ToLower(string(p.Status.Phase))
}

// labelReplacements labels with the current attempt the pods of job, a Job that restarts in place, that the
// Job controller created for ranks that were gone (or that had not started at the restart): they are the
// attempt's workers (their failure is the attempt's, their start counts), and their supervisor, behind the
// attempt, waits for its order (heldExits gives it once it runs). A pod that ended, whose trainer's container
// ended (its sidecars still stopping) or that is being deleted is an older attempt's.
func (r *JobReconciler) labelReplacements(ctx context.Context, tj *mlv1.TrainingJob, job *batchv1.Job) error {
	if job.Annotations[names.InPlaceAnnotation] == "" || finished(tj) {
		return nil
	}
	others, err := r.listPods(ctx, tj, false, job)
	if err != nil {
		return err
	}
	var errs []error
	for i := range others {
		p := &others[i]
		if p.Labels[names.ControllerUIDLabel] != string(job.UID) || names.JobAttempt(p) >= tj.Status.Attempt || goneWorker(p) {
			continue // another Job's, moved already, or an older attempt's end
		}
		if err := r.labelOnce(ctx, tj, p, tj.Status.Attempt); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// orderGrace is how long a restarted trainer gets between SIGTERM and SIGKILL: a second after a hang (a hung
// rank is killed, not waited for), else the pods' grace period (a trainer may checkpoint on SIGTERM).
func orderGrace(tj *mlv1.TrainingJob) int64 {
	if derive.LastAttemptHung(tj.Status) {
		return hungGrace
	}
	if g := builders.TerminationGrace(tj); g != nil {
		return *g
	}
	return corev1.DefaultTerminationGracePeriodSeconds
}

// order orders every pod not labelled with the current attempt yet to restart into it, many at once (a
// request to its supervisor, no API write), then labels those that took it (an API write each, after every
// restart began); it returns why one could not be ordered ("" when all were), or the error of a label
// (tried again at the next reconcile: an order already taken changes nothing).
func (r *JobReconciler) order(ctx context.Context, tj *mlv1.TrainingJob, pods []corev1.Pod, o controlapi.Order) (string, error) {
	token := builders.ControlToken(tj, r.Options)
	var mu sync.Mutex
	var failed string
	took := make([]bool, len(pods))
	parallel(len(pods), orderWorkers, func(i int) {
		p := &pods[i]
		if names.JobAttempt(p) == o.Attempt {
			return
		}
		took[i] = true
		if r.ordered.seen(tj, p.UID, strconv.Itoa(int(o.Attempt))) {
			return // ordered by an earlier reconcile, whose label the cache has not shown yet
		}
		addr, order := podAddr(p, builders.SupervisorPort), controlapi.OrderToken(token, tokenPodUID(p), o)
		if err := r.Control.Restart(ctx, addr, order, o); err != nil {
			mu.Lock()
			failed = fmt.Sprintf("pod %s: %v", p.Name, err)
			mu.Unlock()
			took[i] = false
			return
		}
		r.ordered.remember(tj, p.UID, strconv.Itoa(int(o.Attempt)))
	})
	if failed != "" {
		return failed, nil
	}
	var errs []error
	parallel(len(pods), stopWorkers, func(i int) {
		if !took[i] {
			return
		}
		if err := r.labelOnce(ctx, tj, &pods[i], o.Attempt); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	})
	return "", errors.Join(errs...)
}

// orderWorkers is how many supervisors the JobController orders at once.
const orderWorkers = 64

// attemptLabelPatch sets the attempt label.
const attemptLabelPatch = `{"metadata":{"labels":{%q:%q}}}`

// label sets an object's attempt label.
func (r *JobReconciler) label(ctx context.Context, obj client.Object, attempt int32) error {
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, attemptLabelPatch, names.AttemptLabel, strconv.Itoa(int(attempt))))
	if err := r.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("labelling %s with attempt %d: %w", klog.KObj(obj), attempt, err)
	}
	return nil
}

// labelOnce sets the attempt label of a pod or the Job, once in labelledFor: reconciles on a cache that has
// not shown the label yet (the kubelet's writes come in between) do not write it again; one that still
// lacks it after that (a failed write is not remembered; someone removed it) is written again.
func (r *JobReconciler) labelOnce(ctx context.Context, tj *mlv1.TrainingJob, obj client.Object, attempt int32) error {
	now := r.Clock.Now()
	var was int32
	var at int64
	if _, err := fmt.Sscanf(r.labelled.get(tj, obj.GetUID()), "%d@%d", &was, &at); err == nil && was == attempt &&
		now.Sub(time.Unix(0, at)) < labelledFor {
		return nil
	}
	if err := r.label(ctx, obj, attempt); err != nil {
		return err
	}
	r.labelled.remember(tj, obj.GetUID(), fmt.Sprintf("%d@%d", attempt, now.UnixNano()))
	return nil
}

// labelledFor is how long a label written is taken as there while the cache does not show it.
const labelledFor = 10 * time.Second

// podMemo remembers a key per job and pod (bounded per job): the readiness (mayBeHeld's key) at which a
// pod's supervisor said it held nothing, or the attempt a pod was ordered into. Safe for concurrent use.
type podMemo struct {
	mu   sync.Mutex
	jobs map[types.NamespacedName]map[types.UID]string
}

func (n *podMemo) seen(tj *mlv1.TrainingJob, pod types.UID, key string) bool {
	return n.get(tj, pod) == key
}

// get returns the key kept for the pod ("" when none).
func (n *podMemo) get(tj *mlv1.TrainingJob, pod types.UID) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.jobs[client.ObjectKeyFromObject(tj)][pod]
}

// remember keeps key for the pod, and forgets the job's pods that are no longer asked about after a while:
// at most one entry per pod the job has had, dropped with the job (forget).
func (n *podMemo) remember(tj *mlv1.TrainingJob, pod types.UID, key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.jobs == nil {
		n.jobs = map[types.NamespacedName]map[types.UID]string{}
	}
	k := client.ObjectKeyFromObject(tj)
	if n.jobs[k] == nil || len(n.jobs[k]) > memoBound(tj) {
		n.jobs[k] = map[types.UID]string{}
	}
	n.jobs[k][pod] = key
}

// room returns how many more pods the job's memory holds before remember starts it anew: more pods than
// the job has had (4 per worker, and 16).
func (n *podMemo) room(tj *mlv1.TrainingJob) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return max(0, memoBound(tj)-len(n.jobs[client.ObjectKeyFromObject(tj)]))
}

// memoBound is how many pods' entries a job's memory holds.
func memoBound(tj *mlv1.TrainingJob) int { return 4*int(tj.Spec.NumWorkers) + 16 }

// drop forgets the pod's entry.
func (n *podMemo) drop(tj *mlv1.TrainingJob, pod types.UID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.jobs[client.ObjectKeyFromObject(tj)], pod)
}

func (n *podMemo) forget(key types.NamespacedName) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.jobs, key)
}

// inPlaceRestartServed says whether the API server keeps a container's RestartAllContainers rule (Kubernetes
// 1.35+ with its gates on), by a dry run of a Job that has one in the default namespace: a server without
// the feature drops the rule or refuses it. No answer (an error) counts as no: gang restarts then recreate
// the pods, and each says why (builders.InPlaceUnavailable).
func inPlaceRestartServed(mgr ctrl.Manager) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	served, err := RestartRuleServed(ctx, mgr.GetClient())
	if err != nil {
		mgr.GetLogger().Info("gang restarts recreate the pods: the dry run of a RestartAllContainers rule failed", "error", err.Error())
		return false
	}
	mgr.GetLogger().Info("gang restarts", "ruleServed", served)
	return served
}

// RestartRuleServed creates, as a dry run, a Job whose container has a RestartAllContainers rule, and says
// whether the API server kept the rule (the field is dropped, or the Job refused, where the feature is off).
func RestartRuleServed(ctx context.Context, c client.Client) (bool, error) {
	ctr := corev1.Container{Name: "probe", Image: "probe", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyNever),
		RestartPolicyRules: []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestartAllContainers,
			ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn,
				Values: []int32{controlapi.RestartCode}}}}}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{GenerateName: "trainingjob-operator-probe-", Namespace: metav1.NamespaceDefault},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{ctr}}}}}
	if err := c.Create(ctx, job, client.DryRunAll); err != nil {
		return false, err
	}
	cs := job.Spec.Template.Spec.Containers
	return len(cs) == 1 && len(cs[0].RestartPolicyRules) == 1, nil
}

// inPlaceSupport says whether the cluster restarts pods in place: its API server keeps the rule (served,
// found once at start) and a node declares the feature, looked for until one does (nodes register after
// the operator starts), at growing intervals from a second to five minutes.
type inPlaceSupport struct {
	served bool
	reader client.Reader
	mu     sync.Mutex
	// declared: a node declared the feature (then never looked for again); next, when to look again.
	declared bool
	next     time.Time
	wait     time.Duration
}

// available reports whether gang restarts may go in place now.
func (s *inPlaceSupport) available(ctx context.Context, now time.Time) bool {
	if !s.served {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.declared || now.Before(s.next) {
		return s.declared
	}
	s.wait = min(max(2*s.wait, time.Second), 5*time.Minute)
	s.next = now.Add(s.wait)
	declared, err := nodesDeclare(ctx, s.reader, restartAllContainersFeature)
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("looking for nodes that restart pods in place", "error", err.Error())
	}
	s.declared = declared
	return declared
}

// options returns the builders' options, with the cluster's in-place support as found now (when the
// reconciler finds it: tests set Options.InPlaceRestart themselves).
func (r *JobReconciler) options(ctx context.Context) builders.Options {
	o := r.Options
	if r.inPlace != nil {
		o.InPlaceRestart = r.inPlace.available(ctx, r.Clock.Now())
	}
	return o
}

// restartAllContainersFeature is the feature a kubelet declares (node.status.declaredFeatures) when it
// restarts all of a pod's containers on a rule: the scheduler places a pod with such a rule only there.
const restartAllContainersFeature = "RestartAllContainersOnContainerExits"

// nodesDeclare says whether a node of the first page of nodes declares feature: older kubelets ignore the
// rule, and a scheduler that checks declared features would place the pods nowhere.
func nodesDeclare(ctx context.Context, c client.Reader, feature string) (bool, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes, client.Limit(500)); err != nil {
		return false, err
	}
	for _, n := range nodes.Items {
		if slices.Contains(n.Status.DeclaredFeatures, feature) {
			return true, nil
		}
	}
	return false, nil
}
