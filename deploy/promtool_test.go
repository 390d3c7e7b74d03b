package deploy_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/trainingjob-operator/trainingjob-operator/deploy"
)

// promtool returns Debian's, unpacked by hack/prometheus.sh (make test sets PROMETHEUS to its directory). The
// test fails without it: it never skips.
func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs promtool: make test runs it, make unit (go test -short) does not")
	}
	bin := os.Getenv("PROMETHEUS")
	if bin == "" {
		t.Fatal("PROMETHEUS is not set: run the tests with `make test`, which unpacks Prometheus with hack/prometheus.sh")
	}
	cmd := exec.Command(filepath.Join(bin, "promtool"), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestAlertsWithPromtool: Prometheus' own promtool accepts the PrometheusRule's groups (`check rules`)
// and every alert passes its unit tests in monitoring/tests/alerts_test.yaml (`test rules`), which give
// each alert input that fires it, with its labels and rendered annotations, and input that must not.
func TestAlertsWithPromtool(t *testing.T) {
	objs, err := deploy.ReadFile(filepath.Join("monitoring", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	groups, err := yaml.Marshal(map[string]any{"groups": objs[0].Object["spec"].(map[string]any)["groups"]})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tests, err := os.ReadFile(filepath.Join("monitoring", "tests", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"rules.yaml": groups, "alerts_test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	promtool(t, dir, "check", "rules", "rules.yaml")
	t.Log(promtool(t, dir, "test", "rules", "alerts_test.yaml"))

	var spec struct {
		Groups []struct {
			Rules []rule `json:"rules"`
		} `json:"groups"`
	}
	var unit struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	data, _ := json.Marshal(objs[0].Object["spec"])
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(tests, &unit); err != nil {
		t.Fatal(err)
	}
	var tested []string
	for _, u := range unit.Tests {
		for _, a := range u.AlertRuleTest {
			tested = append(tested, a.Alertname)
		}
	}
	for _, g := range spec.Groups {
		for _, r := range g.Rules {
			if !slices.Contains(tested, r.Alert) {
				t.Errorf("alert %s has no promtool unit test in monitoring/tests/alerts_test.yaml", r.Alert)
			}
		}
	}
}
