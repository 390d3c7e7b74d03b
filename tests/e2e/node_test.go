package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/internal/local/node"
)

// The process node's kubelet behaviours, on pods bound to it directly (spec.nodeName), against the real
// API server.

func podOn(ns, name string, spec corev1.PodSpec) *corev1.Pod {
	spec.NodeName = "process-node-0"
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = corev1.RestartPolicyNever
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
		Annotations: map[string]string{"rank": "3"}, Labels: map[string]string{"app": "node-test"}}, Spec: spec}
}

func sh(name, script string) corev1.Container {
	return corev1.Container{Name: name, Image: "busybox", Command: []string{"sh", "-c", script}}
}

func waitForPhase(t *testing.T, pod *corev1.Pod, want corev1.PodPhase) *corev1.Pod {
	t.Helper()
	got := &corev1.Pod{}
	eventually(t, time.Minute, fmt.Sprintf("pod %s %s", pod.Name, want), func() error {
		if err := stack.Client.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			return err
		}
		if got.Status.Phase != want {
			return fmt.Errorf("phase %s, containers %+v", got.Status.Phase, got.Status.ContainerStatuses)
		}
		return nil
	})
	return got
}

func podLog(t *testing.T, pod *corev1.Pod, container string) string {
	t.Helper()
	return readLog(t, pod.Namespace, pod.Name, container)
}

// TestProcessNodeEnvAndVolumes: env from values with $(VAR) expansion, the downward API, ConfigMap and
// Secret keys and envFrom; configMap and secret volumes as files at their mount paths; an init
// container that runs first and shares an emptyDir.
func TestProcessNodeEnvAndVolumes(t *testing.T) {
	ns := newNamespace(t)
	create(t,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: ns}, Data: map[string]string{"mode": "fast", "FROM_CM": "cm"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec", Namespace: ns}, StringData: map[string]string{"token": "s3cr3t"}},
	)
	main := sh("main", `echo "A=$A B=$B RANK=$RANK NAME=$NAME NS=$NS IP=$IP MODE=$MODE TOKEN=$TOKEN CM=$P_FROM_CM OPT=${OPT-unset}"; `+
		`cat /etc/cfg/mode; echo; cat /etc/sec/token; echo; cat /work/init.txt; echo "args: $0 $1"`)
	main.Command = append(main.Command, "$(A)-arg", "$$(A)")
	main.Env = []corev1.EnvVar{
		{Name: "A", Value: "alpha"},
		{Name: "B", Value: "$(A)-beta-$(UNDEFINED)"},
		{Name: "RANK", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['rank']"}}},
		{Name: "NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "NS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "mode"}}},
		{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "token"}}},
		{Name: "OPT", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Key: "k", Optional: ptr.To(true)}}},
	}
	main.EnvFrom = []corev1.EnvFromSource{{Prefix: "P_",
		ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}
	main.VolumeMounts = []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/cfg"}, {Name: "sec", MountPath: "/etc/sec"},
		{Name: "work", MountPath: "/work"}}
	init := sh("init", `echo "init ran first" > /work/init.txt`)
	init.VolumeMounts = []corev1.VolumeMount{{Name: "work", MountPath: "/work"}}
	pod := podOn(ns, "env", corev1.PodSpec{
		InitContainers: []corev1.Container{init}, Containers: []corev1.Container{main},
		Volumes: []corev1.Volume{
			{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
			{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec"}}},
			{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	})
	create(t, pod)
	got := waitForPhase(t, pod, corev1.PodSucceeded)
	want := fmt.Sprintf("A=alpha B=alpha-beta-$(UNDEFINED) RANK=3 NAME=env NS=%s IP=%s MODE=fast TOKEN=s3cr3t CM=cm OPT=unset\n"+
		"fast\ns3cr3t\ninit ran first\nargs: alpha-arg $(A)\n", ns, got.Status.PodIP)
	if diff := cmp.Diff(want, podLog(t, pod, "main")); diff != "" {
		t.Errorf("container output (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(got.Status.PodIP, "127.") || got.Status.PodIP == "127.0.0.1" {
		t.Errorf("pod IP %q is not a loopback address of its own", got.Status.PodIP)
	}
	if s := got.Status.InitContainerStatuses[0].State.Terminated; s == nil || s.ExitCode != 0 {
		t.Errorf("init container state = %+v", got.Status.InitContainerStatuses[0].State)
	}
}

// TestProcessNodeRestartsAndFaults: restartPolicy OnFailure restarts a failing container (restart count,
// last state); a pod without a command fails with a message saying so; a missing ConfigMap keeps the
// container waiting with CreateContainerConfigError until it appears.
func TestProcessNodeRestartsAndFaults(t *testing.T) {
	ns := newNamespace(t)
	t.Run("OnFailure restarts until success", func(t *testing.T) {
		c := sh("flaky", `test -f /work/ran || { touch /work/ran; exit 3; }; echo second run`)
		c.VolumeMounts = []corev1.VolumeMount{{Name: "work", MountPath: "/work"}}
		pod := podOn(ns, "flaky", corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure, Containers: []corev1.Container{c},
			Volumes: []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}})
		create(t, pod)
		got := waitForPhase(t, pod, corev1.PodSucceeded)
		cs := got.Status.ContainerStatuses[0]
		if cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 3 {
			t.Errorf("restartCount %d, lastState %+v; want 1 and exit code 3", cs.RestartCount, cs.LastTerminationState)
		}
	})
	t.Run("no command", func(t *testing.T) {
		pod := podOn(ns, "nocommand", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pytorch/pytorch"}}})
		create(t, pod)
		got := waitForPhase(t, pod, corev1.PodFailed)
		term := got.Status.ContainerStatuses[0].State.Terminated
		if term == nil || term.Reason != "StartError" || !strings.Contains(term.Message, "set command") {
			t.Errorf("state = %+v, want StartError asking for a command", got.Status.ContainerStatuses[0].State)
		}
	})
	t.Run("termination message file, and env re-resolved on restart", func(t *testing.T) {
		create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "moving", Namespace: ns}, Data: map[string]string{"v": "first"}})
		c := sh("c", `echo "$V" > /dev/termination-log; test -f /work/ran || { touch /work/ran; sleep 1; exit 3; }`)
		c.VolumeMounts = []corev1.VolumeMount{{Name: "work", MountPath: "/work"}}
		c.Env = []corev1.EnvVar{{Name: "V", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "moving"}, Key: "v"}}}}
		pod := podOn(ns, "termlog", corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure, Containers: []corev1.Container{c},
			Volumes: []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}})
		create(t, pod)
		eventually(t, time.Minute, "the first run", func() error {
			got := &corev1.Pod{}
			if err := stack.Client.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
				return err
			}
			if cs := got.Status.ContainerStatuses; len(cs) == 0 || cs[0].State.Running == nil || cs[0].RestartCount != 0 {
				return fmt.Errorf("container statuses %+v", cs)
			}
			return nil
		})
		if err := patchConfigMapValue(ns, "moving", "second"); err != nil {
			t.Fatal(err)
		}
		got := waitForPhase(t, pod, corev1.PodSucceeded)
		cs := got.Status.ContainerStatuses[0]
		last, now := cs.LastTerminationState.Terminated, cs.State.Terminated
		if last == nil || now == nil || last.Message != "first\n" || now.Message != "second\n" {
			t.Errorf("termination messages: last %+v, now %+v; want first, then second (the ConfigMap at restart)", last, now)
		}
	})
	t.Run("missing configmap then created", func(t *testing.T) {
		c := sh("c", `echo "$V"`)
		c.Env = []corev1.EnvVar{{Name: "V", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "later"}, Key: "v"}}}}
		pod := podOn(ns, "waits", corev1.PodSpec{Containers: []corev1.Container{c}}) // restartPolicy Never: config errors are retried anyway
		create(t, pod)
		eventually(t, time.Minute, "CreateContainerConfigError", func() error {
			got := &corev1.Pod{}
			if err := stack.Client.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
				return err
			}
			cs := got.Status.ContainerStatuses
			if len(cs) == 0 || cs[0].State.Waiting == nil || cs[0].State.Waiting.Reason != "CreateContainerConfigError" ||
				!strings.Contains(cs[0].State.Waiting.Message, `configmap "later" not found`) {
				return fmt.Errorf("container statuses %+v", cs)
			}
			return nil
		})
		create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later", Namespace: ns}, Data: map[string]string{"v": "arrived"}})
		waitForPhase(t, pod, corev1.PodSucceeded)
		if log := podLog(t, pod, "c"); log != "arrived\n" {
			t.Errorf("output %q, want %q", log, "arrived\n")
		}
	})
}

// TestProcessNodeDeletionGracePeriod: deleting a pod sends SIGTERM; a process that ignores it is killed
// with SIGKILL after the grace period, and the pod is then removed.
func TestProcessNodeDeletionGracePeriod(t *testing.T) {
	ns := newNamespace(t)
	pod := podOn(ns, "stubborn", corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To[int64](1),
		Containers:                    []corev1.Container{sh("c", `trap 'echo got TERM' TERM; echo started; while true; do sleep 0.1; done`)},
	})
	create(t, pod)
	running := waitForPhase(t, pod, corev1.PodRunning)
	pid, err := strconv.Atoi(strings.TrimPrefix(running.Status.ContainerStatuses[0].ContainerID, node.ContainerIDPrefix))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "trap installed", func() error {
		if !strings.Contains(podLog(t, pod, "c"), "started") {
			return fmt.Errorf("not started yet")
		}
		return nil
	})
	if err := stack.Client.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "pod removed", func() error {
		if err := stack.Client.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod still there (%v)", err)
		}
		return nil
	})
	if processAlive(pid) {
		t.Errorf("process %d survived the pod's deletion", pid)
	}
	if log := podLog(t, pod, "c"); !strings.Contains(log, "got TERM") {
		t.Errorf("the process did not get SIGTERM first; log:\n%s", log)
	}
}

// TestProcessNodeNativeSidecar: an init container with restartPolicy Always runs beside the main
// container and is stopped (SIGTERM) once the main container is done, so the pod completes.
func TestProcessNodeNativeSidecar(t *testing.T) {
	ns := newNamespace(t)
	side := sh("agent", `echo started; trap 'echo stopping; exit 0' TERM; while true; do sleep 0.1; done`)
	side.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	pod := podOn(ns, "sidecar", corev1.PodSpec{InitContainers: []corev1.Container{side},
		Containers: []corev1.Container{sh("main", "sleep 0.5; echo done")}})
	create(t, pod)
	got := waitForPhase(t, pod, corev1.PodSucceeded)
	if s := got.Status.InitContainerStatuses[0].State.Terminated; s == nil {
		t.Errorf("sidecar state %+v, want terminated after the main container", got.Status.InitContainerStatuses[0].State)
	}
	if log := podLog(t, pod, "agent"); !strings.HasPrefix(log, "started\n") || !strings.HasSuffix(log, "stopping\n") {
		t.Errorf("sidecar log %q: it should have started first and been sent SIGTERM at the end", log)
	}
}

func patchConfigMapValue(ns, name, v string) error {
	cm := &corev1.ConfigMap{}
	if err := stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
		return err
	}
	cm.Data["v"] = v
	return stack.Client.Update(ctx, cm)
}

// TestProcessNodeRestartAllContainers: a container exit that matches a RestartAllContainers rule (KEP-5532)
// restarts every container of the pod in place, init containers and sidecars included, as kubelet 1.36.3
// does on the local stack's real nodes (the same pod there gave what is checked here): the pod keeps its
// UID and volumes, goes Pending while its containers start again, every container's restart count grows
// by one per restart and its last state is the kubelet's RestartingAllContainers end (137; the exit that
// matched is not kept), and AllContainersRestarting is False again once they run.
func TestProcessNodeRestartAllContainers(t *testing.T) {
	ns := newNamespace(t)
	data := []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	withData := func(c corev1.Container) corev1.Container { c.VolumeMounts = data; return c }
	const serve = `trap "exit 0" TERM; while :; do sleep 0.2; done`
	side := withData(sh("side", serve))
	side.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	main := withData(sh("main", `n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n; echo run $n; `+
		`if [ $n -lt 3 ]; then sleep 0.5; exit 42; fi; `+serve))
	main.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
	main.RestartPolicyRules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	pod := podOn(ns, "restart-all", corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](5),
		Volumes:        []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		InitContainers: []corev1.Container{withData(sh("setup", "echo init")), side},
		Containers:     []corev1.Container{main, withData(sh("other", serve))}})
	create(t, pod)
	uid := pod.UID // set by the create
	got := &corev1.Pod{}
	eventually(t, time.Minute, "every container restarted twice, running", func() error {
		if err := stack.Client.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			return err
		}
		counts := map[string]int32{}
		for _, cs := range append(append([]corev1.ContainerStatus{}, got.Status.InitContainerStatuses...), got.Status.ContainerStatuses...) {
			counts[cs.Name] = cs.RestartCount
		}
		want := map[string]int32{"setup": 2, "side": 2, "main": 2, "other": 2}
		if diff := cmp.Diff(want, counts); diff != "" || got.Status.Phase != corev1.PodRunning || !podReady(got) {
			return fmt.Errorf("phase %s, restart counts (-want +got):\n%s", got.Status.Phase, diff)
		}
		return nil
	})
	if got.UID != uid {
		t.Errorf("pod UID %s, was %s: restarted in place, not replaced", got.UID, uid)
	}
	wantLast := corev1.ContainerStateTerminated{ExitCode: 137, Reason: "RestartingAllContainers",
		Message: "The container is removed because RestartAllContainers in place"}
	for _, cs := range append(append([]corev1.ContainerStatus{}, got.Status.InitContainerStatuses...), got.Status.ContainerStatuses...) {
		if diff := cmp.Diff(&wantLast, cs.LastTerminationState.Terminated); diff != "" {
			t.Errorf("%s's last state (-want +got):\n%s", cs.Name, diff)
		}
	}
	if c := podCondition(got, corev1.AllContainersRestarting); c == nil || c.Status != corev1.ConditionFalse {
		t.Errorf("AllContainersRestarting %+v, want False once the containers run again", c)
	}
	// Running comes before the shell's first line: wait for the line, not for the state.
	eventually(t, 10*time.Second, "main's third run logged", func() error {
		if log := podLog(t, pod, "main"); !strings.Contains(log, "run 3") {
			return fmt.Errorf("main's log %q: the emptyDir should have kept the count across the restarts", log)
		}
		return nil
	})
}

func podReady(p *corev1.Pod) bool {
	c := podCondition(p, corev1.PodReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}
