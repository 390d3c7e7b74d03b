package node

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The functions here compute pod status the way the kubelet reports it; they do no I/O.

// ownConditions are the pod conditions the node sets; others (PodScheduled, DisruptionTarget) are kept.
var ownConditions = []corev1.PodConditionType{
	corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady, corev1.AllContainersRestarting,
}

// ContainerIDPrefix starts a container ID on a process node; the process ID follows.
const ContainerIDPrefix = "process://"

// hostIP is the address of every process node: pods share the host.
const hostIP = "127.0.0.1"

func initialStatus(pod *corev1.Pod, podIP string, now metav1.Time) corev1.PodStatus {
	s := corev1.PodStatus{Phase: corev1.PodPending, HostIP: hostIP, HostIPs: []corev1.HostIP{{IP: hostIP}}, StartTime: &now}
	if podIP != "" {
		s.PodIP, s.PodIPs = podIP, []corev1.PodIP{{IP: podIP}}
	}
	for _, c := range pod.Spec.InitContainers {
		s.InitContainerStatuses = append(s.InitContainerStatuses, waitingStatus(c, "PodInitializing"))
	}
	reason := "ContainerCreating"
	if len(pod.Spec.InitContainers) > 0 {
		reason = "PodInitializing"
	}
	for _, c := range pod.Spec.Containers {
		s.ContainerStatuses = append(s.ContainerStatuses, waitingStatus(c, reason))
	}
	setCondition(&s, corev1.PodReadyToStartContainers, podIP != "")
	setCondition(&s, corev1.PodInitialized, len(pod.Spec.InitContainers) == 0)
	setCondition(&s, corev1.ContainersReady, false)
	setCondition(&s, corev1.PodReady, false)
	if couldRestartAll(pod) {
		setCondition(&s, corev1.AllContainersRestarting, false)
	}
	return s
}

func waitingStatus(c corev1.Container, reason string) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name: c.Name, Image: c.Image, ImageID: "process://" + c.Image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}},
	}
}

// containerStatus finds a container's status among the init or main containers.
func containerStatus(s *corev1.PodStatus, name string, init bool) *corev1.ContainerStatus {
	list := s.ContainerStatuses
	if init {
		list = s.InitContainerStatuses
	}
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

// setWaiting sets a waiting reason on one container, or on every container not running when name is "".
func setWaiting(s *corev1.PodStatus, name, reason, msg string) {
	for _, list := range [][]corev1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses} {
		for i := range list {
			if (name == "" && list[i].State.Running == nil) || list[i].Name == name {
				list[i].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
			}
		}
	}
}

// setRunning records a container's start; a restart moves its previous end to lastState.
func setRunning(s *corev1.PodStatus, name string, init bool, pid int, started time.Time) {
	cs := containerStatus(s, name, init)
	if cs == nil {
		return
	}
	if t := cs.State.Terminated; t != nil {
		cs.LastTerminationState = corev1.ContainerState{Terminated: t}
		cs.RestartCount++
	} else if w := cs.State.Waiting; w != nil && cs.LastTerminationState.Terminated != nil && w.Reason == "CrashLoopBackOff" {
		cs.RestartCount++
	}
	cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}}
	cs.ContainerID = fmt.Sprintf("%s%d", ContainerIDPrefix, pid)
	cs.Started, cs.Ready = ptr.To(true), !init
	if !init {
		s.Phase = corev1.PodRunning
		updateReadiness(s)
	}
}

// setTerminated records a container's end.
func setTerminated(s *corev1.PodStatus, name string, init bool, code int32, reason, msg string, at time.Time) {
	cs := containerStatus(s, name, init)
	if cs == nil {
		return
	}
	var started metav1.Time
	if r := cs.State.Running; r != nil {
		started = r.StartedAt
	}
	cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: reason, Message: msg, StartedAt: started, FinishedAt: metav1.NewTime(at),
	}}
	cs.Started, cs.Ready = ptr.To(false), false
	updateReadiness(s)
}

// crashLoop marks a terminated container as waiting to be restarted after backoff.
func crashLoop(s *corev1.PodStatus, name string, init bool, backoff time.Duration) {
	cs := containerStatus(s, name, init)
	if cs == nil || cs.State.Terminated == nil {
		return
	}
	cs.LastTerminationState = corev1.ContainerState{Terminated: cs.State.Terminated}
	cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason:  "CrashLoopBackOff",
		Message: fmt.Sprintf("back-off %s restarting failed container=%s", backoff, name),
	}}
}

// updateReadiness sets ContainersReady and Ready: true while every main container runs.
func updateReadiness(s *corev1.PodStatus) {
	ready := len(s.ContainerStatuses) > 0
	for _, cs := range s.ContainerStatuses {
		ready = ready && cs.Ready
	}
	setCondition(s, corev1.ContainersReady, ready)
	setCondition(s, corev1.PodReady, ready)
}

func setCondition(s *corev1.PodStatus, t corev1.PodConditionType, ok bool) {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
	}
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			if s.Conditions[i].Status != status {
				s.Conditions[i].Status, s.Conditions[i].LastTransitionTime = status, metav1.Now()
			}
			return
		}
	}
	s.Conditions = append(s.Conditions, corev1.PodCondition{Type: t, Status: status, LastTransitionTime: metav1.Now()})
}

// terminalPhase returns Succeeded when every main container exited 0, else Failed.
func terminalPhase(s *corev1.PodStatus) corev1.PodPhase {
	for _, cs := range s.ContainerStatuses {
		if t := cs.State.Terminated; t == nil || t.ExitCode != 0 {
			return corev1.PodFailed
		}
	}
	return corev1.PodSucceeded
}

// mergeStatus returns the node's status with the conditions other components own kept from the current one.
func mergeStatus(current, node corev1.PodStatus) corev1.PodStatus {
	out := node
	out.Conditions = nil
	for _, c := range current.Conditions {
		if !isOwn(c.Type) {
			out.Conditions = append(out.Conditions, c)
		}
	}
	out.Conditions = append(out.Conditions, node.Conditions...)
	return out
}

func isOwn(t corev1.PodConditionType) bool {
	for _, o := range ownConditions {
		if o == t {
			return true
		}
	}
	return false
}

// restartRule returns the action of the first of the container's restart rules its exit code matches.
func restartRule(c *corev1.Container, code int32) (corev1.ContainerRestartRuleAction, bool) {
	for _, rule := range c.RestartPolicyRules {
		e := rule.ExitCodes
		if e == nil {
			continue
		}
		if slices.Contains(e.Values, code) == (e.Operator == corev1.ContainerRestartRuleOnExitCodesOpIn) {
			return rule.Action, true
		}
	}
	return "", false
}

// restartedAllMessage is the kubelet's (1.36) last state of every container a RestartAllContainers rule
// stopped: exit code 137, reason RestartingAllContainers, no times; the exit that matched the rule is not
// kept.
const (
	restartedAllMessage = "The container is removed because RestartAllContainers in place"
	restartingAllReason = "RestartingAllContainers"
)

// restartingAll reports, as the kubelet 1.36 does, a pod whose containers were all stopped by a
// RestartAllContainers rule and start again: every container's last state is the kubelet's
// RestartingAllContainers end (the exit that matched is not kept) and its restart count one more (one that
// did not start in the round is left as it is), waiting with that reason; the pod is
// Pending, not initialized (when it has init containers) nor ready, and AllContainersRestarting is
// False again as the containers start.
func restartingAll(s *corev1.PodStatus, inits bool) {
	for _, list := range [][]corev1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses} {
		for i := range list {
			cs := &list[i]
			if cs.State.Waiting != nil {
				continue // not started in this round: the kubelet counts no restart of it
			}
			cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 137, Reason: restartingAllReason, Message: restartedAllMessage}}
			cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: restartingAllReason}}
			cs.RestartCount++
			cs.Started, cs.Ready = ptr.To(false), false
		}
	}
	s.Phase = corev1.PodPending
	if inits {
		setCondition(s, corev1.PodInitialized, false)
	}
	updateReadiness(s)
	setCondition(s, corev1.AllContainersRestarting, false)
}

// couldRestartAll reports whether a container of the pod has a RestartAllContainers rule: the kubelet then
// reports the AllContainersRestarting condition (False) from the pod's start.
func couldRestartAll(pod *corev1.Pod) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			for _, r := range c.RestartPolicyRules {
				if r.Action == corev1.ContainerRestartRuleActionRestartAllContainers {
					return true
				}
			}
		}
	}
	return false
}

// endPhase sets the phase of a pod whose containers are done: Failed when an init container failed for
// good, else from the main containers' ends; a stopped pod keeps its phase until its containers report.
func endPhase(s *corev1.PodStatus, initialized, stopped bool) {
	switch {
	case !initialized && !stopped:
		s.Phase = corev1.PodFailed
	case initialized:
		s.Phase = terminalPhase(s)
	}
}
