package derive

import (
	"fmt"
	"slices"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/pattern"
)

// applyRules returns a classified failure with failurePolicy.rules applied: the first rule that matches
// decides the kind (Restart: retryable, RestartWithoutCounting: a disruption, Fail: permanent) and whether
// the failing rank's node is avoided; with no match the failure keeps its class's kind.
func applyRules(tj *mlv1.TrainingJob, f failure) failure {
	fp := tj.Spec.FailurePolicy
	if fp == nil {
		return f
	}
	budget := matchBudget
	for i, r := range fp.Rules {
		m, ok := firstMatch(r, f, &budget)
		if !ok {
			continue
		}
		// m is f or an exit tied with it: the one the rule matched is the one the reason names.
		f.what, f.exitCode, f.node, f.rank, f.kind = m.what, m.exitCode, m.node, m.rank, ruleKind[r.Action]
		f.rule = fmt.Sprintf("failurePolicy.rules[%d]", i)
		if r.Name != "" {
			f.rule += " " + r.Name
		}
		f.avoidNode = r.AvoidNode
		return f
	}
	return f
}

// matchBudget bounds the work of matching one failure against the rules (instructions times bytes
// searched, package pattern's Cost): about 0.3 s of CPU at worst. Past it, the messages of the rules left
// are not searched (they match nothing); a rule of ordinary size costs under 1% of it.
const matchBudget = 32 << 20

// maxTiedMatched bounds the exits a rule is tried on: the failure and the first tied exits with a text
// of their own (a 64-rank job whose ranks all fail in one second would otherwise have each rule searched
// 64 times).
const maxTiedMatched = 8

// firstMatch returns the failure, or the first exit tied with it, that the rule matches; false when none.
// Of exits with the same class, code and text only the first is tried.
func firstMatch(r mlv1.FailureRule, f failure, budget *int) (failure, bool) {
	type seen struct {
		class    mlv1.FailureKind
		exitCode int32
		text     string
	}
	var tried []seen
	for _, c := range append([]failure{f}, f.tied...) {
		k := seen{c.class, c.exitCode, pattern.Tail(c.text)}
		if slices.Contains(tried, k) {
			continue
		}
		if len(tried) == maxTiedMatched {
			break
		}
		tried = append(tried, k)
		if ruleMatches(r, c, budget) {
			return c, true
		}
	}
	return failure{}, false
}

var ruleKind = map[mlv1.RuleAction]failureKind{
	mlv1.RuleRestart:                retryable,
	mlv1.RuleRestartWithoutCounting: disruption,
	mlv1.RuleFail:                   permanent,
}

// ruleMatches reports whether the rule sets a matcher and every matcher it sets matches the failure. An
// exit-code matcher never matches a failure without an exit (a hang, a lost node); a pattern that does not
// compile within the bounds of package pattern (the JobController refuses such a spec before the first
// Job) matches nothing; the text searched is its end (pattern.MaxTextBytes).
func ruleMatches(r mlv1.FailureRule, f failure, budget *int) bool {
	if len(r.OnExitCodes) > 0 && (f.exitCode == 0 || !slices.Contains(r.OnExitCodes, f.exitCode)) {
		return false
	}
	if len(r.OnKinds) > 0 && !slices.Contains(r.OnKinds, f.class) {
		return false
	}
	if r.OnMessage != "" {
		re, err := pattern.Compile(r.OnMessage)
		if err != nil {
			return false
		}
		cost := pattern.Cost(r.OnMessage, len(f.text))
		if cost > *budget {
			return false
		}
		*budget -= cost
		if !pattern.Match(re, f.text) {
			return false
		}
	}
	return len(r.OnExitCodes) > 0 || len(r.OnKinds) > 0 || r.OnMessage != ""
}
