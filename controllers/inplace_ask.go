package controllers

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
)

// Asking the supervisors how their trainers ended: one bounded round per reconcile, whose answers
// are a value.

// supervisorAnswers is what the supervisors of a job's pods said in one round (askSupervisors).
type supervisorAnswers struct {
	// held are the ends of the trainers the supervisors hold, by pod UID.
	held map[types.UID]derive.HeldExit
	// behind are the replacements whose supervisor waits for its order into the current attempt.
	behind []corev1.Pod
}

// askSupervisors asks the supervisors of job's unready pods how their trainers ended (toAsk).
func (g gangRestart) askSupervisors(ctx context.Context, tj *mlv1.TrainingJob, job *batchv1.Job, pods []corev1.Pod) supervisorAnswers {
	if job == nil || job.Annotations[names.InPlaceAnnotation] == "" {
		return supervisorAnswers{}
	}
	token, now, ask := builders.ControlToken(tj, g.opts), g.clock.Now(), g.whomToAsk(tj, job, pods)
	exits := make([]*controlapi.Exit, len(pods))
	behind := make([]bool, len(pods))
	parallel(len(ask), stopWorkers, func(j int) {
		p := &pods[ask[j]]
		key, _ := g.heldKey(p)
		e, err := g.control.Exit(ctx, podAddr(p, builders.SupervisorPort), controlapi.ExitToken(token, tokenPodUID(p)))
		switch {
		case err != nil:
			g.answered(tj, p, false, now)
			ctrl.LoggerFrom(ctx).V(1).Info("A supervisor did not answer", "pod", klog.KObj(p), "error", err.Error())
		case !e.Held && e.Attempt < tj.Status.Attempt && !finished(tj):
			// Its order's outcome counts (orderBehind), not this answer.
			behind[ask[j]] = true
		case !e.Held || e.Attempt != tj.Status.Attempt:
			g.answered(tj, p, true, now)
			g.remember(tj, p.UID, func(c *childMemory) { c.notHeld = key })
		default:
			g.answered(tj, p, true, now)
			exits[ask[j]] = &e
		}
	})
	return answersOf(ctx, pods, exits, behind)
}

// whomToAsk returns the indexes of the pods to ask in one round: at most stopWorkers, with no more
// silent ones than the memory takes (silentFor).
func (g gangRestart) whomToAsk(tj *mlv1.TrainingJob, job *batchv1.Job, pods []corev1.Pod) []int {
	var ask []int
	now, room := g.clock.Now(), g.silentRoom(tj)
	for i := range pods {
		p := &pods[i]
		if _, ok := g.toAsk(tj, job, p, now); !ok || len(ask) == stopWorkers {
			continue
		}
		if g.child(tj, p.UID).misses == 0 {
			if room == 0 {
				continue
			}
			room--
		}
		ask = append(ask, i)
	}
	return ask
}

// answersOf returns the answers of one round, in the pods' order.
func answersOf(ctx context.Context, pods []corev1.Pod, exits []*controlapi.Exit, behind []bool) supervisorAnswers {
	var a supervisorAnswers
	for i := range pods {
		if e := exits[i]; e != nil {
			if a.held == nil {
				a.held = map[types.UID]derive.HeldExit{}
			}
			a.held[pods[i].UID] = derive.HeldExit{ExitCode: e.ExitCode, Signal: e.Signal, Message: e.Message,
				StartedAt: e.StartedAt, FinishedAt: e.FinishedAt}
			ctrl.LoggerFrom(ctx).V(1).Info("A supervisor holds its trainer's end", "pod", klog.KObj(&pods[i]),
				"exitCode", e.ExitCode, "signal", e.Signal)
		}
		if behind[i] {
			a.behind = append(a.behind, pods[i])
		}
	}
	return a
}

// exitsAwaited says when to ask the supervisors again: soon (exitRecheck) while one is due, when a
// silent one's wait ends, or when an askAgain window of an unready pod ends.
func (g gangRestart) exitsAwaited(tj *mlv1.TrainingJob, obs derive.Observed, now time.Time) (time.Duration, bool) {
	if obs.Job == nil || obs.Job.Annotations[names.InPlaceAnnotation] == "" {
		return 0, false
	}
	answered, wait := false, time.Duration(0)
	pods := obs.Workers()
	for i := range pods {
		p := &pods[i]
		if _, ask := g.toAsk(tj, obs.Job, p, now); ask {
			return exitRecheck, true
		}
		if d := g.silentFor(tj, p, now); d > 0 && madeBy(obs.Job, p) {
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

// toAsk reports whether to ask p's supervisor how its trainer ended, and returns its readiness key
// (heldKey). Only pods the Job made (madeBy) get the token.
func (g gangRestart) toAsk(tj *mlv1.TrainingJob, job *batchv1.Job, p *corev1.Pod, now time.Time) (string, bool) {
	key, ok := g.heldKey(p)
	c := g.child(tj, p.UID)
	return key, ok && madeBy(job, p) && c.notHeld != key && g.silentFor(tj, p, now) == 0 &&
		(c.misses > 0 || g.silentRoom(tj) > 0)
}

// silentRoom returns how many more silent pods tj's memory takes.
func (g gangRestart) silentRoom(tj *mlv1.TrainingJob) int {
	room := childBound(tj)
	g.memory.peek(client.ObjectKeyFromObject(tj), func(j *jobMemory) { room = j.silentRoom(tj) })
	return room
}

// madeBy reports whether job made p: job is p's controller owner and the label agrees. A label
// alone proves nothing, since a tenant can set it.
func madeBy(job *batchv1.Job, p *corev1.Pod) bool {
	ref := metav1.GetControllerOf(p)
	return job != nil && ref != nil && ref.UID == job.UID && ref.Kind == "Job" && p.Labels[names.ControllerUIDLabel] == string(job.UID)
}

// tokenPodUID returns the pod UID p's supervisor derives its tokens for, or "" (the job's token)
// for a pod an older operator made.
func tokenPodUID(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == names.ContainerName && slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == controlapi.PodUIDEnv }) {
			return string(p.UID)
		}
	}
	return ""
}

// maxSilentWait caps how long a silent supervisor waits to be asked again; the wait doubles from
// exitRecheck with each miss. A held trainer's hold ends by itself, so no failure is lost.
const maxSilentWait = 32 * time.Second

// answered remembers whether p's supervisor answered an ask made at now.
func (g gangRestart) answered(tj *mlv1.TrainingJob, p *corev1.Pod, ok bool, now time.Time) {
	if ok {
		g.memory.peek(client.ObjectKeyFromObject(tj), func(j *jobMemory) {
			if c := j.child(p.UID); c != nil {
				c.misses, c.lastMiss = 0, time.Time{}
			}
		})
		return
	}
	g.remember(tj, p.UID, func(c *childMemory) { c.misses, c.lastMiss = c.misses+1, now })
}

// silentFor returns how long p's supervisor is not asked; 0 means it may be.
func (g gangRestart) silentFor(tj *mlv1.TrainingJob, p *corev1.Pod, now time.Time) time.Duration {
	c := g.child(tj, p.UID)
	if c.misses == 0 {
		return 0
	}
	wait := min(exitRecheck<<min(c.misses-1, 6), maxSilentWait)
	// A clock stepped back waits no longer than wait.
	return min(max(0, c.lastMiss.Add(wait).Sub(now)), wait)
}

// heldKey returns mayBeHeld's key, stable within an askAgain window.
func (g gangRestart) heldKey(p *corev1.Pod) (string, bool) {
	key, ok := mayBeHeld(p)
	return key + "/" + strconv.FormatInt(g.clock.Now().UnixNano()/int64(askAgain), 10), ok
}

// askAgain is how long a supervisor's "holds nothing" answer stands for a pod that stays unready.
const askAgain = 2 * time.Second

// exitRecheck is how soon a supervisor that did not answer is asked again.
const exitRecheck = time.Second

// mayBeHeld reports whether a pod's trainer may be held: the pod runs unready with its trainer
// running. The key is its UID, Ready transition time and restarts.
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
