package builders

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// The supervisor: the trainer's command runs under a small program of the operator's image (cmd/supervisor),
// copied into the pod by an init container, as Tekton's entrypoint and Argo's emissary are. It passes the
// program's output through unchanged, forwards signals, reaps orphans, exits with the program's code, and
// serves the progress it recognises in the output on SupervisorPort (docs/monitoring.md).
const (
	// SupervisorContainerName is the init container that copies the supervisor into the pod.
	SupervisorContainerName = "supervisor"
	// SupervisorVolume holds the supervisor's copy (an emptyDir), mounted read-only into the trainer.
	SupervisorVolume = "trainingjob-bin"
	// SupervisorDir is where the trainer finds it.
	SupervisorDir = "/var/run/trainingjob"
	// SupervisorPath is the supervisor inside the trainer.
	SupervisorPath = SupervisorDir + "/supervisor"
	// SupervisorPort is where the supervisor serves what it recognised (GET /metrics).
	SupervisorPort int32 = 8084
	// SupervisorPortName names it among the trainer's ports.
	SupervisorPortName = "supervisor"
	// ProgressPatternEnv carries monitoring.progressPattern to the supervisor.
	ProgressPatternEnv = "TRAININGJOB_PROGRESS_PATTERN"
	// DefaultSupervisorCommand is the supervisor in the operator's image.
	DefaultSupervisorCommand = "/supervisor"
)

// supervisorCPU and supervisorMemory are what the copy, one small file, needs at most.
var (
	supervisorCPU    = resource.MustParse("50m")
	supervisorMemory = resource.MustParse("32Mi")
)

// supervisorResources returns the copy's requests and limits, of the resources the trainer names and no
// other: a Kueue ClusterQueue that covers the trainer's resources covers the pod (an init container's
// memory request, where the trainer names none, would keep it from being admitted), and a ResourceQuota or
// LimitRange the trainer satisfies (limits.cpu, a limit-to-request ratio) is satisfied by the copy too,
// its limit equal to its request and no more than the trainer's.
func supervisorResources(trainer corev1.ResourceRequirements) corev1.ResourceRequirements {
	var r corev1.ResourceRequirements
	bounds := map[corev1.ResourceName]resource.Quantity{corev1.ResourceCPU: supervisorCPU, corev1.ResourceMemory: supervisorMemory}
	for name, most := range bounds {
		q, limited := trainer.Limits[name]
		if !limited {
			if q, ok := trainer.Requests[name]; ok {
				r.Requests = put(r.Requests, name, smaller(q, most))
			}
			continue
		}
		v := smaller(q, most)
		r.Requests, r.Limits = put(r.Requests, name, v), put(r.Limits, name, v)
	}
	return r
}

func smaller(a, b resource.Quantity) resource.Quantity {
	if a.Cmp(b) < 0 {
		return a
	}
	return b
}

func put(l corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) corev1.ResourceList {
	if l == nil {
		l = corev1.ResourceList{}
	}
	l[name] = q
	return l
}

// Supervised reports whether the trainer runs under the supervisor: monitoring is on,
// monitoring.progressFromOutput too, and the command is known (a job with no command keeps its image's
// entrypoint, which the operator cannot read to wrap).
func Supervised(tj *mlv1.TrainingJob) bool {
	return tj.MonitoringEnabled() && tj.ProgressFromOutput() && len(command(tj)) > 0
}

// supervise wraps a container's command in the supervisor: `supervisor --listen=[$(POD_IP)]:8084 -- CMD`
// (brackets: an IPv6 address too), its args unchanged (the kubelet appends them), so $(VAR) references in
// both still expand.
func supervise(tj *mlv1.TrainingJob, c *corev1.Container) {
	if !Supervised(tj) {
		return
	}
	c.Command = append([]string{SupervisorPath, "--listen=[$(POD_IP)]:" + itoa(SupervisorPort), "--"}, c.Command...)
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: SupervisorVolume, MountPath: SupervisorDir, ReadOnly: true})
	c.Ports = append(c.Ports, corev1.ContainerPort{Name: SupervisorPortName, ContainerPort: SupervisorPort, Protocol: corev1.ProtocolTCP})
	if p := tj.Spec.Monitoring.ProgressPattern; p != "" {
		// The kubelet expands $(VAR) in values; "$$" keeps a "$" of the pattern as it is.
		pattern := corev1.EnvVar{Name: ProgressPatternEnv, Value: strings.ReplaceAll(p, "$", "$$")}
		c.Env = append(slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == ProgressPatternEnv }), pattern)
	}
}

// supervisorInitContainer returns the init container that copies the supervisor from the operator's image
// into the pod's emptyDir; none when the trainer is not supervised.
func supervisorInitContainer(tj *mlv1.TrainingJob, opts Options) []corev1.Container {
	if !Supervised(tj) {
		return nil
	}
	image, _ := agentImage(opts)
	cmd := opts.SupervisorCommand
	if len(cmd) == 0 {
		cmd = []string{DefaultSupervisorCommand}
	}
	return []corev1.Container{{
		Name: SupervisorContainerName, Image: image, Command: cmd, Args: []string{"install", SupervisorPath},
		VolumeMounts:             []corev1.VolumeMount{{Name: SupervisorVolume, MountPath: SupervisorDir}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptrTo(false), ReadOnlyRootFilesystem: ptrTo(true),
			RunAsUser: ptrTo(AgentUser), RunAsNonRoot: ptrTo(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		Resources: supervisorResources(Resources(tj, opts)),
	}}
}

// supervisorVolumes returns the supervisor's emptyDir; none when the trainer is not supervised.
func supervisorVolumes(tj *mlv1.TrainingJob) []corev1.Volume {
	if !Supervised(tj) {
		return nil
	}
	return []corev1.Volume{{Name: SupervisorVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		SizeLimit: ptrTo(resource.MustParse("64Mi"))}}}}
}
