package builders_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

func checkpointedTJ(uid types.UID) *mlv1.TrainingJob {
	tj := tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), ResumeFrom: "/checkpoints/ml/old/checkpoint-epoch-4",
			Storage: &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "ckpt"}}
	}).Obj()
	tj.UID = uid
	return tj
}

// TestAgentToken: a job's agent token is a function of the operator's key and the job's UID only (the same
// for every build, so the Job's template and its spec hash stay deterministic), different for another
// job or another key, and absent without a key.
func TestAgentToken(t *testing.T) {
	key := builders.SecretKey(strings.Repeat("k", 32))
	token := func(uid types.UID, key builders.SecretKey) string {
		return builders.AgentToken(checkpointedTJ(uid), builders.Options{AgentTokenKey: key})
	}
	cases := []struct {
		name      string
		got, than string
		wantSame  bool
	}{
		{name: "same UID and key: same token", got: token("uid-1", key), than: token("uid-1", slicesClone(key)), wantSame: true},
		{name: "another UID: another token", got: token("uid-1", key), than: token("uid-2", key), wantSame: false},
		{name: "another key: another token", got: token("uid-1", key), than: token("uid-1", builders.SecretKey(strings.Repeat("q", 32))),
			wantSame: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if b, err := hex.DecodeString(tc.got); err != nil || len(b) != 32 {
				t.Fatalf("token %q is not hex of 32 bytes (HMAC-SHA256): %v", tc.got, err)
			}
			if diff := cmp.Diff(tc.wantSame, tc.got == tc.than); diff != "" {
				t.Errorf("tokens %q and %q equal (-want +got):\n%s", tc.got, tc.than, diff)
			}
		})
	}
	if got := token("uid-1", nil); got != "" {
		t.Errorf("without a key: token %q, want none", got)
	}
}

func slicesClone(k builders.SecretKey) builders.SecretKey {
	return append(builders.SecretKey(nil), k...)
}

// TestAgentTokenInTheJob: the agent container, and only it (not the trainer, not the resume check), gets
// the job's token as AGENT_TOKEN, from the job's token Secret; without a key no container does. Two builds
// give the same Job.
func TestAgentTokenInTheJob(t *testing.T) {
	key := builders.SecretKey(strings.Repeat("k", 32))
	tj := checkpointedTJ("uid-1")
	cases := []struct {
		name string
		key  builders.SecretKey
		want map[string]string // container → its AGENT_TOKEN ("" for none)
	}{
		{name: "with a key", key: key, want: map[string]string{
			names.AgentContainerName:          "secretKeyRef:" + names.TokenSecretName(tj) + "/" + names.AgentTokenKey,
			builders.ResumeCheckContainerName: "", "trainer": "",
		}},
		{name: "without a key (a Job as before tokens)", want: map[string]string{
			names.AgentContainerName: "", builders.ResumeCheckContainerName: "", "trainer": "",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := opts
			o.AgentTokenKey = tc.key
			job := builders.Job(tj, o)
			if diff := cmp.Diff(job, builders.Job(tj, o)); diff != "" {
				t.Fatalf("two builds differ (-first +second):\n%s", diff)
			}
			spec := job.Spec.Template.Spec
			got := map[string]string{}
			for _, c := range append(spec.InitContainers, spec.Containers...) {
				name := c.Name
				if !strings.HasPrefix(name, names.AgentContainerName) && name != builders.ResumeCheckContainerName {
					name = "trainer"
				}
				got[name] += envMap(c.Env)[agentapi.TokenEnv]
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("AGENT_TOKEN per container (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSecretKeyIsRedacted: the key never shows when Options are printed or marshalled (logs, events).
func TestSecretKeyIsRedacted(t *testing.T) {
	key := builders.SecretKey("0123456789abcdef0123456789abcdef")
	o := builders.Options{AgentTokenKey: key}
	j, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		fmt.Sprintf("%v", o), fmt.Sprintf("%+v", o), fmt.Sprintf("%#v", o), fmt.Sprintf("%s %x %q %d", key, key, key, key), string(j),
	} {
		if strings.Contains(s, string(key)) || strings.Contains(s, hex.EncodeToString(key)) || strings.Contains(s, "48 49 50") {
			t.Errorf("the key shows in %s", s)
		}
	}
}

// TestRunCheckpoints: each run under a name keeps its own checkpoints (the run ID, the job's UID, under the
// name's root); a job an operator before run IDs started keeps the layout it was started with.
func TestRunCheckpoints(t *testing.T) {
	tests := []struct {
		name                 string
		state                mlv1.State
		runID                string
		wantRunID, wantDir   string
		wantEarlierRunsUnder string // the agent's --earlier-runs-under
	}{
		{name: "a new job: its UID", wantRunID: "uid-1", wantDir: "/checkpoints/ml/a/uid-1",
			wantEarlierRunsUnder: "ml/a"},
		{name: "recorded", state: mlv1.StateRunning, runID: "uid-1", wantRunID: "uid-1", wantDir: "/checkpoints/ml/a/uid-1",
			wantEarlierRunsUnder: "ml/a"},
		{name: "started before run IDs", state: mlv1.StateRunning, wantRunID: "", wantDir: "/checkpoints/ml/a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tj := checkpointedTJ("uid-1")
			tj.Status.State, tj.Status.RunID = tt.state, tt.runID
			got := struct{ RunID, Dir, EarlierRunsUnder string }{RunID: builders.RunID(tj)}
			tj.Status.RunID = got.RunID
			pod := builders.Job(tj, builders.Options{}).Spec.Template.Spec
			for _, e := range pod.Containers[0].Env {
				if e.Name == "CHECKPOINT_DIR" {
					got.Dir = e.Value
				}
			}
			for _, c := range pod.InitContainers {
				for _, a := range c.Args {
					if v, ok := strings.CutPrefix(a, "--earlier-runs-under="); ok {
						got.EarlierRunsUnder = v
					}
				}
			}
			want := struct{ RunID, Dir, EarlierRunsUnder string }{tt.wantRunID, tt.wantDir, tt.wantEarlierRunsUnder}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestDispatchedRunID: every copy MultiKueue makes of one manager job (the same origin and Workload, any
// UID) shares a run ID; another manager job, another origin, or a job with only one of the labels does not,
// and a recorded run ID stays.
func TestDispatchedRunID(t *testing.T) {
	copyOf := func(uid types.UID, labels map[string]string) *mlv1.TrainingJob {
		tj := checkpointedTJ(uid)
		tj.Labels = labels
		return tj
	}
	mk := func(origin, wl string) map[string]string {
		return map[string]string{names.MultiKueueOriginLabel: origin, names.PrebuiltWorkloadKey: wl}
	}
	onW1 := builders.RunID(copyOf("uid-w1", mk("multikueue", "trainingjob-a-0a1b2c3d")))
	tests := []struct {
		name     string
		tj       *mlv1.TrainingJob
		sameAsW1 bool
		want     string // when not "": the run ID
	}{
		{name: "the copy on another worker", tj: copyOf("uid-w2", mk("multikueue", "trainingjob-a-0a1b2c3d")), sameAsW1: true},
		{name: "the manager's job created again", tj: copyOf("uid-w2", mk("multikueue", "trainingjob-a-99999999"))},
		{name: "another manager", tj: copyOf("uid-w2", mk("other-manager", "trainingjob-a-0a1b2c3d"))},
		{name: "only the Workload label", tj: copyOf("uid-w2", map[string]string{names.PrebuiltWorkloadKey: "trainingjob-a-0a1b2c3d"}),
			want: "uid-w2"},
		{name: "only the origin label", tj: copyOf("uid-w2", map[string]string{names.MultiKueueOriginLabel: "multikueue"}), want: "uid-w2"},
	}
	tampered := copyOf("uid-w3", nil) // recorded as a copy's, then its labels removed
	tampered.Status.State, tampered.Status.RunID = mlv1.StateSuspended, onW1
	if got := builders.RunID(tampered); got != "uid-w3" {
		t.Errorf("a job that no longer names the dispatched run's Workload keeps its run ID %q, want its UID", got)
	}
	if got := builders.RunID(copyOf("uid-w3", mk("multikueue", "Not_A_Name"))); got != "uid-w3" {
		t.Errorf("a prebuilt name no Workload can have gave run ID %q, want the UID", got)
	}
	annotated := copyOf("uid-w2", map[string]string{names.MultiKueueOriginLabel: "multikueue"})
	annotated.Annotations = map[string]string{names.PrebuiltWorkloadKey: "trainingjob-a-0a1b2c3d"} // Kueue v0.16 on
	tests = append(tests, struct {
		name     string
		tj       *mlv1.TrainingJob
		sameAsW1 bool
		want     string
	}{name: "the Workload named by the annotation", tj: annotated, sameAsW1: true})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := builders.RunID(tt.tj)
			if tt.want != "" && got != tt.want {
				t.Errorf("run ID %q, want %q", got, tt.want)
			}
			if (got == onW1) != tt.sameAsW1 {
				t.Errorf("run ID %q, the copy on w1's %q: same %v, want %v", got, onW1, got == onW1, tt.sameAsW1)
			}
			if !strings.HasPrefix(onW1, "mk-") || len(onW1) != 35 {
				t.Errorf("w1's run ID %q, want mk- and 32 hex digits", onW1)
			}
			recorded := tt.tj.DeepCopy()
			recorded.Status.State, recorded.Status.RunID = mlv1.StateRunning, "uid-old"
			if got := builders.RunID(recorded); got != "uid-old" {
				t.Errorf("recorded run ID became %q", got)
			}
		})
	}
}

// TestTokensOnlyInTheSecret: the job's tokens are in its token Secret, which its workers read, and nowhere
// in the Job (whoever may read pods, the view role, reads the Job's template and every pod's spec); without
// a key there is no Secret.
func TestTokensOnlyInTheSecret(t *testing.T) {
	key := builders.SecretKey(strings.Repeat("k", 32))
	tj := checkpointedTJ("uid-1")
	o := opts
	o.AgentTokenKey, o.InPlaceRestart = key, true
	control, agent := builders.ControlToken(tj, o), builders.AgentToken(tj, o)
	job, err := json.Marshal(builders.Job(tj, o))
	if err != nil {
		t.Fatal(err)
	}
	for key, token := range map[string]string{names.ControlTokenKey: control, names.AgentTokenKey: agent} {
		if token == "" || strings.Contains(string(job), token) {
			t.Errorf("the %s %q is in the Job", key, token)
		}
		if ref := `"secretKeyRef":{"name":"` + names.TokenSecretName(tj) + `","key":"` + key + `"}`; !strings.Contains(string(job), ref) {
			t.Errorf("no worker reads %s: no %s in the Job", key, ref)
		}
	}
	s := builders.TokenSecret(tj, o)
	got := map[string]string{}
	for k, v := range s.Data {
		got[k] = string(v)
	}
	if diff := cmp.Diff(map[string]string{names.ControlTokenKey: control, names.AgentTokenKey: agent}, got); diff != "" {
		t.Errorf("the token Secret (-want +got):\n%s", diff)
	}
	if s.Name != names.TokenSecretName(tj) || s.Immutable == nil || !*s.Immutable {
		t.Errorf("the token Secret is %s, immutable %v", s.Name, s.Immutable)
	}
	if s := builders.TokenSecret(tj, builders.Options{}); s != nil {
		t.Errorf("without a key, a token Secret: %+v", s)
	}
}
