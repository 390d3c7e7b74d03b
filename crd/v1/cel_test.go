package v1_test

import (
	"os"
	"slices"
	"testing"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"sigs.k8s.io/yaml"
)

// regexFunctions are CEL's and Kubernetes' functions that compile their pattern argument.
var regexFunctions = []string{"matches", "find", "findAll"}

// TestNoTenantPatternInCEL: no CEL rule of the generated CRD compiles a regular expression the tenant
// wrote. kube-apiserver runs the rules on every write of a job, its status writes too, and charges any
// pattern the same fixed cost however large its program: sixteen 1,011-character patterns of the form
// (?:aaa…a){1000} in failurePolicy.rules[].onMessage took 1.6-2.0 s of API-server CPU per status write. A
// rule may search a tenant's string with a pattern of ours (a literal); the operator checks the tenant's
// own patterns (package pattern).
func TestNoTenantPatternInCEL(t *testing.T) {
	data, err := os.ReadFile("../../deploy/crd/ml.example.com_trainingjobs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd any
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	env, err := cel.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	rules := celRules(crd, "")
	if len(rules) < 10 {
		t.Fatalf("found %d CEL rules in the CRD, want the CRD's many (is the walk broken?)", len(rules))
	}
	for _, r := range rules {
		parsed, iss := env.Parse(r.rule)
		if iss.Err() != nil {
			t.Errorf("%s: %q does not parse: %v", r.path, r.rule, iss.Err())
			continue
		}
		celast.PreOrderVisit(parsed.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
			if e.Kind() != celast.CallKind || !slices.Contains(regexFunctions, e.AsCall().FunctionName()) {
				return
			}
			args := e.AsCall().Args()
			if p := args[len(args)-1]; p.Kind() != celast.LiteralKind {
				t.Errorf("%s: %q compiles a pattern that is not a literal (%s's last argument)", r.path, r.rule, e.AsCall().FunctionName())
			}
		}))
	}
}

type celRule struct{ path, rule string }

// celRules returns every x-kubernetes-validations rule under v, with where it is.
func celRules(v any, path string) []celRule {
	var out []celRule
	switch v := v.(type) {
	case map[string]any:
		if vs, ok := v["x-kubernetes-validations"].([]any); ok {
			for _, r := range vs {
				if m, ok := r.(map[string]any); ok {
					out = append(out, celRule{path, m["rule"].(string)})
				}
			}
		}
		for k, c := range v {
			out = append(out, celRules(c, path+"."+k)...)
		}
	case []any:
		for _, c := range v {
			out = append(out, celRules(c, path+"[]")...)
		}
	}
	return out
}
