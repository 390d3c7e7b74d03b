package derive

import (
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/pattern"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestRules: the first rule whose every matcher matches decides the kind; no match keeps the class's.
func TestRules(t *testing.T) {
	nccl := failure{kind: retryable, class: mlv1.FailureError, exitCode: 134,
		text: "ProcessGroupNCCL: Watchdog caught collective operation timeout", node: "n1"}
	oom := failure{kind: retryable, class: mlv1.FailureOOM, exitCode: 137, node: "n2"}
	hung := failure{kind: retryable, class: mlv1.FailureHang, text: "no progress for 12m; rank 1, last: NCCL WARN Timeout"}
	ecc := failure{kind: permanent, class: mlv1.FailureError, exitCode: 1,
		text: "RuntimeError: CUDA error: uncorrectable ECC error encountered", node: "n3"}
	rules := []mlv1.FailureRule{
		{Name: "nccl-timeout", Action: mlv1.RuleRestartWithoutCounting, OnMessage: "NCCL.*[Tt]imeout",
			OnKinds: []mlv1.FailureKind{mlv1.FailureError}},
		{Name: "ecc", Action: mlv1.RuleRestart, OnMessage: "ECC", AvoidNode: true},
		{Action: mlv1.RuleFail, OnExitCodes: []int32{137}, OnKinds: []mlv1.FailureKind{mlv1.FailureOOM}},
		{Name: "bad", Action: mlv1.RuleFail, OnMessage: "("}, // refused by the JobController; matches nothing here
		{Name: "exit-codes-never-match-a-hang", Action: mlv1.RuleFail, OnExitCodes: []int32{1, 134}},
	}
	tj := tjtest.NewTJ("ml", "r").With(func(tj *mlv1.TrainingJob) { tj.Spec.FailurePolicy = &mlv1.FailurePolicy{Rules: rules} }).Obj()
	type out struct {
		Kind      failureKind
		Rule      string
		AvoidNode bool
	}
	cases := []struct {
		name string
		f    failure
		want out
	}{
		{name: "message and kind", f: nccl, want: out{Kind: disruption, Rule: "failurePolicy.rules[0] nccl-timeout", AvoidNode: false}},
		{
			name: "the kind does not match the first: the message matches the second",
			f:    ecc,
			want: out{Kind: retryable, Rule: "failurePolicy.rules[1] ecc", AvoidNode: true},
		},
		{name: "exit code and kind", f: oom, want: out{Kind: permanent, Rule: "failurePolicy.rules[2]", AvoidNode: false}},
		{name: "a hang matches no exit-code rule and no Error rule", f: hung, want: out{Kind: retryable, Rule: "", AvoidNode: false}},
		{
			name: "no match keeps the class's kind",
			f:    failure{kind: permanent, class: mlv1.FailureError, exitCode: 2},
			want: out{Kind: permanent, Rule: "", AvoidNode: false},
		},
		// A peer's error exit in the same second as the cause cannot be told apart from it: either may match.
		{
			name: "an exit tied with the first matches",
			f:    failure{kind: permanent, class: mlv1.FailureError, exitCode: 1, text: "lost rank 1", node: "n0", tied: []failure{ecc}},
			want: out{Kind: retryable, Rule: "failurePolicy.rules[1] ecc", AvoidNode: true},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := applyRules(tj, tc.f)
			if diff := cmp.Diff(tc.want, out{Kind: f.kind, Rule: f.rule, AvoidNode: f.avoidNode}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if tc.want.AvoidNode && f.node != "n3" {
				t.Errorf("the failing node is %q, want the matching exit's n3", f.node)
			}
		})
	}
}

// TestAvoidNodes: only evidence about a node avoids it: a lost node, a node where different ranks failed in
// two failed attempts in a row, a rule's avoidNode; the same rank failing twice on its node is not (a rank
// SIGKILLed twice from outside recreated a whole gang). Within maxAvoidedNodes (oldest dropped; 0: none).
func TestAvoidNodes(t *testing.T) {
	withCap := func(n int32) *mlv1.TrainingJob {
		return tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) { tj.Spec.FailurePolicy = &mlv1.FailurePolicy{MaxAvoidedNodes: &n} }).Obj()
	}
	// lastFailure is status.lastFailure after rank's exit, as decide writes it.
	lastFailure := func(rank string) string {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a-worker-" + rank, Labels: map[string]string{names.RankLabel: rank}}}
		return describeExit(p, names.ContainerName, &corev1.ContainerStateTerminated{ExitCode: 137, Message: "killed"}, "", "2")
	}
	avoid := func(names ...string) []mlv1.AvoidedNode {
		var out []mlv1.AvoidedNode
		for _, n := range names {
			out = append(out, mlv1.AvoidedNode{Name: n})
		}
		return out
	}
	cases := []struct {
		name     string
		tj       *mlv1.TrainingJob
		st       mlv1.TrainingJobStatus
		f        failure
		want     []string
		wantLast string
		wantNote string
	}{
		{
			name:     "a lost node",
			tj:       withCap(3),
			st:       mlv1.TrainingJobStatus{Attempt: 2},
			f:        failure{kind: disruption, lost: map[string]string{"n1": "is gone"}},
			want:     []string{"n1:node is gone"},
			wantLast: "",
		},
		{
			name:     "a first failure on a node is not enough",
			tj:       withCap(3),
			st:       mlv1.TrainingJobStatus{},
			f:        failure{kind: retryable, node: "n1"},
			want:     nil,
			wantLast: "n1",
		},
		{
			name:     "different ranks failing on the node in two failed attempts in a row",
			tj:       withCap(3),
			st:       mlv1.TrainingJobStatus{Attempt: 1, LastFailureNode: "n1", LastFailure: lastFailure("0")},
			f:        failure{kind: retryable, node: "n1", rank: "1"},
			want:     []string{"n1:rank 0 failed there in attempt 0, rank 1 in attempt 1"},
			wantLast: "n1",
		},
		{
			name:     "the same rank failing twice on its node, same exit: not avoided",
			tj:       withCap(3),
			st:       mlv1.TrainingJobStatus{Attempt: 1, LastFailureNode: "n1", LastFailure: lastFailure("1")},
			f:        failure{kind: retryable, node: "n1", rank: "1", exitCode: 137},
			want:     nil,
			wantLast: "n1",
		},
		{
			name:     "different ranks on different nodes: not avoided",
			tj:       withCap(3),
			st:       mlv1.TrainingJobStatus{Attempt: 1, LastFailureNode: "n2", LastFailure: lastFailure("0")},
			f:        failure{kind: retryable, node: "n1", rank: "1"},
			want:     nil,
			wantLast: "n1",
		},
		{
			name:     "the previous failure was no rank's exit (a hang): not avoided",
			tj:       withCap(3),
			st:       mlv1.TrainingJobStatus{Attempt: 1, LastFailureNode: "n1", LastFailure: hangFailurePrefix + "no progress"},
			f:        failure{kind: retryable, node: "n1", rank: "1"},
			want:     nil,
			wantLast: "n1",
		},
		{
			name:     "a disruption on the node after another rank's failure: not avoided",
			tj:       withCap(3),
			st:       mlv1.TrainingJobStatus{Attempt: 1, LastFailureNode: "n1", LastFailure: lastFailure("0")},
			f:        failure{kind: disruption, node: "n1", rank: "1"},
			want:     nil,
			wantLast: "n1",
		},
		{
			name:     "a rule's avoidNode, the same rank as before",
			tj:       withCap(3),
			st:       mlv1.TrainingJobStatus{Attempt: 1, LastFailureNode: "n1", LastFailure: lastFailure("1")},
			f:        failure{kind: retryable, node: "n1", rank: "1", rule: "failurePolicy.rules[0] ecc", avoidNode: true},
			want:     []string{"n1:failurePolicy.rules[0] ecc matched the failure of attempt 1"},
			wantLast: "n1",
		},
		{
			name:     "a rule's avoidNode",
			tj:       withCap(3),
			st:       mlv1.TrainingJobStatus{},
			f:        failure{kind: retryable, node: "n2", rule: "failurePolicy.rules[0] ecc", avoidNode: true},
			want:     []string{"n2:failurePolicy.rules[0] ecc matched the failure of attempt 0"},
			wantLast: "n2",
		},
		{
			name:     "past the cap the oldest goes",
			tj:       withCap(2),
			st:       mlv1.TrainingJobStatus{AvoidedNodes: avoid("a", "b")},
			f:        failure{kind: disruption, lost: map[string]string{"c": "is gone"}},
			want:     []string{"b:", "c:node is gone"},
			wantLast: "",
		},
		// A 2-node cluster of 1-GPU nodes, 2 workers of 1 GPU each: avoiding n1 would leave room for 1 of them,
		// and the job unschedulable.
		{
			name:     "not the last schedulable nodes",
			tj:       withCap(3),
			st:       mlv1.TrainingJobStatus{Attempt: 1, LastFailureNode: "n1", LastFailure: lastFailure("0")},
			f:        failure{kind: retryable, node: "n1", rank: "1", schedulable: map[string]int32{"n1": 1, "n2": 1}, workers: 2},
			want:     nil,
			wantLast: "n1",
			wantNote: "; not avoiding node n1: the other schedulable nodes would not hold the 2 workers",
		},
		{
			name: "a node avoided before holds none",
			tj:   withCap(3),
			st:   mlv1.TrainingJobStatus{AvoidedNodes: avoid("n2")},
			f: failure{kind: disruption, lost: map[string]string{"n1": "is gone"},
				schedulable: map[string]int32{"n1": 2, "n2": 2}, workers: 2},
			want:     []string{"n2:"},
			wantLast: "",
			wantNote: "; not avoiding node n1: the other schedulable nodes would not hold the 2 workers",
		},
		{
			name:     "a node that holds every worker left: avoided",
			tj:       withCap(3),
			st:       mlv1.TrainingJobStatus{Attempt: 1, LastFailureNode: "n1", LastFailure: lastFailure("0")},
			f:        failure{kind: retryable, node: "n1", rank: "1", schedulable: map[string]int32{"n1": 2, "n2": 2}, workers: 2},
			want:     []string{"n1:rank 0 failed there in attempt 0, rank 1 in attempt 1"},
			wantLast: "n1",
		},
		{
			name:     "cap 0: none",
			tj:       withCap(0),
			st:       mlv1.TrainingJobStatus{},
			f:        failure{kind: disruption, lost: map[string]string{"c": "is gone"}},
			want:     nil,
			wantLast: "",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.st
			note := avoidNodes(tc.tj, &st, tc.f)
			if note != tc.wantNote {
				t.Errorf("note %q, want %q", note, tc.wantNote)
			}
			var got []string
			for _, a := range st.AvoidedNodes {
				got = append(got, a.Name+":"+a.Reason)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" || st.LastFailureNode != tc.wantLast {
				t.Errorf("avoidedNodes (-want +got):\n%s\nlastFailureNode %q, want %q", diff, st.LastFailureNode, tc.wantLast)
			}
		})
	}
}

// TestRulesBounded: a failure against 16 hostile rules, with 64 ranks tied in the same second, costs a
// bounded amount (before, each rule's pattern compiled at each failure and each tied exit: 4.2 GiB and
// 1.5 s for one failure, times 65): hostile patterns are refused once, and a rule is tried on at most
// maxTiedMatched distinct exits, each searched at its end only.
func TestRulesBounded(t *testing.T) {
	var rules []mlv1.FailureRule
	for i := range 16 {
		rules = append(rules, mlv1.FailureRule{Action: mlv1.RuleFail,
			OnMessage: "^(?:" + strings.Repeat(string(rune('a'+i)), 1000) + "){1000}"})
	}
	rules = append(rules, mlv1.FailureRule{Name: "cause", Action: mlv1.RuleRestartWithoutCounting, OnMessage: "the cause$"})
	tj := tjtest.NewTJ("ml", "r").With(func(tj *mlv1.TrainingJob) { tj.Spec.FailurePolicy = &mlv1.FailurePolicy{Rules: rules} }).Obj()
	long := strings.Repeat("x", 1<<20)
	f := failure{kind: retryable, class: mlv1.FailureError, exitCode: 1, text: long}
	for i := range 64 {
		f.tied = append(f.tied, failure{kind: retryable, class: mlv1.FailureError, exitCode: 1, text: long + strconv.Itoa(i)})
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	got := applyRules(tj, f)
	runtime.ReadMemStats(&after)
	if got.rule != "" {
		t.Errorf("rule %q matched, want none (hostile patterns match nothing)", got.rule)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
		t.Errorf("one failure against 16 hostile rules allocated %d MiB, want under 32", grew>>20)
	}

	// The cause at the end of a long message is found; the 9th distinct tied exit is never tried.
	f.tied[0].text = long + "\nthe cause"
	if got := applyRules(tj, f); got.rule != "failurePolicy.rules[16] cause" {
		t.Errorf("rule = %q, want the 17th: the tail of the first tied exit holds the cause", got.rule)
	}
	f.tied[0].text, f.tied[maxTiedMatched].text = long, "the cause"
	if got := applyRules(tj, f); got.rule != "" {
		t.Errorf("rule = %q, want none: only %d distinct exits are tried", got.rule, maxTiedMatched)
	}
}

// TestRulesMatchBudget: one of the largest patterns package pattern accepts costs about 20 ms per 4 KiB message;
// sixteen of them on eight tied exits took 10.4 s for one failure. The work of one failure's rules is
// bounded (matchBudget): past it, no message is searched.
func TestRulesMatchBudget(t *testing.T) {
	big := "(?s:.{0,450})x"
	if _, err := pattern.Compile(big); err != nil {
		t.Fatal(err)
	}
	text := func(i int) string { return strconv.Itoa(i) + strings.Repeat("a", 4095) }
	f := failure{kind: permanent, class: mlv1.FailureError, exitCode: 1, text: text(0)}
	for i := 1; i < 8; i++ {
		f.tied = append(f.tied, failure{kind: permanent, class: mlv1.FailureError, exitCode: 1, text: text(i)})
	}
	f.tied[6].text += "x" // the 8th exit matches
	per := pattern.Cost(big, 4096)
	budget := 3 * per
	if _, ok := firstMatch(mlv1.FailureRule{Action: mlv1.RuleFail, OnMessage: big}, f, &budget); ok {
		t.Errorf("the 8th exit was searched with a budget of 3 searches")
	}
	if budget < 0 || budget >= per {
		t.Errorf("budget left %d, want under one search (%d) and not below 0", budget, per)
	}
	budget = matchBudget
	if _, ok := firstMatch(mlv1.FailureRule{Action: mlv1.RuleFail, OnMessage: big}, f, &budget); !ok {
		t.Errorf("with the whole budget the 8th exit was not matched")
	}
	if worst := 16 * 8 * per; worst <= matchBudget {
		t.Errorf("16 rules on 8 exits cost %d, within the budget %d: the budget bounds nothing", worst, matchBudget)
	}
}
