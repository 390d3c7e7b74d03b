package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestContainerLifecycleStatus(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init"}},
		Containers:     []corev1.Container{{Name: "a"}, {Name: "b"}},
	}}
	s := initialStatus(pod, "127.1.2.3", metav1.Now())
	now := time.Now()
	type view struct {
		Phase         corev1.PodPhase
		Ready         corev1.ConditionStatus
		Init          corev1.ConditionStatus
		Restarts      int32
		LastExit      int32
		StateA, State string
	}
	look := func() view {
		v := view{Phase: s.Phase, Restarts: s.ContainerStatuses[0].RestartCount, LastExit: -1}
		for _, c := range s.Conditions {
			switch c.Type {
			case corev1.PodReady:
				v.Ready = c.Status
			case corev1.PodInitialized:
				v.Init = c.Status
			}
		}
		if lt := s.ContainerStatuses[0].LastTerminationState.Terminated; lt != nil {
			v.LastExit = lt.ExitCode
		}
		st := s.ContainerStatuses[0].State
		switch {
		case st.Running != nil:
			v.StateA = "running"
		case st.Terminated != nil:
			v.StateA = "terminated"
		case st.Waiting != nil:
			v.StateA = st.Waiting.Reason
		}
		return v
	}
	steps := []struct {
		name string
		do   func()
		want view
	}{
		{name: "created", do: func() {},
			want: view{Phase: corev1.PodPending, Ready: corev1.ConditionFalse, Init: corev1.ConditionFalse, Restarts: 0, LastExit: -1,
				StateA: "PodInitializing"}},
		{name: "init done", do: func() {
			setRunning(&s, "init", true, 1, now)
			setTerminated(&s, "init", true, 0, "Completed", "", now)
			setCondition(&s, corev1.PodInitialized, true)
		}, want: view{Phase: corev1.PodPending, Ready: corev1.ConditionFalse, Init: corev1.ConditionTrue, Restarts: 0, LastExit: -1,
			StateA: "PodInitializing"}},
		{name: "a running", do: func() { setRunning(&s, "a", false, 2, now) },
			want: view{Phase: corev1.PodRunning, Ready: corev1.ConditionFalse, Init: corev1.ConditionTrue, Restarts: 0, LastExit: -1,
				StateA: "running"}},
		{name: "both running: ready", do: func() { setRunning(&s, "b", false, 3, now) },
			want: view{Phase: corev1.PodRunning, Ready: corev1.ConditionTrue, Init: corev1.ConditionTrue, Restarts: 0, LastExit: -1,
				StateA: "running"}},
		{name: "a crashed", do: func() { setTerminated(&s, "a", false, 137, "Error", "", now) },
			want: view{Phase: corev1.PodRunning, Ready: corev1.ConditionFalse, Init: corev1.ConditionTrue, Restarts: 0, LastExit: -1,
				StateA: "terminated"}},
		{name: "a backing off", do: func() { crashLoop(&s, "a", false, time.Second) },
			want: view{Phase: corev1.PodRunning, Ready: corev1.ConditionFalse, Init: corev1.ConditionTrue, Restarts: 0, LastExit: 137,
				StateA: "CrashLoopBackOff"}},
		{name: "a restarted", do: func() { setRunning(&s, "a", false, 4, now) },
			want: view{Phase: corev1.PodRunning, Ready: corev1.ConditionTrue, Init: corev1.ConditionTrue, Restarts: 1, LastExit: 137,
				StateA: "running"}},
	}
	for _, st := range steps {
		st.do()
		if diff := cmp.Diff(st.want, look()); diff != "" {
			t.Fatalf("%s (-want +got):\n%s", st.name, diff)
		}
	}
	if got := s.ContainerStatuses[0].ContainerID; got != "process://4" {
		t.Errorf("container ID %q, want process://4", got)
	}
	setTerminated(&s, "a", false, 0, "Completed", "", now)
	setTerminated(&s, "b", false, 0, "Completed", "", now)
	if p := terminalPhase(&s); p != corev1.PodSucceeded {
		t.Errorf("all exited 0: phase %s", p)
	}
	setTerminated(&s, "b", false, 1, "Error", "", now)
	if p := terminalPhase(&s); p != corev1.PodFailed {
		t.Errorf("one exited 1: phase %s", p)
	}
}

func TestMergeStatusKeepsOthersConditions(t *testing.T) {
	current := corev1.PodStatus{Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue},
	}}
	ours := corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}
	got := mergeStatus(current, ours)
	want := []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse},
	}
	if diff := cmp.Diff(want, got.Conditions); diff != "" || got.Phase != corev1.PodRunning {
		t.Errorf("conditions (-want +got):\n%s phase %s", diff, got.Phase)
	}
}

// TestRestartingAll: after a RestartAllContainers exit every container that ran in the round (ended or
// stopped) gets the kubelet's RestartingAllContainers last state and one more restart; one that did not
// start (waiting) is left as it is; the pod is Pending, not initialized, and AllContainersRestarting False.
func TestRestartingAll(t *testing.T) {
	terminated := func(code int32) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}
	}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}
	s := corev1.PodStatus{Phase: corev1.PodRunning,
		InitContainerStatuses: []corev1.ContainerStatus{{Name: "setup", State: terminated(0)},
			{Name: "side", State: terminated(143), RestartCount: 1}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "main", State: terminated(42)}, {Name: "never", State: waiting}}}
	setCondition(&s, corev1.AllContainersRestarting, true)
	restartingAll(&s, true)
	got := map[string]string{}
	for _, cs := range append(append([]corev1.ContainerStatus{}, s.InitContainerStatuses...), s.ContainerStatuses...) {
		last := "-"
		if tr := cs.LastTerminationState.Terminated; tr != nil {
			last = fmt.Sprintf("%d/%s", tr.ExitCode, tr.Reason)
		}
		got[cs.Name] = fmt.Sprintf("restarts %d, last %s", cs.RestartCount, last)
	}
	want := map[string]string{"setup": "restarts 1, last 137/RestartingAllContainers", "side": "restarts 2, last 137/RestartingAllContainers",
		"main": "restarts 1, last 137/RestartingAllContainers", "never": "restarts 0, last -"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("containers (-want +got):\n%s", diff)
	}
	conds := map[corev1.PodConditionType]corev1.ConditionStatus{}
	for _, c := range s.Conditions {
		conds[c.Type] = c.Status
	}
	wantConds := map[corev1.PodConditionType]corev1.ConditionStatus{corev1.AllContainersRestarting: corev1.ConditionFalse,
		corev1.PodInitialized: corev1.ConditionFalse, corev1.ContainersReady: corev1.ConditionFalse, corev1.PodReady: corev1.ConditionFalse}
	if diff := cmp.Diff(wantConds, conds); diff != "" || s.Phase != corev1.PodPending {
		t.Errorf("phase %s, conditions (-want +got):\n%s", s.Phase, diff)
	}
}
