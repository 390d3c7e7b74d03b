package node

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// sidecarGrace is how long a native sidecar gets between SIGTERM and SIGKILL once the main containers are done.
const sidecarGrace = 2 * time.Second

// podRun runs one pod: volumes, init containers in order, then the main containers, restarting them as
// restartPolicy says, and reports every change to the pod's status.
type podRun struct {
	n    *Node
	pod  *corev1.Pod // as first seen; the spec of a pod does not change
	key  types.NamespacedName
	dir  string
	addr netip.Addr

	stopOnce sync.Once
	stop     chan struct{} // closed when the pod must stop
	grace    time.Duration
	finalize bool // delete the pod from the API server once its processes are gone
	done     chan struct{}

	mu     sync.Mutex // guards status and logStarts
	status corev1.PodStatus
	// logStarts are, by container, the offsets in its log file at which its last two runs began: a
	// kubelet keeps each run's log apart (the current one, and the previous with ?previous=true).
	logStarts map[string][2]int64
	writeMu   sync.Mutex // serialises status writes
}

func newPodRun(n *Node, pod *corev1.Pod) *podRun {
	return &podRun{
		n: n, pod: pod.DeepCopy(), key: client.ObjectKeyFromObject(pod), dir: PodDir(n.opts.DataRoot, pod),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
}

// logStarted records that a run of the container begins at offset of its log file.
func (r *podRun) logStarted(container string, offset int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.logStarts == nil {
		r.logStarts = map[string][2]int64{}
	}
	r.logStarts[container] = [2]int64{r.logStarts[container][1], offset}
}

// logRange returns where the container's current run's log begins (with previous, the previous run's: from,
// to), and whether the container runs now; ok is false when the node did not start it (restarted since).
func (r *podRun) logRange(container string, previous bool) (from, to int64, running, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	starts, ok := r.logStarts[container]
	for _, cs := range r.status.ContainerStatuses {
		if cs.Name == container {
			running = cs.State.Running != nil
		}
	}
	if previous {
		return starts[0], starts[1], running, ok
	}
	return starts[1], -1, running, ok
}

// round is one run of the pod's containers, init containers first. A container exit that matches a
// RestartAllContainers rule (KEP-5532) ends the round: every container is stopped and the pod runs them
// all again, init containers included, keeping its UID, address and volumes.
type round struct {
	stop     chan struct{} // closed when the round's containers must stop: the pod stops, or all restart
	stopOnce sync.Once
	restart  atomic.Bool // a container's exit asked to restart all

	sidecars    sync.WaitGroup
	sidecarStop chan struct{} // closed when the sidecars must stop: main containers done or the round stopped
	sidecarOnce sync.Once
}

// newRound starts a round whose stop follows the pod's.
func (r *podRun) newRound() *round {
	rd := &round{stop: make(chan struct{}), sidecarStop: make(chan struct{})}
	go func() {
		select {
		case <-r.stop:
			rd.end()
		case <-rd.stop:
		}
	}()
	return rd
}

func (rd *round) end() { rd.stopOnce.Do(func() { close(rd.stop) }) }

// restartAll ends the round for a restart of every container.
func (rd *round) restartAll() {
	rd.restart.Store(true)
	rd.end()
}

// stopSidecars stops the round's native sidecars once the main containers are done (or the round stops)
// and waits for them; the kubelet does the same, so a sidecar never keeps a finished pod running.
func (rd *round) stopSidecars() {
	rd.sidecarOnce.Do(func() { close(rd.sidecarStop) })
	rd.sidecars.Wait()
}

// terminate stops the pod's processes: SIGTERM, then SIGKILL after grace. When called for a pod being
// deleted, the pod is removed from the API server afterwards.
func (r *podRun) terminate(grace time.Duration) { r.signalStop(grace, true) }

func (r *podRun) shutdown(grace time.Duration) { r.signalStop(grace, false) }

func (r *podRun) signalStop(grace time.Duration, finalize bool) {
	r.stopOnce.Do(func() {
		r.mu.Lock()
		r.grace, r.finalize = grace, finalize
		r.mu.Unlock()
		// The native sidecars are stopped once the main containers are done (stopSidecars), as the kubelet
		// does: a trainer that writes a checkpoint on SIGTERM has its checkpoint agent beside it until it
		// exits, and the agent's final report names that checkpoint.
		close(r.stop)
	})
}

func (r *podRun) stopping() bool { return closed(r.stop) }

func (r *podRun) loop(ctx context.Context) {
	defer close(r.done)
	log := r.n.opts.Log.WithValues("pod", r.key)
	if err := r.run(ctx); err != nil {
		log.Error(err, "pod run failed")
	}
	r.n.releaseAddr(r.addr, r.pod)
	r.n.gpus.release(string(r.pod.UID))
	<-r.stop
	r.mu.Lock()
	finalize := r.finalize
	r.mu.Unlock()
	if finalize {
		if err := r.n.finishDeletion(ctx, r.pod); err != nil {
			log.Error(err, "deleting pod")
		}
	}
}

// run takes the pod to a terminal phase, or until it is stopped.
func (r *podRun) run(ctx context.Context) error {
	addr, err := r.n.claimAddr(r.pod)
	if err != nil {
		return r.fail(ctx, "AddressConflict", err.Error())
	}
	r.addr = addr
	r.initStatus()
	if err := r.writeStatus(ctx); err != nil {
		return err
	}
	dirs, ok := r.prepareVolumes(ctx)
	if !ok {
		return nil
	}
	for {
		rd := r.newRound()
		initialized := r.runInit(ctx, dirs, rd)
		if initialized {
			r.runMain(ctx, dirs, rd)
		}
		rd.stopSidecars()
		if !rd.restart.Load() || r.stopping() {
			r.update(func(s *corev1.PodStatus) { endPhase(s, initialized, r.stopping()) })
			return r.writeStatus(ctx)
		}
		r.update(func(s *corev1.PodStatus) { restartingAll(s, len(r.pod.Spec.InitContainers) > 0) })
		_ = r.writeStatus(ctx)
		if !sleep(restartAllPause, r.stop) {
			return r.writeStatus(ctx)
		}
	}
}

// restartAllPause is how long the containers of a pod that restarts them all wait to start again: on the
// real nodes the init container started 1.25 s after the exit that matched. It paces a container that
// always exits that way (without it the node started 40 rounds a second).
const restartAllPause = time.Second

// prepareVolumes retries until the pod's volumes can be set up (a missing ConfigMap may appear later),
// reporting the reason on every waiting container as the kubelet does.
func (r *podRun) prepareVolumes(ctx context.Context) (map[string]string, bool) {
	for {
		dirs, err := r.n.volumeDirs(ctx, r.pod, r.dir)
		if err == nil {
			return dirs, true
		}
		r.update(func(s *corev1.PodStatus) { setWaiting(s, "", "CreateContainerConfigError", err.Error()) })
		_ = r.writeStatus(ctx)
		if !sleep(5*time.Second, r.stop) {
			return nil, false
		}
	}
}

// runInit runs the init containers in order; false when one failed for good or the round was stopped.
func (r *podRun) runInit(ctx context.Context, dirs map[string]string, rd *round) bool {
	for i := range r.pod.Spec.InitContainers {
		c := &r.pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			// A native sidecar: it keeps running beside the main containers until they are done.
			rd.sidecars.Go(func() { r.supervise(ctx, c, dirs, corev1.RestartPolicyAlways, true, rd.sidecarStop, rd) })
			continue
		}
		policy := containerPolicy(c, r.pod.Spec.RestartPolicy)
		if policy == corev1.RestartPolicyAlways {
			policy = corev1.RestartPolicyOnFailure // init containers run to completion
		}
		if !r.supervise(ctx, c, dirs, policy, true, rd.stop, rd) {
			return false
		}
	}
	r.update(func(s *corev1.PodStatus) { setCondition(s, corev1.PodInitialized, true) })
	return !closed(rd.stop)
}

// runMain runs the main containers side by side until each is done for good or the round is stopped.
func (r *podRun) runMain(ctx context.Context, dirs map[string]string, rd *round) {
	var wg sync.WaitGroup
	for i := range r.pod.Spec.Containers {
		c := &r.pod.Spec.Containers[i]
		wg.Go(func() { r.supervise(ctx, c, dirs, containerPolicy(c, r.pod.Spec.RestartPolicy), false, rd.stop, rd) })
	}
	wg.Wait()
}

// containerPolicy returns a container's restart policy: its own (restartPolicy on the container, which
// restart rules require), else the pod's.
func containerPolicy(c *corev1.Container, pod corev1.RestartPolicy) corev1.RestartPolicy {
	if c.RestartPolicy != nil {
		return corev1.RestartPolicy(*c.RestartPolicy)
	}
	return pod
}

// supervise runs one container, restarting it as its restart rules and policy say; true when it ended with
// exit code 0. An exit that matches a RestartAllContainers rule ends the round (rd.restartAll). A
// container that cannot be configured yet (a missing ConfigMap or Secret) is retried whatever the policy,
// as the kubelet does: it never ran, so it has not failed.
func (r *podRun) supervise(
	ctx context.Context, c *corev1.Container, dirs map[string]string, policy corev1.RestartPolicy, init bool, stop <-chan struct{},
	rd *round,
) bool {
	backoff := r.n.opts.RestartBackoff
	for {
		code, ran := r.runContainer(ctx, c, dirs, init, stop, rd)
		if closed(stop) {
			return ran && code == 0
		}
		action, matched := restartRule(c, code)
		if ran && matched && action == corev1.ContainerRestartRuleActionRestartAllContainers {
			r.update(func(s *corev1.PodStatus) { setCondition(s, corev1.AllContainersRestarting, true) })
			_ = r.writeStatus(ctx)
			rd.restartAll()
			return false
		}
		if ran && !matched && (policy == corev1.RestartPolicyNever || (policy == corev1.RestartPolicyOnFailure && code == 0)) {
			return code == 0
		}
		if ran {
			r.update(func(s *corev1.PodStatus) { crashLoop(s, c.Name, init, backoff) })
			_ = r.writeStatus(ctx)
		}
		if !sleep(backoff, stop) {
			return false
		}
		backoff = min(2*backoff, 5*time.Minute)
	}
}

// runContainer starts the container's process, reports it running, waits for it (or stops it when the
// pod stops) and reports its exit code. ran is false when the container could not be configured.
func (r *podRun) runContainer(
	ctx context.Context, c *corev1.Container, dirs map[string]string, init bool, stop <-chan struct{}, rd *round,
) (code int32, ran bool) {
	p, err := r.start(ctx, c, dirs)
	var cfgErr *ConfigError
	if errors.As(err, &cfgErr) {
		r.update(func(s *corev1.PodStatus) { setWaiting(s, c.Name, "CreateContainerConfigError", err.Error()) })
		_ = r.writeStatus(ctx)
		return 0, false
	}
	if err != nil {
		r.update(func(s *corev1.PodStatus) { setTerminated(s, c.Name, init, 128, "StartError", err.Error(), time.Now()) })
		_ = r.writeStatus(ctx)
		return 128, true
	}
	probed := !init && c.ReadinessProbe != nil
	r.update(func(s *corev1.PodStatus) {
		setRunning(s, c.Name, init, p.cmd.Process.Pid, p.started)
		if probed {
			setReady(s, c.Name, false) // unready until its probe passes
		}
	})
	_ = r.writeStatus(ctx)
	if probed {
		go r.probeReadiness(ctx, c, p.exited)
	}
	select {
	case <-p.exited:
	case <-stop:
		r.mu.Lock()
		grace := r.grace
		switch {
		case !closed(r.stop) && rd.restart.Load():
			grace = gracePeriod(r.pod) // all containers restart: the pod's grace period, without preStop hooks
		case !closed(r.stop):
			grace = sidecarGrace // a sidecar stopped because the main containers are done
		}
		r.mu.Unlock()
		p.kill(grace)
	}
	code, reason := p.exitCode()
	msg := r.terminationMessage(c.Name)
	if msg == "" && code != 0 && c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		msg = r.logTail(c.Name)
	}
	r.update(func(s *corev1.PodStatus) { setTerminated(s, c.Name, init, code, reason, msg, p.finished) })
	_ = r.writeStatus(ctx)
	return code, true
}

// sleep waits d; false when stop closed first.
func sleep(d time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (r *podRun) initStatus() {
	now := metav1.Now()
	r.update(func(s *corev1.PodStatus) {
		*s = initialStatus(r.pod, r.addr.String(), now)
	})
}

// fail marks the pod Failed before any container ran.
func (r *podRun) fail(ctx context.Context, reason, msg string) error {
	r.update(func(s *corev1.PodStatus) {
		*s = initialStatus(r.pod, "", metav1.Now())
		s.Phase, s.Reason, s.Message = corev1.PodFailed, reason, msg
	})
	return r.writeStatus(ctx)
}

func (r *podRun) update(f func(*corev1.PodStatus)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.status)
}

// writeStatus replaces the pod's status with the node's view, keeping conditions set by others (the
// scheduler's PodScheduled, Kubernetes' Job controller's disruption target). Like the kubelet's status manager it
// keeps trying while the API server cannot be reached (a restart, an outage), until the pod's run ends.
func (r *podRun) writeStatus(ctx context.Context) error {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		err := r.writeOnce(ctx)
		switch {
		case err == nil || apierrors.IsNotFound(err):
			return nil
		case apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) ||
			errors.Is(err, errPartitioned) || ctx.Err() != nil:
			return fmt.Errorf("writing status of pod %s: %w", r.key, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("writing status of pod %s: %w", r.key, err)
		case <-time.After(delay):
		}
	}
}

func (r *podRun) writeOnce(ctx context.Context) error {
	r.mu.Lock()
	status := *r.status.DeepCopy()
	r.mu.Unlock()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod := &corev1.Pod{}
		if err := r.n.reader.Get(ctx, r.key, pod); err != nil {
			return err
		}
		if pod.UID != r.pod.UID {
			return apierrors.NewNotFound(corev1.Resource("pods"), r.key.Name)
		}
		pod.Status = mergeStatus(pod.Status, status)
		return r.n.client.Status().Update(ctx, pod)
	})
}

// withTerminationLog adds the container's terminationMessagePath (default /dev/termination-log) to its
// mounts: an empty host file per container start, as the kubelet bind-mounts one.
func (r *podRun) withTerminationLog(c *corev1.Container, ms mounts) (mounts, error) {
	p := c.TerminationMessagePath
	if p == "" {
		p = corev1.TerminationMessagePathDefault
	}
	host := r.terminationPath(c.Name)
	if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(host, nil, 0o644); err != nil {
		return nil, err
	}
	ms = append(ms, mount{container: filepath.Clean(p), host: host})
	sort.Slice(ms, func(i, j int) bool { return len(ms[i].container) > len(ms[j].container) })
	return ms, nil
}

func (r *podRun) terminationPath(container string) string {
	return filepath.Join(r.dir, "termination", container)
}

// terminationMessage returns what the container wrote to its terminationMessagePath: at most 4,096 bytes, as
// the kubelet reads it.
func (r *podRun) terminationMessage(container string) string {
	data, err := os.ReadFile(r.terminationPath(container))
	if err != nil {
		return ""
	}
	if len(data) > 4096 {
		data = data[:4096]
	}
	return string(data)
}

// logTail returns the end of a container's log, as the kubelet takes a termination message from the log with
// terminationMessagePolicy FallbackToLogsOnError: the last 2,048 bytes or 80 lines, whichever is less.
func (r *podRun) logTail(container string) string {
	p, err := r.logPath(container)
	if err != nil {
		return ""
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	if len(data) > 2048 {
		data = data[len(data)-2048:]
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 80 {
		lines = lines[len(lines)-80:]
	}
	return strings.Join(lines, "\n")
}

// logPath returns the log file of a container of this pod.
func (r *podRun) logPath(container string) (string, error) {
	dir := filepath.Join(r.dir, "logs")
	return filepath.Join(dir, container+".log"), os.MkdirAll(dir, 0o755)
}
