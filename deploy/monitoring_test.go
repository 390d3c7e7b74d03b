package deploy_test

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/trainingjob-operator/trainingjob-operator/deploy"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// dcgmSeries are the NVIDIA DCGM exporter's series the dashboard may use besides the operator's.
var dcgmSeries = []string{"DCGM_FI_DEV_GPU_UTIL"}

// checkExpr parses a PromQL expression with the Prometheus parser and checks every series it selects is
// one the operator (or DCGM) exports.
func checkExpr(t *testing.T, where, expr string) {
	t.Helper()
	e, err := parser.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, expr, err)
		return
	}
	known := append(metrics.Names(), dcgmSeries...)
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && !slices.Contains(known, vs.Name) {
			t.Errorf("%s: %q selects %q, which nothing exports", where, expr, vs.Name)
		}
		return nil
	})
}

type rule struct {
	Alert string            `json:"alert"`
	Expr  string            `json:"expr"`
	For   string            `json:"for"`
	Label map[string]string `json:"labels"`
}

func TestAlertRules(t *testing.T) {
	objs, err := deploy.ReadFile(filepath.Join("monitoring", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Groups []struct {
			Rules []rule `json:"rules"`
		} `json:"groups"`
	}
	data, _ := json.Marshal(objs[0].Object["spec"])
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, g := range spec.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			checkExpr(t, "alert "+r.Alert, r.Expr)
			if r.Label["severity"] == "" {
				t.Errorf("alert %s has no severity", r.Alert)
			}
		}
	}
	for _, want := range []string{
		"TrainingJobFailed", "TrainingJobStuckPending", "TrainingJobWorkersWaiting", "TrainingJobRestarting", "TrainingJobStalled",
		"TrainingJobLowGPUUtilization",
	} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alert %s missing (have %v)", want, alerts)
		}
	}
}

var labelValues = regexp.MustCompile(`^label_values\((.+), *[a-z_]+\)$`)

func TestGrafanaDashboard(t *testing.T) {
	dash, err := deploy.ReadDashboard(filepath.Join("monitoring", "trainingjob-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var titles []string
	for _, p := range dash.Panels {
		titles = append(titles, p.Title)
		if len(p.Targets) == 0 && p.Type != "row" {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			checkExpr(t, "panel "+p.Title, q.Expr)
		}
	}
	for name, q := range dash.VariableQueries() {
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("variable %s: query %v is not label_values(selector, label)", name, q)
			continue
		}
		checkExpr(t, "variable "+name, m[1])
	}
	for _, want := range []string{
		"TrainingJobs by state", "Progress", "Loss", "Accuracy", "GPU utilisation", "Operator reconcile time (p50, p99)",
		"Operator reconciles and errors",
	} {
		if !slices.Contains(titles, want) {
			t.Errorf("panel %q missing (have %v)", want, titles)
		}
	}
}

// TestServiceMonitorSelectsTheMetricsService: the ServiceMonitor's selector and port match the Service.
func TestServiceMonitorSelectsTheMetricsService(t *testing.T) {
	sm, err := deploy.ReadFile(filepath.Join("monitoring", "servicemonitor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := deploy.ReadFile(filepath.Join("manager", "metrics_service.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var monitor struct {
		Spec struct {
			Selector  struct{ MatchLabels map[string]string } `json:"selector"`
			Endpoints []struct{ Port, Path string }           `json:"endpoints"`
		} `json:"spec"`
	}
	var service struct {
		Metadata struct{ Labels map[string]string } `json:"metadata"`
		Spec     struct {
			Ports []struct{ Name string } `json:"ports"`
		} `json:"spec"`
	}
	for _, c := range []struct {
		in  map[string]any
		out any
	}{{in: sm[0].Object, out: &monitor}, {in: svc[0].Object, out: &service}} {
		data, _ := yaml.Marshal(c.in)
		if err := yaml.Unmarshal(data, c.out); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range monitor.Spec.Selector.MatchLabels {
		if service.Metadata.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s; the Service has %v", k, v, service.Metadata.Labels)
		}
	}
	if len(monitor.Spec.Endpoints) != 1 || monitor.Spec.Endpoints[0].Port != service.Spec.Ports[0].Name ||
		monitor.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("endpoints %+v, service ports %+v", monitor.Spec.Endpoints, service.Spec.Ports)
	}
}

// TestScrapeConfigAuthMatchesServiceMonitor: the plain Prometheus job for the operator scrapes as the
// ServiceMonitor does: HTTPS, the ServiceAccount's token, the same certificate check.
func TestScrapeConfigAuthMatchesServiceMonitor(t *testing.T) {
	sm, err := deploy.ReadFile(filepath.Join("monitoring", "servicemonitor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := deploy.ReadFile(filepath.Join("monitoring", "prometheus-scrape-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ep, _, _ := unstructured.NestedSlice(sm[0].Object, "spec", "endpoints")
	endpoint := ep[0].(map[string]any)
	// scrapeAuth is how a scrape authenticates, as the YAML says it (any: the values as read).
	type scrapeAuth struct {
		Scheme, TokenFile, SkipVerify any
	}
	monitor := scrapeAuth{
		Scheme:     endpoint["scheme"],
		TokenFile:  endpoint["bearerTokenFile"],
		SkipVerify: endpoint["tlsConfig"].(map[string]any)["insecureSkipVerify"],
	}
	jobs, _, _ := unstructured.NestedSlice(cfg[0].Object, "scrape_configs")
	for _, j := range jobs {
		job := j.(map[string]any)
		if job["job_name"] != "trainingjob-operator" {
			continue
		}
		auth, _ := job["authorization"].(map[string]any)
		tlsConfig, _ := job["tls_config"].(map[string]any)
		plain := scrapeAuth{Scheme: job["scheme"], TokenFile: auth["credentials_file"], SkipVerify: tlsConfig["insecure_skip_verify"]}
		if diff := cmp.Diff(monitor, plain); diff != "" || monitor.Scheme != "https" {
			t.Errorf("scheme, token file, skip verify: ServiceMonitor (-) vs scrape config (+):\n%s", diff)
		}
		return
	}
	t.Error("prometheus-scrape-config.yaml has no trainingjob-operator job")
}
