package builders_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// restrictedViolations lists what in a pod breaks the Pod Security "restricted" level
// (https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted).
func restrictedViolations(p corev1.PodSpec) []string {
	var out []string
	psc := p.SecurityContext
	podNonRoot := psc != nil && ptr.Deref(psc.RunAsNonRoot, false)
	podSeccomp := psc != nil && psc.SeccompProfile != nil && psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault
	for _, v := range p.Volumes {
		if v.HostPath != nil || v.NFS != nil {
			out = append(out, "volume "+v.Name+" of a restricted type")
		}
	}
	for _, c := range append(slices.Clone(p.InitContainers), p.Containers...) {
		sc := c.SecurityContext
		if sc == nil {
			out = append(out, c.Name+": no securityContext")
			continue
		}
		if !ptr.Equal(sc.AllowPrivilegeEscalation, ptr.To(false)) {
			out = append(out, c.Name+": allowPrivilegeEscalation")
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			out = append(out, c.Name+": capabilities not dropped")
		} else if added := slices.DeleteFunc(slices.Clone(sc.Capabilities.Add), func(c corev1.Capability) bool {
			return c == "NET_BIND_SERVICE"
		}); len(added) > 0 {
			out = append(out, fmt.Sprintf("%s: adds %v", c.Name, added))
		}
		if !ptr.Deref(sc.RunAsNonRoot, podNonRoot) {
			out = append(out, c.Name+": may run as root")
		}
		if u := sc.RunAsUser; u != nil && *u == 0 || u == nil && psc != nil && psc.RunAsUser != nil && *psc.RunAsUser == 0 {
			out = append(out, c.Name+": runAsUser 0")
		}
		if !podSeccomp && (sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault) {
			out = append(out, c.Name+": no RuntimeDefault seccomp profile")
		}
	}
	return out
}

// TestSecurityContexts: every container is hardened; the agent runs as the user that may delete the
// trainer's checkpoints; a spec that asks for a non-root user yields a pod the "restricted" level admits.
func TestSecurityContexts(t *testing.T) {
	pvc := &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "c"}
	s3 := &mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "b"}
	nonRoot := func(tj *mlv1.TrainingJob) {
		tj.Spec.SecurityContext = &mlv1.WorkerSecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000), FSGroup: ptr.To[int64](1000),
		}
	}
	cases := []struct {
		name           string
		tj             *mlv1.TrainingJob
		wantAgentUser  *int64
		wantViolations []string
	}{
		{
			name:          "default image user on a claim: the agent as root that may delete any user's files",
			tj:            tjtest.NewTJ("ml", "a").Checkpoints(pvc).Obj(),
			wantAgentUser: ptr.To[int64](0),
			wantViolations: []string{"checkpoint-agent: adds [DAC_OVERRIDE FOWNER]", "checkpoint-agent: may run as root",
				"checkpoint-agent: runAsUser 0", "trainer: may run as root"},
		},
		{
			name:           "object storage: the agent as the operator's non-root user",
			tj:             tjtest.NewTJ("ml", "a").Checkpoints(s3).Obj(),
			wantAgentUser:  ptr.To(builders.AgentUser),
			wantViolations: []string{"trainer: may run as root"},
		},
		{
			name:           "non-root workers on a claim: restricted",
			tj:             tjtest.NewTJ("ml", "a").Checkpoints(pvc).With(nonRoot).Obj(),
			wantAgentUser:  ptr.To[int64](1000),
			wantViolations: nil,
		},
		{
			name:           "non-root workers, object storage: restricted",
			tj:             tjtest.NewTJ("ml", "a").Checkpoints(s3).With(nonRoot).Obj(),
			wantAgentUser:  ptr.To(builders.AgentUser),
			wantViolations: nil,
		},
		{
			name: "RDMA keeps IPC_LOCK",
			tj: tjtest.NewTJ("ml", "a").With(nonRoot).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Networking = &mlv1.NetworkingSpec{RDMAEnabled: ptr.To(true)}
			}).Obj(),
			wantAgentUser:  nil,
			wantViolations: []string{"trainer: adds [IPC_LOCK]"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := builders.Job(tc.tj, builders.Options{DefaultImages: builders.DefaultImages()}).Spec.Template.Spec
			if diff := cmp.Diff(tc.wantViolations, restrictedViolations(p)); diff != "" {
				t.Errorf("Pod Security restricted violations (-want +got):\n%s", diff)
			}
			var agentUser *int64
			for _, c := range p.InitContainers {
				if c.Name == names.AgentContainerName {
					agentUser = c.SecurityContext.RunAsUser
					if !ptr.Deref(c.SecurityContext.ReadOnlyRootFilesystem, false) {
						t.Errorf("the agent's root file system is writable")
					}
				}
			}
			if diff := cmp.Diff(tc.wantAgentUser, agentUser); diff != "" {
				t.Errorf("agent runAsUser (-want +got):\n%s", diff)
			}
		})
	}
}
