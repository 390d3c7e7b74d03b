package controllers

import (
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
)

// The gang restart in place (failurePolicy.restartStrategy InPlace, builders.InPlace), in the files
// inplace*.go. Its protocol:
//
//   - Hold. A supervisor whose trainer fails keeps it held and fails the pod's readiness probe. The
//     JobController asks every unready pod's supervisor how its trainer ended (askSupervisors, with
//     the job's token for the pod: controlapi.ExitToken); a held exit is derive.Observed.Held, read
//     as any failed worker's end.
//   - Attempt. When derive decides on a restart, the status's attempt goes up first; the ConfigMap
//     then holds it (names.CurrentAttemptKey), and RESUME_FROM is settled for it by the
//     CheckpointController.
//   - Orders. Once both are in place, every running pod not yet moved is ordered into the attempt
//     (orderPods, controlapi.OrderToken): its supervisor exits with controlapi.RestartCode and the
//     kubelet runs every container of the pod again, keeping the pod. Each pod that took it is then
//     labelled with the attempt, the Job last: the labels are the barrier that says the attempt's
//     workers are these.
//   - Replacements. A pod that is gone (ended, being deleted) is replaced alone by Kubernetes' Job
//     controller; its supervisor starts behind the ConfigMap's attempt and waits. It is labelled
//     (labelReplacements) and ordered once it runs (orderBehind). A pod on a node the workers avoid
//     now is deleted and replaced the same way (replaceAvoided); if its replacement lands there
//     again, the gang is recreated (replacedOnAvoided).
//   - Fallback. With no pod left running, a pod that cannot be ordered, a rank on a lost node or a
//     replacement Kubernetes' Job controller would hold back, the gang is recreated, and says why
//     (recreating).
//
// An order repeated is harmless (a supervisor ignores an attempt it took), and every step reads its
// progress from the API (attempt, labels), so an operator restarted anywhere in between goes on.

// gangRestart coordinates the JobController's restarts in place. gang builds one per reconcile.
type gangRestart struct {
	// Client reads the cache and writes the attempt labels and the avoided pods' deletions.
	client.Client
	// reader reads the nodes of pods to replace, past the cache.
	reader   client.Reader
	control  *controlapi.Client
	recorder events.EventRecorder
	clock    clock.PassiveClock
	memory   *memory
	// opts are the builders' options of this reconcile (the token key).
	opts builders.Options
}

// gang returns the in-place restart of this reconcile.
func (r *JobReconciler) gang(ctx context.Context) gangRestart {
	return gangRestart{Client: r.Client, reader: r.APIReader, control: r.Control, recorder: r.Recorder, clock: r.Clock,
		memory: &r.memory, opts: r.options(ctx)}
}

// child returns what is remembered of tj's Job or pod uid (zero when nothing is).
func (g gangRestart) child(tj *mlv1.TrainingJob, uid types.UID) childMemory {
	var c childMemory
	g.memory.peek(client.ObjectKeyFromObject(tj), func(j *jobMemory) {
		if m := j.child(uid); m != nil {
			c = *m
		}
	})
	return c
}

// remember runs f on the entry of tj's Job or pod uid, created when missing.
func (g gangRestart) remember(tj *mlv1.TrainingJob, uid types.UID, f func(*childMemory)) {
	g.memory.with(client.ObjectKeyFromObject(tj), func(j *jobMemory) { f(j.remember(tj, uid)) })
}

// recreating records an event and a log line saying why job's pods are recreated rather than
// restarted in place.
func (g gangRestart) recreating(ctx context.Context, tj *mlv1.TrainingJob, job *batchv1.Job, eventType, why string) {
	ctrl.LoggerFrom(ctx).V(1).Info("Recreating the workers' pods", "attempt", tj.Status.Attempt, "why", why)
	g.recorder.Eventf(tj, job, eventType, derive.ReasonRestarting, "Recreate",
		"attempt %d: recreating the workers' pods: %s", tj.Status.Attempt, why)
}

// restart moves the workers of job, an older attempt's in-place Job, into the current attempt.
// blocked says what the start waits for. done is false when the gang cannot restart in place; the
// caller then recreates it.
func (g gangRestart) restart(ctx context.Context, tj *mlv1.TrainingJob, cm *corev1.ConfigMap, job *batchv1.Job) (
	blocked string, done bool, err error) {
	log := ctrl.LoggerFrom(ctx)
	if tj.CheckpointEnabled() && !resumeSettled(tj, cm) || cm.Data[names.CurrentAttemptKey] != strconv.Itoa(int(tj.Status.Attempt)) {
		log.V(1).Info("Restart in place waits for the ConfigMap", "attempt", tj.Status.Attempt)
		return waitingForResumeFrom, true, nil
	}
	var pods corev1.PodList
	ofJob := client.MatchingLabels{names.ControllerUIDLabel: string(job.UID)}
	if err := g.List(ctx, &pods, client.InNamespace(tj.Namespace), ofJob); err != nil {
		return "", false, fmt.Errorf("listing pods of %s: %w", klog.KObj(job), err)
	}
	mine := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return !madeBy(job, &p) })
	restart, replace, left, why := inPlacePlan(tj, job, mine)
	if why == "" {
		if why, err = onLostNode(ctx, g.reader, replace, g.clock.Now()); err != nil {
			return "", true, err
		}
	}
	if why != "" {
		g.recreating(ctx, tj, job, corev1.EventTypeNormal, why)
		return "", false, nil
	}
	blocked = fmt.Sprintf("restarting the workers of attempt %d in place", names.JobAttempt(job))
	failed, err := g.orderPods(ctx, tj, restart, inPlaceOrder(tj, cm))
	if err != nil {
		return blocked, true, err
	}
	if failed != "" {
		g.recreating(ctx, tj, job, corev1.EventTypeWarning, failed)
		return "", false, nil
	}
	if err := g.replaceAvoided(ctx, tj, replace); err != nil {
		return blocked, true, err
	}
	if err := g.labelOnce(ctx, tj, job, tj.Status.Attempt); err != nil {
		return blocked, true, err
	}
	g.announce(tj, job, restartedInPlace(restart, left))
	return blocked, true, nil
}

// announce records the RestartInPlace event once per attempt, even when a lagging cache shows the
// pods already moved or ordered.
func (g gangRestart) announce(tj *mlv1.TrainingJob, job *batchv1.Job, what string) {
	said := false
	g.memory.with(client.ObjectKeyFromObject(tj), func(j *jobMemory) {
		said = j.announced.is(tj.Status.Attempt)
		j.announced = markOf(tj.Status.Attempt)
	})
	if !said {
		g.recorder.Eventf(tj, job, corev1.EventTypeNormal, derive.ReasonRestarting, "RestartInPlace", "attempt %d: %s",
			tj.Status.Attempt, what)
	}
}

// restartedInPlace describes a restart in place: the pods restarted and those Kubernetes' Job
// controller replaces.
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

// inPlacePlan sorts job's pods: restart (running, reachable, not moved), replace (on an avoided
// node) and left (gone, described). why says why the gang is recreated instead: no pod left, or a
// replacement would be held back 20 s or more.
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
			moved++
		case goneWorker(p):
			if names.JobAttempt(p) < names.JobAttempt(job) {
				continue
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
		if !ranks[strconv.Itoa(r)] {
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

// slowReplacement is the count of failed pods at which Kubernetes' Job controller waits 20 s or
// more before the next replacement. The gang is recreated then, since a new Job has no backoff.
const slowReplacement = 2

// onLostNode says why the gang is recreated when a pod to replace is on a lost node: it cannot
// stop, and its rank would wait for minutes. It returns "" when there is none.
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

// onAvoidedNode reports whether p is on a node in status.avoidedNodes.
func onAvoidedNode(tj *mlv1.TrainingJob, p *corev1.Pod) bool {
	return p.Spec.NodeName != "" &&
		slices.ContainsFunc(tj.Status.AvoidedNodes, func(a mlv1.AvoidedNode) bool { return a.Name == p.Spec.NodeName })
}

// replaceAvoided deletes the pods on avoided nodes with the grace an order would give, and
// Kubernetes' Job controller replaces each alone.
func (g gangRestart) replaceAvoided(ctx context.Context, tj *mlv1.TrainingJob, pods []corev1.Pod) error {
	if len(pods) == 0 {
		return nil
	}
	replaced := make([]string, 0, len(pods))
	for i := range pods {
		replaced = append(replaced, pods[i].Name+" on "+pods[i].Spec.NodeName)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Replacing the pods on avoided nodes; the others restart in place",
		"attempt", tj.Status.Attempt, "pods", replaced)
	var mu sync.Mutex
	var errs []error
	parallel(len(pods), stopWorkers, func(i int) {
		p := &pods[i]
		err := g.Delete(ctx, p, client.Preconditions{UID: &p.UID}, client.GracePeriodSeconds(orderGrace(tj)))
		if err = ignoreNotFound(err); err != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("deleting pod %s on avoided node %s: %w", klog.KObj(p), p.Spec.NodeName, err))
			mu.Unlock()
			return
		}
		g.remember(tj, p.UID, func(c *childMemory) { c.replaced = markOf(tj.Status.Attempt) })
	})
	return errors.Join(errs...)
}

// replacedOnAvoided says why job's gang must be recreated: a pod is on an avoided node, and the
// older template may place a replacement there again. It returns "" when there is none.
func (g gangRestart) replacedOnAvoided(ctx context.Context, tj *mlv1.TrainingJob, job *batchv1.Job) (string, error) {
	if job.Annotations[names.InPlaceAnnotation] == "" || finished(tj) || len(tj.Status.AvoidedNodes) == 0 {
		return "", nil
	}
	var pods corev1.PodList
	ofJob := client.MatchingLabels{names.ControllerUIDLabel: string(job.UID)}
	if err := g.List(ctx, &pods, client.InNamespace(tj.Namespace), ofJob); err != nil {
		return "", fmt.Errorf("listing pods of %s: %w", klog.KObj(job), err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !madeBy(job, p) || goneWorker(p) || !onAvoidedNode(tj, p) || g.child(tj, p.UID).replaced.is(tj.Status.Attempt) {
			continue
		}
		return fmt.Sprintf("pod %s (rank %s) is on node %s, which the workers avoid now: the Job controller placed it there "+
			"(the Job's template predates the avoidance)", p.Name, p.Labels[names.RankLabel], p.Spec.NodeName), nil
	}
	return "", nil
}

// labelReplacements labels with the current attempt the pods Kubernetes' Job controller created for
// gone ranks, whose supervisors wait for their order (orderBehind). Ended or stopping pods belong
// to an older attempt.
func (g gangRestart) labelReplacements(ctx context.Context, tj *mlv1.TrainingJob, job *batchv1.Job) error {
	if job.Annotations[names.InPlaceAnnotation] == "" || finished(tj) {
		return nil
	}
	others, err := listPods(ctx, g.Client, tj, false, job)
	if err != nil {
		return err
	}
	var errs []error
	for i := range others {
		p := &others[i]
		if !madeBy(job, p) || names.JobAttempt(p) >= tj.Status.Attempt || goneWorker(p) {
			continue
		}
		if err := g.labelOnce(ctx, tj, p, tj.Status.Attempt); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// goneWorker reports whether a worker's pod is gone for its rank: being deleted, ended, or with its
// trainer container ended.
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

// orderGrace returns a restarted trainer's time between SIGTERM and SIGKILL: one second after a
// hang, else the pod's grace period.
func orderGrace(tj *mlv1.TrainingJob) int64 {
	if derive.LastAttemptHung(tj.Status) {
		return hungGrace
	}
	if g := builders.TerminationGrace(tj); g != nil {
		return *g
	}
	return corev1.DefaultTerminationGracePeriodSeconds
}
