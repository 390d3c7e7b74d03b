package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
)

// The in-place mode: every pod gets its own loopback address, and one server on the supervisor's port
// plays each pod's supervisor (the request's destination address says which pod): it holds a failed
// trainer and takes restart orders (package controlapi; any token: the played kubelet is no tenant). On an
// order the played kubelet restarts the pod's containers as the kubelet 1.36 does (kubelet.restartAll).

// supervisors are the played supervisors by pod IP.
type supervisors struct {
	mu   sync.Mutex
	byIP map[string]*played
	next int
}

// played is one pod's supervisor: the attempt it runs in, the exit it holds (nil: none) and its pod.
type played struct {
	pod     *corev1.Pod
	attempt int32
	held    *controlapi.Exit
}

// podIP gives each new pod an address of its own, 127.1.0.1 onward.
func (s *supervisors) podIP(p *corev1.Pod) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	ip := fmt.Sprintf("127.1.%d.%d", s.next/250, 1+s.next%250)
	attempt, _ := strconv.Atoi(p.Labels[names.AttemptLabel])
	s.byIP[ip] = &played{pod: p, attempt: int32(attempt)}
	return ip
}

// serve serves the played supervisors on every address at the supervisor's port until ctx is done.
func (k *kubelet) serveSupervisors(ctx context.Context) error {
	l, err := net.Listen("tcp", fmt.Sprintf(":%d", builders.SupervisorPort))
	if err != nil {
		return fmt.Errorf("the played supervisors: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+controlapi.ExitPath, func(w http.ResponseWriter, r *http.Request) {
		s := k.sup.of(r)
		if s == nil {
			http.NotFound(w, r)
			return
		}
		k.sup.mu.Lock()
		e := controlapi.Exit{Attempt: s.attempt}
		if s.held != nil {
			e = *s.held
		}
		k.sup.mu.Unlock()
		_ = json.NewEncoder(w).Encode(e)
	})
	mux.HandleFunc("POST "+controlapi.RestartPath, func(w http.ResponseWriter, r *http.Request) {
		var o controlapi.Order
		s := k.sup.of(r)
		if s == nil || json.NewDecoder(r.Body).Decode(&o) != nil {
			http.Error(w, "bad order", http.StatusBadRequest)
			return
		}
		k.sup.mu.Lock()
		restart := o.Attempt > s.attempt
		if restart {
			s.attempt, s.held = o.Attempt, nil
		}
		p := s.pod
		k.sup.mu.Unlock()
		if restart {
			k.work <- func() { k.restartAll(p) }
		}
		w.WriteHeader(http.StatusAccepted)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	go func() { _ = srv.Serve(l) }()
	return nil
}

// of returns the played supervisor a request reached, by its destination address.
func (s *supervisors) of(r *http.Request) *played {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return nil
	}
	host, _, _ := net.SplitHostPort(a.String())
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byIP[host]
}

// hold fails the pod's trainer the in-place way: its supervisor holds the exit, and the kubelet reports
// the pod unready after the readiness probe failed (one status write).
func (k *kubelet) hold(ctx context.Context, p *corev1.Pod, code int32) error {
	k.sup.mu.Lock()
	for _, s := range k.sup.byIP {
		if s.pod.UID == p.UID {
			s.held = &controlapi.Exit{Attempt: s.attempt, Held: true, ExitCode: code, StartedAt: time.Now(), FinishedAt: time.Now(),
				Message: "killed"}
		}
	}
	k.sup.mu.Unlock()
	st := *p.Status.DeepCopy()
	now := metav1.Now()
	setPodReady(&st, corev1.ConditionFalse, now)
	for i := range st.ContainerStatuses {
		if st.ContainerStatuses[i].Name == names.ContainerName {
			st.ContainerStatuses[i].Ready = false
		}
	}
	return k.patchStatus(ctx, p, st)
}

// restartAll restarts every container of the pod in place as the kubelet 1.36 does, at the cost it has at
// least: one status write when the containers stop (Pending, AllContainersRestarting, each container waiting
// with reason RestartingAllContainers, its restart count one more), and, the containers stopped stopDelay
// later (as a deleted pod's are), one when they all run again (Running, Ready). The containers' own start
// costs nothing here, as for a new pod.
func (k *kubelet) restartAll(p *corev1.Pod) {
	ctx := context.Background()
	k.mark(p, func(r *podRecord) { r.restarting = time.Now() })
	cur := k.current(p)
	st := *cur.Status.DeepCopy()
	now := metav1.Now()
	st.Phase = corev1.PodPending
	setPodCondition(&st, corev1.AllContainersRestarting, corev1.ConditionTrue, now)
	setPodReady(&st, corev1.ConditionFalse, now)
	for i := range st.ContainerStatuses {
		cs := &st.ContainerStatuses[i]
		cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137,
			Reason: "RestartingAllContainers", Message: "The container is removed because RestartAllContainers in place"}}
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "RestartingAllContainers"}}
		cs.Ready, cs.Started, cs.RestartCount = false, ptr.To(false), cs.RestartCount+1
	}
	if err := k.patchStatus(ctx, cur, st); err != nil {
		fmt.Println("peer-bench: played kubelet: restarting", p.Name+":", err)
		return
	}
	time.AfterFunc(k.stopDelay, func() { k.work <- func() { k.runAgain(cur, st) } })
}

// runAgain reports the pod's containers running again after an in-place restart.
func (k *kubelet) runAgain(p *corev1.Pod, st corev1.PodStatus) {
	now := metav1.Now()
	st.Phase = corev1.PodRunning
	setPodCondition(&st, corev1.AllContainersRestarting, corev1.ConditionFalse, now)
	setPodReady(&st, corev1.ConditionTrue, now)
	for i := range st.ContainerStatuses {
		cs := &st.ContainerStatuses[i]
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
		cs.Ready, cs.Started = true, ptr.To(true)
	}
	if k.patchStatus(context.Background(), p, st) == nil {
		k.mark(p, func(r *podRecord) { r.running = time.Now() })
	}
}

// current returns the pod as the played kubelet last saw it.
func (k *kubelet) current(p *corev1.Pod) *corev1.Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	if r := k.pods[k.jobOf(p)][p.UID]; r != nil && r.pod != nil {
		return r.pod
	}
	return p
}

// setPodReady sets the pod's Ready and ContainersReady conditions.
func setPodReady(st *corev1.PodStatus, s corev1.ConditionStatus, now metav1.Time) {
	setPodCondition(st, corev1.PodReady, s, now)
	setPodCondition(st, corev1.ContainersReady, s, now)
}

func setPodCondition(st *corev1.PodStatus, t corev1.PodConditionType, s corev1.ConditionStatus, now metav1.Time) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			if st.Conditions[i].Status != s {
				st.Conditions[i].Status, st.Conditions[i].LastTransitionTime = s, now
			}
			return
		}
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now})
}
