package builders

import (
	corev1 "k8s.io/api/core/v1"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// Security: every container runs without privilege escalation, with all capabilities dropped and the
// RuntimeDefault seccomp profile. The workers run as spec.securityContext says, else as their image's
// user. The checkpoint agent deletes what the trainer writes: on a mounted volume it runs as the
// workers' user when the spec names one; when it names none the workers' user is their image's, which
// the operator cannot know (framework images run as root, the example trainer's as 65532), so the agent
// runs as root with the two capabilities that let it delete any user's files (DAC_OVERRIDE, FOWNER;
// both within Pod Security's baseline level) and no other: without them root is an ordinary user to
// the file system and a non-root trainer's checkpoints were never rotated (found on a real node). In
// object storage it runs as the operator image's non-root user.

// AgentUser is the operator image's non-root user, which the checkpoint agent runs as in object storage.
const AgentUser int64 = 65532

// podSecurityContext returns spec.securityContext as the pod's, plus the RuntimeDefault seccomp profile.
func podSecurityContext(tj *mlv1.TrainingJob) *corev1.PodSecurityContext {
	psc := &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	if sc := tj.Spec.SecurityContext; sc != nil {
		psc.RunAsUser, psc.RunAsGroup, psc.RunAsNonRoot, psc.FSGroup = sc.RunAsUser, sc.RunAsGroup, sc.RunAsNonRoot, sc.FSGroup
	}
	return psc
}

// workerSecurityContext returns the trainer's security context: no escalation, no capability but IPC_LOCK
// with RDMA (NCCL pins memory for InfiniBand/RoCE) and, under MPI, what its SSH server needs
// (mpiCapabilities).
func workerSecurityContext(tj *mlv1.TrainingJob) *corev1.SecurityContext {
	caps := &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: mpiCapabilities(tj)}
	if tj.RDMAEnabled() {
		caps.Add = append(caps.Add, "IPC_LOCK")
	}
	return &corev1.SecurityContext{AllowPrivilegeEscalation: ptrTo(false), Capabilities: caps}
}

// agentSecurityContext returns the checkpoint agent's security context: restricted, read-only root file
// system; the user as explained above.
func agentSecurityContext(tj *mlv1.TrainingJob) *corev1.SecurityContext {
	sc := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptrTo(false), ReadOnlyRootFilesystem: ptrTo(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	switch spec := tj.Spec.SecurityContext; {
	case !mountedCheckpoints(tj):
		sc.RunAsUser, sc.RunAsNonRoot = ptrTo(AgentUser), ptrTo(true)
	case spec != nil && spec.RunAsUser != nil:
		sc.RunAsUser, sc.RunAsGroup = spec.RunAsUser, spec.RunAsGroup
	default:
		sc.RunAsUser = ptrTo(int64(0))
		sc.Capabilities.Add = []corev1.Capability{"DAC_OVERRIDE", "FOWNER"}
	}
	return sc
}
