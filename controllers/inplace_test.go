package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// playedSupervisors answer the control protocol for every pod IP (the request's host) from one test server:
// held exits by IP, and the orders they took.
type playedSupervisors struct {
	mu     sync.Mutex
	held   map[string]controlapi.Exit
	orders map[string]controlapi.Order
	asked  map[string]int
	// ordered counts the orders taken.
	ordered int
	token   string
	// obey: a supervisor that took an order answers, from then on, that it runs the order's attempt.
	obey bool
}

func (s *playedSupervisors) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ip, _, _ := net.SplitHostPort(r.Host)
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	switch r.URL.Path {
	case controlapi.ExitPath:
		s.asked[ip]++
		_ = json.NewEncoder(w).Encode(s.held[ip])
	case controlapi.RestartPath:
		var o controlapi.Order
		_ = json.NewDecoder(r.Body).Decode(&o)
		s.orders[ip] = o
		s.ordered++
		if s.obey {
			s.held[ip] = controlapi.Exit{Attempt: o.Attempt}
		}
		w.WriteHeader(http.StatusAccepted)
	}
}

// controlClient returns a client that reaches srv whatever address it dials.
func controlClient(srv *httptest.Server) *controlapi.Client {
	addr := srv.Listener.Addr().String()
	return &controlapi.Client{Timeout: 2 * time.Second, HTTP: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}}
}

// heldPod returns rank's running pod of attempt 0 at ip, made by the Job "job-uid", ready or not.
func heldPod(rank, ip string, ready bool) *corev1.Pod {
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "a-worker-" + rank, UID: types.UID("uid-" + rank),
		Labels: map[string]string{names.NameLabel: "a", names.AttemptLabel: "0", names.RankLabel: rank,
			names.ControllerUIDLabel: "job-uid"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "a-worker", UID: "job-uid",
			Controller: ptr.To(true)}}}}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: cond, LastTransitionTime: metav1.NewTime(t0.Time)}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: names.ContainerName, Ready: ready,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	return p
}

// askAndOrder is one reconcile's ask and act steps for the supervisors: it asks them (askSupervisors),
// orders the replacements behind (orderBehind), and returns obs with their answers.
func askAndOrder(t *testing.T, r *JobReconciler, tj *mlv1.TrainingJob, obs derive.Observed) derive.Observed {
	t.Helper()
	g := r.gang(context.Background())
	a := g.askSupervisors(context.Background(), tj, obs.Job, obs.Pods)
	if err := g.orderBehind(context.Background(), tj, a.behind); err != nil {
		t.Fatal(err)
	}
	obs.Held = a.held
	return obs
}

// silent reports whether the memory holds asks pod's supervisor left unanswered.
func silent(r *JobReconciler, tj *mlv1.TrainingJob, pod types.UID) bool {
	return r.gang(context.Background()).child(tj, pod).misses > 0
}

// TestHeldExits: an unready pod whose supervisor holds a failed trainer of the current attempt reads as a
// failed pod, its trainer terminated with the held code and message (times to the second); a ready pod is
// not asked, an unready one that holds nothing is asked once for the same readiness, and a pod no Job made
// is never asked (it would get the token); one that stays unready is asked again after askAgain.
func TestHeldExits(t *testing.T) {
	opts := builders.Options{AgentTokenKey: builders.SecretKey("k"), InPlaceRestart: true}
	tj := tjtest.NewTJ("ml", "a").Obj()
	tj.UID = "tj-uid"
	ended := time.Date(2026, 1, 1, 0, 0, 5, 600_000_000, time.UTC)
	sup := &playedSupervisors{token: builders.ControlToken(tj, opts), asked: map[string]int{}, orders: map[string]controlapi.Order{},
		held: map[string]controlapi.Exit{
			"10.0.0.2": {Held: true, ExitCode: 137, Signal: 9, FinishedAt: ended, Message: "Killed"},
			"10.0.0.4": {Held: true, Attempt: 3, ExitCode: 1}, // an older order's attempt: not this one's
		}}
	srv := httptest.NewServer(sup)
	defer srv.Close()
	clk := clocktesting.NewFakePassiveClock(t0.Time)
	r := &JobReconciler{Options: opts, Control: controlClient(srv), Clock: clk}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{UID: "job-uid", Annotations: map[string]string{names.InPlaceAnnotation: "true"}}}
	stranger := heldPod("9", "10.6.6.6", false) // made by no Job: never given the token
	delete(stranger.Labels, names.ControllerUIDLabel)
	sup.held["10.6.6.6"] = controlapi.Exit{Held: true, ExitCode: 1, Message: "forged"}
	forged := heldPod("8", "10.6.6.8", false) // made by hand with the Job's label, no owner reference
	forged.OwnerReferences = nil
	sup.held["10.6.6.8"] = controlapi.Exit{Held: true, ExitCode: 1, Message: "forged"}
	obs := derive.Observed{Job: job, Pods: []corev1.Pod{*heldPod("0", "10.0.0.1", true), *heldPod("1", "10.0.0.2", false),
		*heldPod("2", "10.0.0.3", false), *heldPod("3", "10.0.0.4", false), *stranger, *forged}}
	for range 2 {
		o := obs
		o.Pods = append([]corev1.Pod(nil), obs.Pods...)
		for i := range o.Pods {
			o.Pods[i] = *o.Pods[i].DeepCopy()
		}
		o = askAndOrder(t, r, tj, o)
		got := map[string]string{}
		for _, p := range o.Workers() {
			cs := trainerStatus(&p)
			got[p.Name] = string(p.Status.Phase)
			if term := cs.State.Terminated; term != nil {
				got[p.Name] += " " + term.Reason + " " + strings.Join([]string{term.Message, term.FinishedAt.UTC().Format(time.RFC3339Nano)}, " ")
			}
		}
		want := map[string]string{"a-worker-0": "Running", "a-worker-1": "Failed Error Killed 2026-01-01T00:00:05Z",
			"a-worker-2": "Running", "a-worker-3": "Running", "a-worker-9": "Running", "a-worker-8": "Running"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("pods (-want +got):\n%s", diff)
		}
	}
	if diff := cmp.Diff(map[string]int{"10.0.0.2": 2, "10.0.0.3": 1, "10.0.0.4": 1}, sup.asked); diff != "" {
		t.Errorf("supervisors asked (-want +got):\n%s", diff)
	}
	// Rank 2, unready from its start, answered it held nothing: the JobController comes back when that
	// answer's window ends, nothing else would trigger a reconcile.
	o := derive.Observed{Job: job, Pods: []corev1.Pod{*heldPod("2", "10.0.0.3", false)}}
	clk.SetTime(t0.Add(askAgain / 4))
	if d, ok := r.gang(context.Background()).exitsAwaited(tj, o, clk.Now()); !ok || d != askAgain*3/4 {
		t.Errorf("rank 2 answered: asked again in %s (%t), want %s", d, ok, askAgain*3/4)
	}
	// Its trainer then fails without its readiness changing: asked again in that next window.
	sup.held["10.0.0.3"] = controlapi.Exit{Held: true, ExitCode: 1, FinishedAt: ended, Message: "lost my peer"}
	clk.SetTime(t0.Add(askAgain))
	if d, ok := r.gang(context.Background()).exitsAwaited(tj, o, clk.Now()); !ok || d != exitRecheck {
		t.Errorf("rank 2 after askAgain: asked again in %s (%t), want %s", d, ok, exitRecheck)
	}
	if o = askAndOrder(t, r, tj, o); o.Workers()[0].Status.Phase != corev1.PodFailed {
		t.Errorf("rank 2 after askAgain: %s; want Failed (held)", o.Workers()[0].Status.Phase)
	}
}

// TestSilentSupervisorsHoldNoWorker: a job whose pods' supervisors accept and never answer (hand-made
// pods, or a stalled endpoint) holds a JobController worker for one timeout per reconcile at most, however
// many pods it has, and each silent pod is asked less and less often (before: every reconcile, requeued
// after 1 s, held a worker ceil(pods/16) x 2 s; ten such jobs took all ten workers).
func TestSilentSupervisorsHoldNoWorker(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // accepts, reads nothing, answers nothing
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	opts := builders.Options{AgentTokenKey: builders.SecretKey("k"), InPlaceRestart: true}
	tj := tjtest.NewTJ("ml", "a").Obj()
	tj.Spec.NumWorkers = 64
	clk := clocktesting.NewFakePassiveClock(t0.Time)
	timeout := 200 * time.Millisecond
	r := &JobReconciler{Options: opts, Clock: clk, Control: &controlapi.Client{Timeout: timeout, HTTP: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, l.Addr().String())
		}}}}}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{UID: "job-uid", Annotations: map[string]string{names.InPlaceAnnotation: "true"}}}
	var pods []corev1.Pod
	for i := range 64 {
		pods = append(pods, *heldPod(strconv.Itoa(i), fmt.Sprintf("10.1.0.%d", i), false))
		pods[i].UID = types.UID(fmt.Sprintf("uid-%d", i))
	}
	asked := func() int {
		o := derive.Observed{Job: job, Pods: append([]corev1.Pod(nil), pods...)}
		start := time.Now()
		askAndOrder(t, r, tj, o)
		if took := time.Since(start); took > 4*timeout {
			t.Errorf("one reconcile's asks took %v, want one timeout (%v) at most, with room", took, timeout)
		}
		n := 0
		for i := range pods {
			if silent(r, tj, pods[i].UID) {
				n++
			}
		}
		return n
	}
	if n := asked(); n != stopWorkers {
		t.Errorf("the first reconcile asked %d pods, want %d (one round)", n, stopWorkers)
	}
	for range 3 {
		asked()
	}
	if n := asked(); n != 64 {
		t.Errorf("after 5 reconciles %d of 64 pods were asked, want all", n)
	}
	// Each was asked once and left it unanswered: none is asked again before exitRecheck.
	d, ok := r.gang(context.Background()).exitsAwaited(tj, derive.Observed{Job: job, Pods: pods}, clk.Now())
	if !ok || d <= 0 || d > exitRecheck {
		t.Errorf("asked again in %v (%t), want within %v", d, ok, exitRecheck)
	}
	for _, p := range pods {
		if _, ok := r.gang(context.Background()).toAsk(tj, job, &p, clk.Now()); ok {
			t.Fatalf("pod %s asked again at once", p.Name)
		}
	}
	// Unanswered again and again, a pod waits up to maxSilentWait.
	for range 10 {
		r.gang(context.Background()).answered(tj, &pods[0], false, clk.Now())
	}
	if d := r.gang(context.Background()).silentFor(tj, &pods[0], clk.Now()); d != maxSilentWait {
		t.Errorf("after 10 silent asks the pod waits %v, want %v", d, maxSilentWait)
	}
	r.gang(context.Background()).answered(tj, &pods[0], true, clk.Now())
	if d := r.gang(context.Background()).silentFor(tj, &pods[0], clk.Now()); d != 0 {
		t.Errorf("after an answer the pod waits %v, want 0", d)
	}

	// More silent pods than the job can have (4 per worker and 16) do not start its memory anew (the
	// backoff of all would be lost, each reconcile asking 16 again): the pods past it wait.
	small := tj.DeepCopy()
	small.Spec.NumWorkers, small.Name, small.UID = 2, "small", "small"
	var asks []int
	for range 12 {
		clk.SetTime(clk.Now().Add(100 * time.Millisecond))
		before := 0
		for i := range pods {
			if silent(r, small, pods[i].UID) {
				before++
			}
		}
		o := derive.Observed{Job: job, Pods: append([]corev1.Pod(nil), pods...)}
		askAndOrder(t, r, small, o)
		n := 0
		for i := range pods {
			if silent(r, small, pods[i].UID) {
				n++
			}
		}
		asks = append(asks, n-before)
	}
	if n := len(r.memory.jobs[client.ObjectKeyFromObject(small)].children); n > childBound(small) {
		t.Errorf("the memory holds %d pods of the job, want at most %d", n, childBound(small))
	}
	if asks[len(asks)-1] != 0 || asks[len(asks)-2] != 0 {
		t.Errorf("new pods asked per reconcile %v: want none once the memory is full", asks)
	}
}

// TestRestartInPlace: once RESUME_FROM is settled and the ConfigMap holds the attempt, every running pod of
// the Job is ordered into the new attempt (with RESUME_FROM and the grace period) and labelled with it, then
// the Job; a pod being deleted, failed, not started or missing is left to Kubernetes' Job controller, which replaces
// it alone; a pod on a node to avoid is deleted and replaced alone the same way (the others restart in
// place); no pod left running, or a gone or replaced pod Kubernetes' Job controller would replace only after 20 s
// or more (its backoff after the Job's earlier failed pods) makes the gang recreated instead, with an event
// saying why.
func TestRestartInPlace(t *testing.T) {
	for _, tc := range []struct {
		name    string
		settled string
		// cmAttempt is the ConfigMap's names.CurrentAttemptKey ("1" when empty).
		cmAttempt string
		// failed is the Job's status.failed.
		failed int32
		pods   func() []*corev1.Pod
		avoid  string
		lost   bool // the node to avoid is lost: not Ready and tainted (else Ready)
		want   bool
		orders map[string]controlapi.Order
		labels string // the Job's attempt label after
		event  string
		// deleted are the pods deleted after.
		deleted []string
	}{
		{
			name: "every pod ordered and labelled", settled: "1",
			pods: func() []*corev1.Pod {
				return []*corev1.Pod{heldPod("0", "10.0.0.1", true), heldPod("1", "10.0.0.2", false)}
			},
			want: true, labels: "1", event: "attempt 1: the 2 workers' pods restart in place",
			orders: map[string]controlapi.Order{"10.0.0.1": {Attempt: 1, GraceSeconds: 30, ResumeFrom: "pvc://c/ck-3"},
				"10.0.0.2": {Attempt: 1, GraceSeconds: 30, ResumeFrom: "pvc://c/ck-3"}},
		},
		{
			name: "RESUME_FROM not settled yet: nothing ordered", settled: "0",
			pods: func() []*corev1.Pod {
				return []*corev1.Pod{heldPod("0", "10.0.0.1", true), heldPod("1", "10.0.0.2", false)}
			},
			want: true, labels: "0",
		},
		{
			name: "the ConfigMap not at the attempt yet: nothing ordered", settled: "1", cmAttempt: "0",
			pods: func() []*corev1.Pod {
				return []*corev1.Pod{heldPod("0", "10.0.0.1", true), heldPod("1", "10.0.0.2", false)}
			},
			want: true, labels: "0",
		},
		{
			name: "a pod being deleted: the other restarts in place, it is replaced alone", settled: "1",
			pods: func() []*corev1.Pod {
				p := heldPod("1", "10.0.0.2", false)
				p.DeletionTimestamp, p.Finalizers = ptr.To(metav1.NewTime(t0.Time)), []string{"x"}
				return []*corev1.Pod{heldPod("0", "10.0.0.1", true), p}
			},
			want: true, labels: "1", orders: map[string]controlapi.Order{"10.0.0.1": {Attempt: 1, GraceSeconds: 30, ResumeFrom: "pvc://c/ck-3"}},
			event: "attempt 1: 1 worker's pod restarts in place; the Job controller replaces pod a-worker-1 (rank 1, being deleted), " +
				"which joins once it runs",
		},
		{
			name: "a pod failed and one not started: left to the Job controller", settled: "1",
			pods: func() []*corev1.Pod {
				failed, pending := heldPod("1", "10.0.0.2", false), heldPod("2", "", false)
				failed.Status.Phase, pending.Status.Phase = corev1.PodFailed, corev1.PodPending
				return []*corev1.Pod{heldPod("0", "10.0.0.1", true), failed, pending}
			},
			want: true, labels: "1", orders: map[string]controlapi.Order{"10.0.0.1": {Attempt: 1, GraceSeconds: 30, ResumeFrom: "pvc://c/ck-3"}},
			event: "the Job controller replaces pod a-worker-1 (rank 1, failed), pod a-worker-2 (rank 2, not started)",
		},
		{
			name: "a pod whose trainer's container ended, its sidecars still running: left to the Job controller", settled: "1",
			pods: func() []*corev1.Pod {
				killed := heldPod("1", "10.0.0.2", false)
				killed.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137}}
				return []*corev1.Pod{heldPod("0", "10.0.0.1", true), killed}
			},
			want: true, labels: "1", orders: map[string]controlapi.Order{"10.0.0.1": {Attempt: 1, GraceSeconds: 30, ResumeFrom: "pvc://c/ck-3"}},
			event: "the Job controller replaces pod a-worker-1 (rank 1, its trainer's container ended)",
		},
		{
			name: "a pod missing (deleted, gone already): the others restart in place, it is replaced alone", settled: "1",
			pods: func() []*corev1.Pod { return []*corev1.Pod{heldPod("0", "10.0.0.1", true)} },
			want: true, labels: "1", orders: map[string]controlapi.Order{"10.0.0.1": {Attempt: 1, GraceSeconds: 30, ResumeFrom: "pvc://c/ck-3"}},
			event: "attempt 1: 1 worker's pod restarts in place; the Job controller replaces rank 1 (its pod gone), which joins once it runs",
		},
		{
			name: "a pod gone, the Job's third: recreated (the Job controller would wait 20 s or more)", settled: "1", failed: 2,
			pods: func() []*corev1.Pod {
				p := heldPod("1", "10.0.0.2", false)
				p.Status.Phase = corev1.PodFailed
				return []*corev1.Pod{heldPod("0", "10.0.0.1", true), p}
			},
			labels: "0", event: "recreating the workers' pods: the Job controller would hold back the replacement of pod a-worker-1 " +
				"(rank 1, failed) for 20 s or more (its pod failure backoff, 10 s doubling with each of the Job's 2 failed pods)",
		},
		{
			name: "every pod gone: recreated", settled: "1",
			pods: func() []*corev1.Pod {
				p := heldPod("0", "10.0.0.1", true)
				p.Status.Phase = corev1.PodFailed
				return []*corev1.Pod{p}
			},
			labels: "0", event: "attempt 1: recreating the workers' pods: no worker's pod is left running",
		},
		{
			name: "a pod on a node to avoid: replaced alone, the other restarts in place", settled: "1", avoid: "n1",
			pods: func() []*corev1.Pod {
				p := heldPod("1", "10.0.0.2", false)
				p.Spec.NodeName = "n1"
				return []*corev1.Pod{heldPod("0", "10.0.0.1", true), p}
			},
			want: true, labels: "1", orders: map[string]controlapi.Order{"10.0.0.1": {Attempt: 1, GraceSeconds: 30, ResumeFrom: "pvc://c/ck-3"}},
			event: "attempt 1: 1 worker's pod restarts in place; the Job controller replaces pod a-worker-1 (rank 1, on node n1, " +
				"which the workers avoid now), which joins once it runs",
			deleted: []string{"a-worker-1"},
		},
		{
			name: "a pod on a lost node to avoid: recreated (it cannot stop there to be replaced)", settled: "1", avoid: "n1", lost: true,
			pods: func() []*corev1.Pod {
				p := heldPod("1", "10.0.0.2", false)
				p.Spec.NodeName = "n1"
				return []*corev1.Pod{heldPod("0", "10.0.0.1", true), p}
			},
			labels: "0", event: "recreating the workers' pods: pod a-worker-1 (rank 1) is on node n1, which is not Ready (NodeStatusUnknown: " +
				"Kubelet stopped posting node status.): it cannot stop there to be replaced alone",
		},
		{
			name: "every pod on a node to avoid: recreated", settled: "1", avoid: "n1",
			pods: func() []*corev1.Pod {
				p0, p1 := heldPod("0", "10.0.0.1", true), heldPod("1", "10.0.0.2", false)
				p0.Spec.NodeName, p1.Spec.NodeName = "n1", "n1"
				return []*corev1.Pod{p0, p1}
			},
			labels: "0", event: "attempt 1: recreating the workers' pods: no worker's pod is left running",
		},
		{
			name: "a pod on a node to avoid, the Job's third: recreated (the Job controller would wait 20 s or more)", settled: "1",
			avoid: "n1", failed: 2,
			pods: func() []*corev1.Pod {
				p := heldPod("1", "10.0.0.2", false)
				p.Spec.NodeName = "n1"
				return []*corev1.Pod{heldPod("0", "10.0.0.1", true), p}
			},
			labels: "0", event: "recreating the workers' pods: the Job controller would hold back the replacement of pod a-worker-1 " +
				"(rank 1, on node n1, which the workers avoid now) for 20 s or more",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := builders.Options{AgentTokenKey: builders.SecretKey("k"), InPlaceRestart: true}
			tj := tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StoragePVC}).Obj().Defaulted()
			tj.UID, tj.Status.Attempt = "tj-uid", 1
			if tc.avoid != "" {
				tj.Status.AvoidedNodes = []mlv1.AvoidedNode{{Name: tc.avoid}}
			}
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: names.JobName(tj), UID: "job-uid",
				Labels: map[string]string{names.AttemptLabel: "0"}, Annotations: map[string]string{names.InPlaceAnnotation: "true"}},
				Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](2)}, Status: batchv1.JobStatus{Failed: tc.failed}}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: names.ConfigMapName(tj),
				Annotations: map[string]string{names.ResumeAttemptAnnotation: tc.settled}},
				Data: map[string]string{names.ResumeFromKey: "pvc://c/ck-3", names.CurrentAttemptKey: tc.cmAttempt}}
			if tc.cmAttempt == "" {
				cm.Data[names.CurrentAttemptKey] = "1"
			}
			objs := []client.Object{tj, job, cm}
			if tc.avoid != "" {
				objs = append(objs, testNode(tc.avoid, tc.lost))
			}
			for _, p := range tc.pods() {
				objs = append(objs, p)
			}
			sup := &playedSupervisors{token: builders.ControlToken(tj, opts), asked: map[string]int{}, orders: map[string]controlapi.Order{}}
			srv := httptest.NewServer(sup)
			defer srv.Close()
			r := newReconciler(objs...)
			r.Options, r.Control = opts, controlClient(srv)
			rec := events.NewFakeRecorder(10)
			r.Recorder = rec
			_, done, err := r.gang(context.Background()).restart(context.Background(), tj, cm, job)
			if err != nil || done != tc.want {
				t.Fatalf("restartInPlace = %t, %v; want %t", done, err, tc.want)
			}
			if diff := cmp.Diff(tc.orders, nilIfEmpty(sup.orders)); diff != "" {
				t.Errorf("orders (-want +got):\n%s", diff)
			}
			got := &batchv1.Job{}
			if err := r.Get(context.Background(), client.ObjectKeyFromObject(job), got); err != nil {
				t.Fatal(err)
			}
			if got.Labels[names.AttemptLabel] != tc.labels {
				t.Errorf("the Job's attempt label %q, want %q", got.Labels[names.AttemptLabel], tc.labels)
			}
			var event string
			select {
			case event = <-rec.Events:
			default:
			}
			if tc.event != "" && !strings.Contains(event, tc.event) || tc.event == "" && event != "" {
				t.Errorf("event %q, want one with %q", event, tc.event)
			}
			var deleted []string
			for _, p := range tc.pods() {
				if err := r.Get(context.Background(), client.ObjectKeyFromObject(p), &corev1.Pod{}); apierrors.IsNotFound(err) {
					deleted = append(deleted, p.Name)
				}
			}
			if diff := cmp.Diff(tc.deleted, deleted); diff != "" {
				t.Errorf("pods deleted (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRecreateOnAvoided: a Job restarted in place whose replacement pod Kubernetes' Job controller placed on a node
// the workers avoid now (its template predates the avoidance) is recreated, with an event saying why; a
// replacement elsewhere, a pod on the node being deleted or one the operator just deleted there (its
// deletion not in the cache yet) keep it.
func TestRecreateOnAvoided(t *testing.T) {
	for _, tc := range []struct {
		name    string
		inPlace bool
		pod     func() *corev1.Pod
		// replaced: the operator deleted the pod (replaceAvoided), its deletion not in the cache yet.
		replaced bool
		want     bool
		event    string
	}{
		{
			name: "the replacement placed on the avoided node: recreated", inPlace: true,
			pod:  func() *corev1.Pod { return heldPod("1", "10.0.0.2", false) },
			want: true, event: "attempt 1: recreating the workers' pods: pod a-worker-1 (rank 1) is on node n1, which the workers avoid now: " +
				"the Job controller placed it there (the Job's template predates the avoidance)",
		},
		{
			name: "the replacement elsewhere: kept", inPlace: true,
			pod: func() *corev1.Pod {
				p := heldPod("1", "10.0.0.2", false)
				p.Spec.NodeName = "n2"
				return p
			},
		},
		{
			name: "the replaced pod being deleted: kept", inPlace: true,
			pod: func() *corev1.Pod {
				p := heldPod("1", "10.0.0.2", false)
				p.DeletionTimestamp, p.Finalizers = ptr.To(metav1.NewTime(t0.Time)), []string{"x"}
				return p
			},
		},
		{
			name: "the replaced pod, its deletion not in the cache yet: kept", inPlace: true, replaced: true,
			pod: func() *corev1.Pod { return heldPod("1", "10.0.0.2", false) },
		},
		{
			name: "a Job that does not restart in place: kept",
			pod:  func() *corev1.Pod { return heldPod("1", "10.0.0.2", false) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "a").Obj().Defaulted()
			tj.UID, tj.Status.Attempt, tj.Status.State = "tj-uid", 1, mlv1.StateRunning
			tj.Status.AvoidedNodes = []mlv1.AvoidedNode{{Name: "n1"}}
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: names.JobName(tj), UID: "job-uid",
				Labels: map[string]string{names.AttemptLabel: "1"}}}
			if tc.inPlace {
				job.Annotations = map[string]string{names.InPlaceAnnotation: "true"}
			}
			p := tc.pod()
			p.Labels[names.AttemptLabel] = "1"
			if p.Spec.NodeName == "" {
				p.Spec.NodeName = "n1"
			}
			r := newReconciler(tj, job, p)
			rec := events.NewFakeRecorder(10)
			r.Recorder = rec
			if tc.replaced {
				r.gang(context.Background()).remember(tj, p.UID, func(c *childMemory) { c.replaced = markOf(1) })
			}
			var obs derive.Observed
			got, err := r.recreateOnAvoided(context.Background(), tj, job, &obs)
			if err != nil || got != tc.want {
				t.Fatalf("recreateOnAvoided = %t, %v; want %t", got, err, tc.want)
			}
			err = r.Get(context.Background(), client.ObjectKeyFromObject(job), &batchv1.Job{})
			if gone := apierrors.IsNotFound(err); gone != tc.want {
				t.Errorf("the Job deleted: %t (%v), want %t", gone, err, tc.want)
			}
			var event string
			select {
			case event = <-rec.Events:
			default:
			}
			if diff := cmp.Diff(tc.event, strings.TrimPrefix(event, "Normal Restarting ")); diff != "" {
				t.Errorf("event (-want +got):\n%s", diff)
			}
		})
	}
}

func nilIfEmpty(m map[string]controlapi.Order) map[string]controlapi.Order {
	if len(m) == 0 {
		return nil
	}
	return m
}

// TestFinishedJobIsNotRestarted: a run that ended (its deadline passed after a restart was decided) while its
// Job is still the older attempt's gets its Job deleted, with or without checkpoints, and no order.
func TestFinishedJobIsNotRestarted(t *testing.T) {
	for _, checkpoints := range []bool{false, true} {
		opts := builders.Options{AgentTokenKey: builders.SecretKey("k"), InPlaceRestart: true}
		b := tjtest.NewTJ("ml", "a")
		if checkpoints {
			b = b.Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StoragePVC})
		}
		tj := b.Obj().Defaulted()
		tj.UID, tj.Status.Attempt, tj.Status.State = "tj-uid", 1, mlv1.StateFailed
		job := builders.AdmittedJob(tj, opts, nil)
		job.UID, job.Labels[names.AttemptLabel] = "job-uid", "0"
		job.OwnerReferences = []metav1.OwnerReference{{APIVersion: "ml.example.com/v1", Kind: "TrainingJob", Name: tj.Name, UID: tj.UID,
			Controller: ptr.To(true)}}
		sup := &playedSupervisors{token: builders.ControlToken(tj, opts), asked: map[string]int{}, orders: map[string]controlapi.Order{}}
		srv := httptest.NewServer(sup)
		r := newReconciler(tj, job, heldPod("0", "10.0.0.1", true), heldPod("1", "10.0.0.2", false))
		r.Options, r.Control = opts, controlClient(srv)
		var obs derive.Observed
		if err := r.ensureJob(context.Background(), tj, nil, &obs); err != nil {
			t.Fatal(err)
		}
		srv.Close()
		if err := r.Get(context.Background(), client.ObjectKeyFromObject(job), &batchv1.Job{}); err == nil || len(sup.orders) > 0 {
			t.Errorf("checkpoints %t: the ended run's Job of an older attempt is still there (%v), orders %v", checkpoints, err, sup.orders)
		}
	}
}

// TestInPlaceSupport: without the rule served nothing is looked for; with it, a node declaring the feature
// is looked for at growing intervals until one does (nodes register after the operator starts), then never
// again.
func TestInPlaceSupport(t *testing.T) {
	lists := 0
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(NewScheme()).Build(), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, l client.ObjectList, opts ...client.ListOption) error {
			lists++
			return c.List(ctx, l, opts...)
		}})
	ctx := context.Background()
	if (&inPlaceSupport{reader: c}).available(ctx, t0.Time) || lists != 0 {
		t.Fatalf("without the rule served: available, or %d lists", lists)
	}
	s := &inPlaceSupport{served: true, reader: c}
	type step struct {
		after     time.Duration
		node      bool // a node declaring the feature registers before the step
		available bool
		lists     int
	}
	for i, st := range []step{
		{after: 0, available: false, lists: 1},
		{after: 500 * time.Millisecond, node: true, available: false, lists: 1}, // not looked for again yet
		{after: time.Second, available: true, lists: 2},
		{after: time.Hour, available: true, lists: 2},
	} {
		if st.node {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
				Status: corev1.NodeStatus{DeclaredFeatures: []string{restartAllContainersFeature}}}
			if err := c.Create(ctx, node); err != nil {
				t.Fatal(err)
			}
		}
		if got := s.available(ctx, t0.Add(st.after)); got != st.available || lists != st.lists {
			t.Errorf("step %d: available %t after %d lists, want %t after %d", i, got, lists, st.available, st.lists)
		}
	}
}

// TestLabelReplacements: in a Job that restarted in place, a pod Kubernetes' Job controller created for a rank that
// was gone (the Job's template's older attempt label), running or not yet, is labelled with the current
// attempt, with no order (its supervisor gets one once it runs: TestBehindIsOrdered); a pod that ended, one
// whose trainer's container ended, one being deleted, one moved already and another Job's are left alone.
func TestLabelReplacements(t *testing.T) {
	tj := tjtest.NewTJ("ml", "a").Obj().Defaulted()
	tj.UID, tj.Status.Attempt = "tj-uid", 2
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: names.JobName(tj), UID: "job-uid",
		Labels: map[string]string{names.AttemptLabel: "2"}, Annotations: map[string]string{names.InPlaceAnnotation: "true"}},
		Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](4)}}
	moved, replacement, pending, deleting, ended, stranger := heldPod("0", "10.0.0.1", true), heldPod("1", "10.0.0.2", false),
		heldPod("2", "", false), heldPod("3", "10.0.0.4", false), heldPod("3", "10.0.0.5", false), heldPod("4", "10.0.0.6", false)
	moved.Labels[names.AttemptLabel] = "2"
	pending.Status.Phase = corev1.PodPending
	deleting.DeletionTimestamp, deleting.Finalizers = ptr.To(metav1.NewTime(t0.Time)), []string{"x"}
	ended.Name, ended.UID, ended.Status.Phase = "a-worker-3-old", "uid-3-old", corev1.PodFailed
	killed := heldPod("5", "10.0.0.7", false) // its trainer's container ended, its sidecars still stopping
	killed.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137}}
	stranger.Labels[names.ControllerUIDLabel] = "another-job"
	r := newReconciler(tj, job, moved, replacement, pending, deleting, ended, stranger, killed)
	if err := r.gang(context.Background()).labelReplacements(context.Background(), tj, job); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*corev1.Pod{moved, replacement, pending, deleting, ended, stranger, killed} {
		got := &corev1.Pod{}
		if err := r.Get(context.Background(), client.ObjectKeyFromObject(p), got); err != nil {
			t.Fatal(err)
		}
		want := p.Labels[names.AttemptLabel]
		if p == replacement || p == pending {
			want = "2"
		}
		if got.Labels[names.AttemptLabel] != want {
			t.Errorf("pod %s: attempt label %q, want %q", p.Name, got.Labels[names.AttemptLabel], want)
		}
	}
}

// TestBehindIsOrdered: a pod of the current attempt whose supervisor is behind it (a replacement waiting for
// its order) is ordered into the attempt with the ConfigMap's RESUME_FROM once it is settled (asked again a
// second later until then); a pod whose supervisor holds an older attempt's exit (ordered, restarting) is
// not, nor any once the run has ended.
func TestBehindIsOrdered(t *testing.T) {
	for _, tc := range []struct {
		name    string
		settled string
		ended   bool
		want    map[string]controlapi.Order
		// again: how soon the JobController asks again (exitsAwaited), 0 for never
		again time.Duration
	}{
		{name: "settled: the ordered pods stay unready until they restart, asked again in the next window", settled: "2",
			want:  map[string]controlapi.Order{"10.0.0.2": {Attempt: 2, GraceSeconds: 30, ResumeFrom: "pvc://c/ck-3"}},
			again: askAgain},
		{name: "RESUME_FROM not settled yet: asked again in a second", settled: "1", again: exitRecheck},
		{name: "the run ended: not ordered", settled: "2", ended: true, again: askAgain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := builders.Options{AgentTokenKey: builders.SecretKey("k"), InPlaceRestart: true}
			tj := tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StoragePVC}).Obj().Defaulted()
			tj.UID, tj.Status.Attempt = "tj-uid", 2
			if tc.ended {
				tj.Status.State = mlv1.StateFailed
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: names.ConfigMapName(tj),
				Annotations: map[string]string{names.ResumeAttemptAnnotation: tc.settled}},
				Data: map[string]string{names.ResumeFromKey: "pvc://c/ck-3", names.CurrentAttemptKey: "2"}}
			sup := &playedSupervisors{token: builders.ControlToken(tj, opts), asked: map[string]int{}, orders: map[string]controlapi.Order{},
				held: map[string]controlapi.Exit{"10.0.0.2": {Attempt: 0}, "10.0.0.3": {Held: true, Attempt: 1, ExitCode: 1}}}
			srv := httptest.NewServer(sup)
			defer srv.Close()
			r := newReconciler(tj, cm)
			r.Options, r.Control = opts, controlClient(srv)
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{UID: "job-uid", Annotations: map[string]string{names.InPlaceAnnotation: "true"}}}
			obs := derive.Observed{Job: job, Pods: []corev1.Pod{*heldPod("1", "10.0.0.2", false), *heldPod("2", "10.0.0.3", false)}}
			for i := range obs.Pods {
				obs.Pods[i].Labels[names.AttemptLabel] = "2"
			}
			obs = askAndOrder(t, r, tj, obs)
			if diff := cmp.Diff(tc.want, nilIfEmpty(sup.orders)); diff != "" {
				t.Errorf("orders (-want +got):\n%s", diff)
			}
			if again, ok := r.gang(context.Background()).exitsAwaited(tj, obs, t0.Time); again != tc.again || ok != (tc.again > 0) {
				t.Errorf("asked again in %s (%t), want %s", again, ok, tc.again)
			}
		})
	}
}

// TestLabelledOnce: reconciles on a cache that does not show the attempt label yet (the pods as they were
// when ordered, or since changed by the kubelet) neither order nor label them again; a label still missing
// after labelledFor (removed by someone, or its write failed) is written again; the Job is labelled once too.
func TestLabelledOnce(t *testing.T) {
	opts := builders.Options{AgentTokenKey: builders.SecretKey("k"), InPlaceRestart: true}
	tj := tjtest.NewTJ("ml", "a").Obj()
	tj.UID, tj.Status.Attempt = "tj-uid", 1
	pods := []corev1.Pod{*heldPod("0", "10.0.0.1", true), *heldPod("1", "10.0.0.2", true)}
	r := newReconciler(&pods[0], &pods[1])
	stale := make([]corev1.Pod, len(pods))
	for i := range pods {
		if err := r.Get(context.Background(), client.ObjectKeyFromObject(&pods[i]), &stale[i]); err != nil {
			t.Fatal(err)
		}
	}
	clk := clocktesting.NewFakePassiveClock(t0.Time)
	r.Clock = clk
	patches, failOnce := 0, true
	r.Client = interceptor.NewClient(r.Client.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if failOnce && obj.GetName() == "a-worker-1" {
				failOnce = false
				return errors.New("the API server is busy")
			}
			patches++
			return c.Patch(ctx, obj, patch, opts...)
		}})
	sup := &playedSupervisors{token: builders.ControlToken(tj, opts), asked: map[string]int{}, orders: map[string]controlapi.Order{}}
	srv := httptest.NewServer(sup)
	defer srv.Close()
	r.Options, r.Control = opts, controlClient(srv)
	o := controlapi.Order{Attempt: 1}
	type writes struct{ Orders, Patches int }
	for i, step := range []struct {
		name  string
		since time.Duration
		pods  func() []corev1.Pod
		want  writes
	}{
		{name: "ordered; rank 1's label failed", pods: func() []corev1.Pod { return slices.Clone(stale) }, want: writes{2, 1}},
		{name: "the same cache: rank 1 labelled", pods: func() []corev1.Pod { return slices.Clone(stale) }, want: writes{2, 2}},
		{name: "the kubelet's write seen, not the label", pods: func() []corev1.Pod {
			p := slices.Clone(stale)
			p[0].ResourceVersion, p[1].ResourceVersion = "999", "999"
			return p
		}, want: writes{2, 2}},
		{name: "still no label after labelledFor", since: labelledFor, pods: func() []corev1.Pod { return slices.Clone(stale) },
			want: writes{2, 4}},
	} {
		clk.SetTime(clk.Now().Add(step.since))
		failed, err := r.gang(context.Background()).orderPods(context.Background(), tj, step.pods(), o)
		if failed != "" || (err != nil) != (i == 0) {
			t.Fatalf("%s: %q, %v", step.name, failed, err)
		}
		if diff := cmp.Diff(step.want, writes{Orders: sup.ordered, Patches: patches}); diff != "" {
			t.Errorf("%s (-want +got):\n%s", step.name, diff)
		}
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: names.JobName(tj), UID: "job-uid"}}
	if err := r.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := r.gang(context.Background()).labelOnce(context.Background(), tj, job.DeepCopy(), 1); err != nil {
			t.Fatal(err)
		}
	}
	if patches != 5 {
		t.Errorf("%d label patches after the Job was labelled twice on the same cache, want 5", patches)
	}
}

// testNode returns a Ready node, or one the node lifecycle controller found lost (not Ready, tainted).
func testNode(name string, lost bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	if lost {
		n.Status.Conditions[0] = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
			Message: "Kubelet stopped posting node status."}
		n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}}
	}
	return n
}

// refusingSupervisors answer asks as waiting for attempt 0's order and refuse every order, each held until
// all of want orders are in flight (or a second passes): how many were in flight at once is inFlightMax.
type refusingSupervisors struct {
	mu                    sync.Mutex
	want                  int
	asked                 map[string]int
	inFlight, inFlightMax int
	all                   chan struct{}
}

func (s *refusingSupervisors) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ip, _, _ := net.SplitHostPort(r.Host)
	if r.URL.Path == controlapi.ExitPath {
		s.mu.Lock()
		s.asked[ip]++
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(controlapi.Exit{Attempt: 0})
		return
	}
	s.mu.Lock()
	s.inFlight++
	s.inFlightMax = max(s.inFlight, s.inFlightMax)
	if s.inFlight == s.want {
		close(s.all)
	}
	s.mu.Unlock()
	select {
	case <-s.all:
	case <-time.After(time.Second):
	}
	http.Error(w, "not now", http.StatusServiceUnavailable)
}

// TestRefusedOrdersAreMisses: the replacements behind the attempt are ordered at once, not one after
// another, and a supervisor that answers asks but refuses its order is asked again only after a silent
// one's wait, doubling with each refusal: it cannot hold a JobController worker round after round.
func TestRefusedOrdersAreMisses(t *testing.T) {
	const behind = 4
	opts := builders.Options{AgentTokenKey: builders.SecretKey("k"), InPlaceRestart: true}
	tj := tjtest.NewTJ("ml", "a").Obj().Defaulted()
	tj.UID, tj.Status.Attempt = "tj-uid", 2
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: names.ConfigMapName(tj)},
		Data: map[string]string{names.CurrentAttemptKey: "2"}}
	sup := &refusingSupervisors{want: behind, asked: map[string]int{}, all: make(chan struct{})}
	srv := httptest.NewServer(sup)
	defer srv.Close()
	r := newReconciler(tj, cm)
	r.Options, r.Control = opts, controlClient(srv)
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{UID: "job-uid", Annotations: map[string]string{names.InPlaceAnnotation: "true"}}}
	obs := derive.Observed{Job: job}
	for i := range behind {
		p := heldPod(strconv.Itoa(i), fmt.Sprintf("10.0.0.%d", i+1), false)
		p.Labels[names.AttemptLabel] = "2"
		obs.Pods = append(obs.Pods, *p)
	}
	askAndOrder(t, r, tj, obs)
	sup.mu.Lock()
	inFlightMax := sup.inFlightMax
	sup.mu.Unlock()
	if inFlightMax != behind {
		t.Errorf("%d orders in flight at once, want all %d", inFlightMax, behind)
	}
	askAndOrder(t, r, tj, obs)
	// Once its wait ends it is asked again, its answer does not clear the miss, and the next wait doubles.
	r.Clock.(*clocktesting.FakePassiveClock).SetTime(t0.Add(time.Minute))
	askAndOrder(t, r, tj, obs)
	sup.mu.Lock()
	defer sup.mu.Unlock()
	g := r.gang(context.Background())
	for _, p := range obs.Pods {
		got := struct{ Asked, Misses int }{sup.asked[p.Status.PodIP], g.child(tj, p.UID).misses}
		if diff := cmp.Diff(struct{ Asked, Misses int }{2, 2}, got); diff != "" {
			t.Errorf("pod %s, after three rounds a minute apart (-want +got):\n%s", p.Name, diff)
		}
	}
}
