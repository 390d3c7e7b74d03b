package builders_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestSupervisor: a trainer with a known command runs under the supervisor, copied in by an init container
// from the operator's image, its args unchanged; a job with no command keeps its image's entrypoint, and
// one that turns it off or monitoring off runs its command as it is.
func TestSupervisor(t *testing.T) {
	wrapped := func(cmd ...string) []string {
		return append([]string{builders.SupervisorPath, "--listen=[$(POD_IP)]:8084", "--"}, cmd...)
	}
	type got struct {
		Command, Args, Init []string
		Pattern             string
		Port                bool
	}
	cases := []struct {
		name string
		tj   *mlv1.TrainingJob
		want got
	}{
		{
			name: "a command is wrapped",
			tj: tjtest.NewTJ("ml", "a").Image("me/train:1", "python3", "train.py").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Args = []string{"--lr", "$(LR)"}
			}).Obj(),
			want: got{Command: wrapped("python3", "train.py"), Args: []string{"--lr", "$(LR)"},
				Init: []string{"/supervisor", "install", builders.SupervisorPath}, Port: true},
		},
		{
			name: "the default runner is wrapped",
			tj:   tjtest.NewTJ("ml", "a").NoCommand().Obj(),
			want: got{Command: wrapped(builders.RunnerCommand...), Init: []string{"/supervisor", "install", builders.SupervisorPath}, Port: true},
		},
		{
			name: "no command keeps the image's entrypoint",
			tj: tjtest.NewTJ("ml", "a").Image("me/train:1").NoCommand().With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Args = []string{"--epochs", "3"}
			}).Obj(),
			want: got{Args: []string{"--epochs", "3"}},
		},
		{
			name: "progressFromOutput false",
			tj: tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Monitoring = &mlv1.MonitoringSpec{ProgressFromOutput: ptr.To(false)}
			}).Obj(),
			want: got{Command: []string{"python3", "train.py"}},
		},
		{
			name: "monitoring off",
			tj: tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Monitoring = &mlv1.MonitoringSpec{Enabled: ptr.To(false)}
			}).Obj(),
			want: got{Command: []string{"python3", "train.py"}},
		},
		{
			name: "the pattern's $ survives the kubelet's expansion",
			tj: tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Monitoring = &mlv1.MonitoringSpec{ProgressPattern: `it (?P<step>\d+)$`}
			}).Obj(),
			want: got{Command: wrapped("python3", "train.py"), Init: []string{"/supervisor", "install", builders.SupervisorPath},
				Pattern: `it (?P<step>\d+)$$`, Port: true},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := builders.Job(tc.tj, builders.Options{}).Spec.Template.Spec
			c := spec.Containers[0]
			g := got{Command: c.Command, Args: c.Args}
			for _, i := range spec.InitContainers {
				if i.Name == builders.SupervisorContainerName {
					g.Init = append(append([]string{}, i.Command...), i.Args...)
				}
			}
			for _, e := range c.Env {
				if e.Name == builders.ProgressPatternEnv {
					g.Pattern = e.Value
				}
			}
			for _, p := range c.Ports {
				g.Port = g.Port || p.ContainerPort == builders.SupervisorPort && p.Protocol == corev1.ProtocolTCP
			}
			if diff := cmp.Diff(tc.want, g); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestCheckPatterns: the builder refuses a pattern that package pattern does not compile (too large a
// program included: the CRD no longer compiles them) or a progress pattern that names no figure, naming
// the field.
func TestCheckPatterns(t *testing.T) {
	hostile := "^(?:" + strings.Repeat("a", 1000) + "){1000}"
	cases := []struct {
		name, progress string
		onMessage      []string
		want           string
	}{
		{name: "none"},
		{name: "a figure and a rule", progress: `loss (?P<loss>[0-9.]+)`, onMessage: []string{"NCCL.*[Tt]imeout"}},
		{name: "does not compile", progress: `(?P<loss>`,
			want: "spec.monitoring.progressPattern is not an RE2 regular expression: error parsing regexp: missing closing ): `(?P<loss>`"},
		{name: "names no figure", progress: `(?P<cost>\d+)`,
			want: "spec.monitoring.progressPattern names none of the groups epoch, epochs, step, steps, loss, accuracy, lr, throughput"},
		{name: "a hostile progress pattern", progress: "(?P<loss>x)" + hostile,
			want: "spec.monitoring.progressPattern compiles to more than 1000 instructions (repeat counts multiply what they repeat)"},
		{name: "rules: the bad ones named", onMessage: []string{"ok", hostile, "(unclosed"},
			want: "spec.failurePolicy.rules[1].onMessage compiles to more than 1000 instructions (repeat counts multiply what they " +
				"repeat); spec.failurePolicy.rules[2].onMessage is not an RE2 regular expression: error parsing regexp: missing " +
				"closing ): `(unclosed`"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Monitoring = &mlv1.MonitoringSpec{ProgressPattern: tc.progress}
				if tc.onMessage != nil {
					tj.Spec.FailurePolicy = &mlv1.FailurePolicy{}
				}
				for _, m := range tc.onMessage {
					tj.Spec.FailurePolicy.Rules = append(tj.Spec.FailurePolicy.Rules, mlv1.FailureRule{Action: mlv1.RuleFail, OnMessage: m})
				}
			}).Obj()
			got := ""
			if err := builders.CheckPatterns(tj); err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSupervisorResources: the copy asks for no resource the trainer does not name (a Kueue ClusterQueue
// that covers the trainer covers the pod), and has a limit, equal to its request, where the trainer has one
// (a ResourceQuota on limits.cpu admits it).
func TestSupervisorResources(t *testing.T) {
	list := func(kv ...string) corev1.ResourceList {
		if len(kv) == 0 {
			return nil
		}
		l := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return l
	}
	cases := []struct {
		name    string
		trainer *corev1.ResourceRequirements
		want    corev1.ResourceRequirements
	}{
		{name: "the trainer names none", want: corev1.ResourceRequirements{}},
		{name: "cpu requested only", trainer: &corev1.ResourceRequirements{Requests: list("cpu", "1")},
			want: corev1.ResourceRequirements{Requests: list("cpu", "50m")}},
		{name: "limits of both",
			trainer: &corev1.ResourceRequirements{Limits: list("cpu", "2", "memory", "4Gi"), Requests: list("cpu", "1", "memory", "2Gi")},
			want:    corev1.ResourceRequirements{Requests: list("cpu", "50m", "memory", "32Mi"), Limits: list("cpu", "50m", "memory", "32Mi")}},
		{name: "a trainer smaller than the copy", trainer: &corev1.ResourceRequirements{Limits: list("memory", "16Mi")},
			want: corev1.ResourceRequirements{Requests: list("memory", "16Mi"), Limits: list("memory", "16Mi")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "a").GPUs(0).With(func(tj *mlv1.TrainingJob) {
				if tc.trainer != nil {
					tj.Spec.Resources = &mlv1.Resources{Limits: tc.trainer.Limits, Requests: tc.trainer.Requests}
				}
			}).Obj()
			for _, c := range builders.Job(tj, builders.Options{}).Spec.Template.Spec.InitContainers {
				if c.Name == builders.SupervisorContainerName {
					if diff := cmp.Diff(tc.want, c.Resources); diff != "" {
						t.Errorf("(-want +got):\n%s", diff)
					}
				}
			}
		})
	}
}
