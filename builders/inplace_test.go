package builders_test

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestInPlace: a job restarts in place when it asks (the default), the cluster can, the operator holds a
// token key and the trainer runs under the supervisor; its trainer then has the restart rule, the control
// environment (the job's current attempt from the ConfigMap, which holds it), the state directory and the
// readiness probe, and its Job the annotation, no backoff limit and no pod failure policy (the pods' failures
// are the operator's to judge; a gone pod is replaced alone). Otherwise the template is today's and the
// reason is given.
func TestInPlace(t *testing.T) {
	able := builders.Options{InPlaceRestart: true, AgentTokenKey: builders.SecretKey("k")}
	type got struct {
		Why        string
		Annotated  bool
		Rule       bool
		Probe      bool
		State      bool
		ControlEnv []string
		// BackoffLimit is the Job's; FailJob whether it has a pod failure policy; CMAttempt the ConfigMap's.
		BackoffLimit int32
		FailJob      bool
		CMAttempt    string
	}
	inPlace := got{Annotated: true, Rule: true, Probe: true, State: true, BackoffLimit: math.MaxInt32, CMAttempt: "0",
		ControlEnv: []string{controlapi.TokenEnv, controlapi.RestartCodeEnv, controlapi.AttemptEnv, controlapi.StateDirEnv,
			controlapi.CurrentAttemptEnv}}
	recreated := func(why string) got { return got{Why: why, FailJob: true} }
	cases := []struct {
		name string
		tj   *mlv1.TrainingJob
		opts builders.Options
		want got
	}{
		{name: "the default, where the cluster can", tj: tjtest.NewTJ("ml", "a").Obj(), opts: able, want: inPlace},
		{
			name: "Recreate asked", opts: able,
			tj: tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.FailurePolicy = &mlv1.FailurePolicy{RestartStrategy: mlv1.RestartRecreate}
			}).Obj(),
			want: recreated(""),
		},
		{
			name: "a cluster without RestartAllContainers", tj: tjtest.NewTJ("ml", "a").Obj(),
			opts: builders.Options{AgentTokenKey: builders.SecretKey("k")},
			want: recreated("the cluster does not restart all of a pod's containers in place (RestartAllContainers, Kubernetes 1.35+)"),
		},
		{
			name: "no token key", tj: tjtest.NewTJ("ml", "a").Obj(), opts: builders.Options{InPlaceRestart: true},
			want: recreated("the operator has no token key to order restarts with"),
		},
		{
			name: "not supervised", opts: able,
			tj: tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Monitoring = &mlv1.MonitoringSpec{ProgressFromOutput: ptr.To(false)}
			}).Obj(),
			want: recreated("the trainer does not run under the supervisor (monitoring or progressFromOutput off, or no command)"),
		},
		{
			name: "elastic", opts: able,
			tj: tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Elastic = &mlv1.ElasticSpec{MinWorkers: 1, MaxWorkers: 2}
			}).Obj(),
			want: recreated("an elastic job's torchrun restarts its own workers"),
		},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			tj := tt.tj.Defaulted()
			job := builders.Job(tj, tt.opts)
			c := job.Spec.Template.Spec.Containers[0]
			g := got{Why: builders.InPlaceUnavailable(tj, tt.opts), Annotated: job.Annotations[names.InPlaceAnnotation] == "true",
				Rule: len(c.RestartPolicyRules) == 1 && c.RestartPolicyRules[0].ExitCodes.Values[0] == controlapi.RestartCode &&
					ptr.Deref(c.RestartPolicy, "") == corev1.ContainerRestartPolicyNever,
				Probe: c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet.Path == "/healthz"}
			for _, v := range job.Spec.Template.Spec.Volumes {
				g.State = g.State || v.Name == builders.StateVolume && v.EmptyDir.Medium == corev1.StorageMediumMemory
			}
			for _, e := range c.Env {
				switch e.Name {
				case controlapi.TokenEnv, controlapi.RestartCodeEnv, controlapi.AttemptEnv, controlapi.StateDirEnv:
					g.ControlEnv = append(g.ControlEnv, e.Name)
				case controlapi.CurrentAttemptEnv:
					if e.ValueFrom.ConfigMapKeyRef.Key == names.CurrentAttemptKey {
						g.ControlEnv = append(g.ControlEnv, e.Name)
					}
				}
			}
			g.BackoffLimit, g.FailJob = *job.Spec.BackoffLimit, job.Spec.PodFailurePolicy != nil
			cm, err := builders.ConfigMap(tj, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			g.CMAttempt = cm.Data[names.CurrentAttemptKey]
			if diff := cmp.Diff(tt.want, g); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestControlToken: the control token is per job, needs the key, and is not the checkpoint agent's.
func TestControlToken(t *testing.T) {
	opts := builders.Options{AgentTokenKey: builders.SecretKey("k")}
	a, b := tjtest.NewTJ("ml", "a").Obj(), tjtest.NewTJ("ml", "b").Obj()
	a.UID, b.UID = "uid-a", "uid-b"
	ta := builders.ControlToken(a, opts)
	if ta == "" || ta == builders.ControlToken(b, opts) || ta == builders.AgentToken(a, opts) ||
		builders.ControlToken(a, builders.Options{}) != "" {
		t.Errorf("control token %q: want one per job, not the agent's, none without a key", ta)
	}
}
