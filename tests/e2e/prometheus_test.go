package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/deploy"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

// prometheusServer is a real Prometheus (Debian's 2.42, unpacked by hack/prometheus.sh: make test sets
// PROMETHEUS) scraping every second the operator as deploy/monitoring/servicemonitor.yaml says (HTTPS, a
// ServiceAccount token bound to the metrics reader; operatorJob) and rank 0 of every TrainingJob with the
// documented scrape job of deploy/monitoring/prometheus-scrape-config.yaml, with the alert rules of
// deploy/monitoring/prometheusrule.yaml loaded. Debian builds Prometheus without Kubernetes service
// discovery, so the job's kubernetes_sd_configs (role pod) is replaced by a file the test keeps
// up to date from the API server with the targets and __meta_kubernetes_* labels Kubernetes discovery
// gives: the documented relabeling rules then choose and label the targets in the real Prometheus.
type prometheusServer struct{ url string }

func startPrometheus(t *testing.T) *prometheusServer {
	t.Helper()
	dir := os.Getenv("PROMETHEUS")
	if dir == "" {
		t.Fatal("PROMETHEUS is not set: run the tests with `make test`, which unpacks Prometheus with hack/prometheus.sh")
	}
	root := testenv.RepoRoot()
	var documented struct {
		ScrapeConfigs []map[string]any `json:"scrape_configs"`
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", "monitoring", "prometheus-scrape-config.yaml"))
	if err == nil {
		err = yaml.Unmarshal(data, &documented)
	}
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	targets := filepath.Join(work, "pods.json")
	discoverPods(t, targets)
	jobs := []map[string]any{operatorJob(t, work)}
	for _, j := range documented.ScrapeConfigs {
		if j["job_name"] != "trainingjob-rank0" {
			continue // the operator's Service job: the local stack runs the operator as a process, not a pod
		}
		delete(j, "kubernetes_sd_configs")
		j["file_sd_configs"] = []any{map[string]any{"files": []string{targets}, "refresh_interval": "1s"}}
		jobs = append(jobs, j)
	}
	rules, err := deploy.ReadFile(filepath.Join(root, "deploy", "monitoring", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	writeYAML(t, filepath.Join(work, "rules.yaml"), map[string]any{"groups": rules[0].Object["spec"].(map[string]any)["groups"]})
	writeYAML(t, filepath.Join(work, "prometheus.yml"), map[string]any{
		"global":         map[string]any{"scrape_interval": "1s", "evaluation_interval": "1s"},
		"rule_files":     []string{filepath.Join(work, "rules.yaml")},
		"scrape_configs": jobs,
	})
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(work, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(dir, "prometheus"), "--config.file="+filepath.Join(work, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(work, "data"), "--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			t.Logf("prometheus log:\n%s", out)
		}
	})
	p := &prometheusServer{url: "http://" + addr}
	eventually(t, time.Minute, "prometheus ready", func() error {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("prometheus exited: %v", err)
		default:
		}
		_, err := p.query("up")
		return err
	})
	return p
}

// operatorJob returns the scrape job the Prometheus Operator makes of the ServiceMonitor's endpoint, for the
// operator's process at operatorMetrics; the pod's token file is a file of dir holding the token of a
// ServiceAccount bound to the metrics-reader ClusterRole.
func operatorJob(t *testing.T, dir string) map[string]any {
	t.Helper()
	sm, err := deploy.ReadFile(filepath.Join(testenv.RepoRoot(), "deploy", "monitoring", "servicemonitor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	endpoints, _, _ := unstructured.NestedSlice(sm[0].Object, "spec", "endpoints")
	ep := endpoints[0].(map[string]any)
	job := map[string]any{"job_name": "operator", "static_configs": []any{map[string]any{"targets": []string{operatorMetrics}}}}
	for k, v := range ep {
		switch k {
		case "port", "interval": // the target is the process; the test scrapes every second
		case "path":
			job["metrics_path"] = v
		case "scheme":
			job["scheme"] = v
		case "bearerTokenFile":
			token, err := testenv.ScraperToken(ctx, stack.Client, "monitoring", "prometheus", true)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, "token")
			if err := os.WriteFile(file, []byte(token), 0o600); err != nil {
				t.Fatal(err)
			}
			job["authorization"] = map[string]any{"credentials_file": file}
		case "tlsConfig":
			job["tls_config"] = map[string]any{"insecure_skip_verify": v.(map[string]any)["insecureSkipVerify"]}
		default:
			t.Fatalf("the ServiceMonitor's endpoint has %s, which this test does not translate", k)
		}
	}
	return job
}

// discoverPods writes, every 500 ms until the test ends, the file_sd targets Kubernetes service discovery
// (role pod) would give Prometheus: one per declared container port of every pod, with its meta labels.
func discoverPods(t *testing.T, path string) {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	write := func() error {
		var pods corev1.PodList
		if err := stack.Client.List(ctx, &pods); err != nil {
			return err
		}
		groups := []map[string]any{}
		for _, p := range pods.Items {
			if p.Status.PodIP == "" {
				continue
			}
			for _, c := range p.Spec.Containers {
				for _, port := range c.Ports {
					labels := map[string]string{
						"__meta_kubernetes_namespace": p.Namespace, "__meta_kubernetes_pod_name": p.Name,
						"__meta_kubernetes_pod_phase": string(p.Status.Phase), "__meta_kubernetes_pod_container_name": c.Name,
						"__meta_kubernetes_pod_container_port_name":   port.Name,
						"__meta_kubernetes_pod_container_port_number": strconv.Itoa(int(port.ContainerPort)),
					}
					for k, v := range p.Labels {
						labels["__meta_kubernetes_pod_label_"+metaName.ReplaceAllString(k, "_")] = v
						labels["__meta_kubernetes_pod_labelpresent_"+metaName.ReplaceAllString(k, "_")] = "true"
					}
					target := net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port.ContainerPort)))
					groups = append(groups, map[string]any{"targets": []string{target}, "labels": labels})
				}
			}
		}
		data, err := json.Marshal(groups)
		if err == nil {
			err = os.WriteFile(path+".tmp", data, 0o644)
		}
		if err == nil {
			err = os.Rename(path+".tmp", path)
		}
		return err
	}
	if err := write(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
				_ = write() // a failed listing keeps the last targets, as discovery does
			}
		}
	}()
}

var metaName = regexp.MustCompile(`[^a-zA-Z0-9_]`)

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := yaml.Marshal(v)
	if err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// sample is one series of an instant query's result.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query evaluates an instant query; an error is Prometheus' own (a bad query, a failed evaluation).
func (p *prometheusServer) query(q string) ([]sample, error) {
	resp, err := http.Get(p.url + "/api/v1/query?" + url.Values{"query": {q}}.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", q, out.Error)
	}
	var vector []sample
	_ = json.Unmarshal(out.Data.Result, &vector) // scalars and strings are not vectors
	return vector, nil
}

// TestPrometheusScrapesTheOperatorAndRankZero: while the example trainer runs, a real Prometheus has the
// job's progress from the operator and its loss from rank 0, both labelled with the job; every query of
// the Grafana dashboard evaluates without error; the alert rules evaluate without error.
func TestPrometheusScrapesTheOperatorAndRankZero(t *testing.T) {
	prom := startPrometheus(t)
	ns, name := newNamespace(t), "observed"
	create(t, trainerJob(ns, name, 2, 16, "--epoch-delay=500ms").Obj())
	job := fmt.Sprintf(`{namespace=%q, training_job=%q}`, ns, name)
	for _, q := range []string{"trainingjob_progress_percent" + job, "training_loss" + job, "training_epoch" + job} {
		eventually(t, 2*time.Minute, q, func() error {
			got, err := prom.query(q)
			if err == nil && len(got) != 1 {
				err = fmt.Errorf("%d series: %v", len(got), got)
			}
			return err
		})
	}
	loss, err := prom.query("training_loss" + job)
	if err != nil || loss[0].Metric["job"] != "trainingjob-rank0" || !strings.Contains(loss[0].Metric["pod"], name+"-worker-0") {
		t.Errorf("rank 0's loss %v (%v), want it from the trainingjob-rank0 job", loss, err)
	}
	if ranks, err := prom.query(`count(up{job="trainingjob-rank0", namespace="` + ns + `"})`); err != nil || len(ranks) != 1 ||
		ranks[0].Value[1] != "1" {
		t.Errorf("scrape targets of the job: %v (%v), want rank 0 only", ranks, err)
	}
	if up, err := prom.query(`up{job="operator"}`); err != nil || len(up) != 1 || up[0].Value[1] != "1" {
		t.Errorf("up of the operator's HTTPS endpoint: %v (%v), want 1", up, err)
	}

	for _, q := range dashboardQueries(t, ns, name) {
		if _, err := prom.query(q); err != nil {
			t.Errorf("dashboard: %v", err)
		}
	}
	eventually(t, time.Minute, "alert rules evaluated", func() error {
		resp, err := http.Get(prom.url + "/api/v1/rules")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var out struct {
			Data struct {
				Groups []struct {
					Rules []struct {
						Name, Health, LastError string
					} `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return err
		}
		n := 0
		for _, g := range out.Data.Groups {
			for _, r := range g.Rules {
				if n++; r.Health != "ok" {
					return fmt.Errorf("rule %s: health %q %s", r.Name, r.Health, r.LastError)
				}
			}
		}
		if n == 0 {
			return fmt.Errorf("no rules loaded")
		}
		return nil
	})
	waitForState(t, ns, name, mlv1.StateRunning, time.Minute)
}

var variable = regexp.MustCompile(`\$(namespace|training_job)`)

// dashboardQueries returns the dashboard's panel and variable queries for one job.
func dashboardQueries(t *testing.T, ns, name string) []string {
	t.Helper()
	dash, err := deploy.ReadDashboard(filepath.Join(testenv.RepoRoot(), "deploy", "monitoring", "trainingjob-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		for _, q := range p.Targets {
			exprs = append(exprs, q.Expr)
		}
	}
	for _, q := range dash.VariableQueries() {
		// label_values(SELECTOR, label) is Grafana's: Prometheus evaluates the selector.
		exprs = append(exprs, strings.TrimSuffix(strings.SplitN(strings.TrimPrefix(q, "label_values("), ", ", 2)[0], ")"))
	}
	values := map[string]string{"namespace": ns, "training_job": name}
	for i, e := range exprs {
		exprs[i] = variable.ReplaceAllStringFunc(e, func(m string) string { return regexp.QuoteMeta(values[m[1:]]) })
	}
	return exprs
}
