package node

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The functions here compute pod status the way the kubelet reports it; they do no I/O.

// ownConditions are the pod conditions the node sets; others (PodScheduled, DisruptionTarget) are kept.
var ownConditions = []corev1.PodConditionType{
	corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady,
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
