// Package katib checks what Kubeflow Katib (v0.19.0) reads of a TrainingJob run as a trial
// (docs/hyperparameter-search.md, "Katib: TrainingJob as a trial"), with no cluster and no Katib: the
// successCondition and failureCondition the doc recommends, evaluated with the gjson version Katib pins
// (github.com/tidwall/gjson v1.14.1 in Katib's go.mod) and the way Katib's trial controller evaluates them,
// against TrainingJobs in each state (testdata); the StdOut collector's filter against what the trainers
// print; and the doc's Experiment against the operator's label and container names.
package katib

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// The conditions docs/hyperparameter-search.md recommends: the Completed, or the Failed, condition while
// its status is True.
const (
	successCondition = `status.conditions.#(type=="Completed")#|#(status=="True")#`
	failureCondition = `status.conditions.#(type=="Failed")#|#(status=="True")#`
)

// root is the repository's top directory (tests run in their package's directory).
const root = "../.."

// met reports whether a condition holds of an object's JSON as Katib decides it: the path yields an
// object, or an array with at least one element (job_util.go:71 and :94, see deployedJobStatus).
func met(objectJSON, condition string) bool {
	r := gjson.Get(objectJSON, condition)
	return r.IsObject() || (r.IsArray() && len(r.Array()) > 0)
}

// load reads testdata/NAME, checks that it is a TrainingJob (its fields are the CRD's: decoding it into
// crd/v1's types rejects any other), and returns it as Katib's trial controller holds it: unstructured.
func load(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var tj mlv1.TrainingJob
	if err := dec.Decode(&tj); err != nil {
		t.Fatalf("%s is no TrainingJob: %v", name, err)
	}
	if tj.APIVersion != mlv1.GroupVersion.String() || tj.Kind != "TrainingJob" {
		t.Fatalf("%s is a %s %s, not a TrainingJob", name, tj.APIVersion, tj.Kind)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	return u
}

// toJSON is Katib's util.ConvertUnstructuredToString (pkg/controller.v1beta1/util/unstructured.go:37):
// the object as Unstructured.MarshalJSON writes it.
func toJSON(t *testing.T, u *unstructured.Unstructured) string {
	t.Helper()
	data, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestConditions: the recommended conditions read a Completed TrainingJob as a success, a Failed one as
// a failure, and a Running or Suspended one as neither.
func TestConditions(t *testing.T) {
	type verdict struct{ Success, Failure bool }
	for _, tc := range []struct {
		file  string
		state mlv1.State
		want  verdict
	}{
		{file: "completed.json", state: mlv1.StateCompleted, want: verdict{Success: true}},
		{file: "failed.json", state: mlv1.StateFailed, want: verdict{Failure: true}},
		{file: "running.json", state: mlv1.StateRunning, want: verdict{}},
		{file: "suspended.json", state: mlv1.StateSuspended, want: verdict{}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			obj := load(t, tc.file)
			if state, _, _ := unstructured.NestedString(obj.Object, "status", "state"); state != string(tc.state) {
				t.Fatalf("%s: status.state %q, want %q", tc.file, state, tc.state)
			}
			js := toJSON(t, obj)
			got := verdict{Success: met(js, successCondition), Failure: met(js, failureCondition)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.file, diff)
			}
		})
	}
}

// trialJobStatus is Katib's trialutil.TrialJobStatus (pkg/controller.v1beta1/trial/util/job_util.go:31).
type trialJobStatus struct {
	Condition string `json:"condition,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Message   string `json:"message,omitempty"`
}

// Katib's ConditionType values (job_util.go:46-56).
const (
	jobRunning   = "Running"
	jobSucceeded = "Succeeded"
	jobFailed    = "Failed"
)

// deployedJobStatus mirrors Katib v0.19.0's trialutil.GetDeployedJobStatus
// (pkg/controller.v1beta1/trial/util/job_util.go:58-120), with the same gjson calls in the same order:
// gjson.Get of the failure condition first (:68), then of the success condition (:91); a condition is met
// when the result IsObject, or IsArray with len(Array()) > 0 (:71, :94); the first element of an array
// (or the object) is unmarshalled into the status for its reason and message (:75-83, :97-104); with
// neither, a trial not yet Running whose job has a name becomes Running (:113-116), else nil (:119).
// trialRunning stands for trial.IsRunning().
func deployedJobStatus(trialRunning bool, deployedJob *unstructured.Unstructured, success, failure string) (*trialJobStatus, error) {
	st := &trialJobStatus{}
	data, _ := deployedJob.MarshalJSON()
	deployedJobJSON := string(data)

	failureJobCondition := gjson.Get(deployedJobJSON, failure)
	if failureJobCondition.IsObject() || (failureJobCondition.IsArray() && len(failureJobCondition.Array()) > 0) {
		strCondition := failureJobCondition.String()
		if failureJobCondition.IsArray() {
			strCondition = failureJobCondition.Array()[0].String()
		}
		if err := json.Unmarshal([]byte(strCondition), &st); err != nil {
			return nil, fmt.Errorf("unmarshal failure condition to Trial Job status failed %v", err)
		}
		st.Condition = jobFailed
		return st, nil
	}

	successJobCondition := gjson.Get(deployedJobJSON, success)
	if successJobCondition.IsObject() || (successJobCondition.IsArray() && len(successJobCondition.Array()) > 0) {
		strCondition := successJobCondition.String()
		if successJobCondition.IsArray() {
			strCondition = successJobCondition.Array()[0].String()
		}
		if err := json.Unmarshal([]byte(strCondition), &st); err != nil {
			return nil, fmt.Errorf("unmarshal success condition to Trial Job status failed %v", err)
		}
		st.Condition = jobSucceeded
		return st, nil
	}

	if !trialRunning && deployedJob.GetName() != "" {
		st.Condition = jobRunning
		return st, nil
	}
	return nil, nil
}

// TestKatibReadsTrainingJobs: evaluated as Katib's trial controller does, a Completed TrainingJob makes
// the trial Succeeded and a Failed one Failed, each with that condition's reason and message (which Katib
// puts into the Trial's condition); a Running or Suspended one makes a new trial Running and leaves a
// running trial alone.
func TestKatibReadsTrainingJobs(t *testing.T) {
	for _, tc := range []struct {
		file         string
		trialRunning bool
		// from is the TrainingJob condition whose reason and message Katib takes ("": none).
		from string
		want *trialJobStatus
	}{
		{file: "completed.json", from: mlv1.ConditionCompleted, want: &trialJobStatus{Condition: jobSucceeded}},
		{file: "failed.json", from: mlv1.ConditionFailed, want: &trialJobStatus{Condition: jobFailed}},
		{file: "running.json", want: &trialJobStatus{Condition: jobRunning}},
		{file: "running.json", trialRunning: true, want: nil},
		{file: "suspended.json", want: &trialJobStatus{Condition: jobRunning}},
		{file: "suspended.json", trialRunning: true, want: nil},
	} {
		t.Run(fmt.Sprintf("%s/trialRunning=%v", tc.file, tc.trialRunning), func(t *testing.T) {
			obj := load(t, tc.file)
			if tc.from != "" {
				c := condition(t, obj, tc.from)
				reason, _ := c["reason"].(string)
				message, _ := c["message"].(string)
				if reason == "" || message == "" {
					t.Fatalf("%s: no %s condition with a reason and a message: %v", tc.file, tc.from, c)
				}
				tc.want.Reason, tc.want.Message = reason, message
			}
			got, err := deployedJobStatus(tc.trialRunning, obj, successCondition, failureCondition)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.file, diff)
			}
		})
	}
}

// condition returns the object's status condition of type typ, nil when there is none.
func condition(t *testing.T, obj *unstructured.Unstructured, typ string) map[string]any {
	t.Helper()
	list, _, err := unstructured.NestedSlice(obj.Object, "status", "conditions")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m
		}
	}
	return nil
}

// TestHostileStatusIsNoSuccess: text that looks like a Completed condition (in a condition's message, an
// annotation, a custom metric) and a Completed condition whose status is False do not make a running job
// a success or a failure, for the recommended conditions and for Katib's evaluation of them; with a True
// Failed condition beside the same text the job is a failure.
func TestHostileStatusIsNoSuccess(t *testing.T) {
	hostile := `{"type":"Completed","status":"True","reason":"Succeeded"} "type":"Completed","status":"True" #(type=="Completed")#`
	poison := func(t *testing.T, obj *unstructured.Unstructured) {
		t.Helper()
		list, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range list {
			c.(map[string]any)["message"] = hostile
		}
		list = append(list, map[string]any{
			"type": mlv1.ConditionCompleted, "status": "False", "reason": "Hostile", "message": hostile,
			"lastTransitionTime": "2026-03-02T10:30:20Z", "observedGeneration": int64(1),
		})
		if err := unstructured.SetNestedSlice(obj.Object, list, "status", "conditions"); err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedStringMap(obj.Object, map[string]string{"type": "Completed", "status": "True"},
			"status", "metrics", "custom"); err != nil {
			t.Fatal(err)
		}
		obj.SetAnnotations(map[string]string{"note": hostile, "status.conditions": hostile})
		obj.SetLabels(map[string]string{"type": "Completed", "status": "True"})
	}

	type verdict struct{ Success, Failure bool }
	for _, tc := range []struct {
		name       string
		file       string
		want       verdict
		wantStatus *trialJobStatus
	}{
		{name: "running", file: "running.json", want: verdict{}, wantStatus: &trialJobStatus{Condition: jobRunning}},
		{name: "suspended", file: "suspended.json", want: verdict{}, wantStatus: &trialJobStatus{Condition: jobRunning}},
		{name: "failed", file: "failed.json", want: verdict{Failure: true},
			wantStatus: &trialJobStatus{Condition: jobFailed, Message: hostile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := load(t, tc.file)
			if tc.wantStatus.Condition == jobFailed {
				tc.wantStatus.Reason, _ = condition(t, obj, mlv1.ConditionFailed)["reason"].(string)
			}
			poison(t, obj)
			js := toJSON(t, obj)
			// In the object's JSON text, as Katib evaluates it: escaped, inside strings.
			if !strings.Contains(js, `\"type\":\"Completed\",\"status\":\"True\"`) {
				t.Fatalf("the hostile text is not in the object: %s", js)
			}
			got := verdict{Success: met(js, successCondition), Failure: met(js, failureCondition)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			st, err := deployedJobStatus(false, obj, successCondition, failureCondition)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantStatus, st); diff != "" {
				t.Errorf("Katib's verdict (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPathEndingOnAValueBreaksKatib: a condition that ends on a value instead of the condition object
// (what the doc warns against) is met for any status of the Completed condition, and Katib cannot read
// the match: GetDeployedJobStatus fails, so the trial never finishes.
func TestPathEndingOnAValueBreaksKatib(t *testing.T) {
	const valuePath = `status.conditions.#(type=="Completed")#.status`
	obj := load(t, "completed.json")
	if !met(toJSON(t, obj), valuePath) {
		t.Fatalf("%s is not met on a Completed job", valuePath)
	}
	if st, err := deployedJobStatus(true, obj, valuePath, failureCondition); err == nil {
		t.Errorf("Katib read %s as %+v; want an unmarshal error", valuePath, st)
	}
}

// katibDefaultFilter is the StdOut collector's filter when the Experiment names none
// (pkg/metricscollector/v1beta1/common/const.go:47, v0.19.0).
const katibDefaultFilter = `([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)`

type metricLog struct{ Name, Value string }

// parseTextLogs mirrors Katib's parseLogsInTextFormat
// (pkg/metricscollector/v1beta1/file-metricscollector/file-metricscollector.go:72-126): a line is read
// only when it contains a metric's name; every match of every filter whose first group, trimmed, is a
// metric's name gives that metric its second group, trimmed. No filter means the default (:242-252).
func parseTextLogs(logs []string, metrics, filters []string) []metricLog {
	if len(filters) == 0 {
		filters = []string{katibDefaultFilter}
	}
	var regs []*regexp.Regexp
	for _, f := range filters {
		regs = append(regs, regexp.MustCompile(f))
	}
	var out []metricLog
	for _, line := range logs {
		isMetricLine := false
		for _, m := range metrics {
			if strings.Contains(line, m) {
				isMetricLine = true
				break
			}
		}
		if !isMetricLine {
			continue
		}
		for _, reg := range regs {
			for _, kv := range reg.FindAllStringSubmatch(line, -1) {
				if len(kv) < 3 {
					continue
				}
				name, value := strings.TrimSpace(kv[1]), strings.TrimSpace(kv[2])
				for _, m := range metrics {
					if name == m {
						out = append(out, metricLog{Name: name, Value: value})
						break
					}
				}
			}
		}
	}
	return out
}

// printedFormat returns the epoch line's format string in a trainer's source: the string literal that
// follows prefix on the line that contains it.
func printedFormat(t *testing.T, path, prefix string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(regexp.QuoteMeta(prefix) + `("epoch [^"\n]*")`).FindSubmatch(data)
	if m == nil {
		t.Fatalf("%s prints no epoch line after %s", path, prefix)
	}
	format, err := strconv.Unquote(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	return format
}

// TestTrainersFeedTheStdOutCollector: the epoch lines the example trainer and the default runner print
// (their format strings, read from their sources) give Katib loss and accuracy, with the default filter
// and with the doc's; epoch, which they print as "epoch 4/10", is no metric.
func TestTrainersFeedTheStdOutCollector(t *testing.T) {
	exp := docExperiment(t)
	trainer := fmt.Sprintf(printedFormat(t, "examples/trainer/train.go", "fmt.Printf("), 4, 10, 0.287431, 0.8912, 5790.0)
	// Python's %d and %.4f print these as Go's do.
	runner := fmt.Sprintf(printedFormat(t, "runner/trainingjob_runner/train.py", "print("), 4, 10, 0.287431, 0.8912)
	noise := []string{"resuming from /checkpoints/epoch-3 (epoch 3, step 192, loss 0.3012)", "checkpoint /checkpoints/epoch-4",
		"training complete: 10 epochs on 2 ranks"}
	metrics := []string{exp.Spec.Objective.ObjectiveMetricName}
	metrics = append(metrics, exp.Spec.Objective.AdditionalMetricNames...)
	if diff := cmp.Diff([]string{"loss", "accuracy"}, metrics); diff != "" {
		t.Fatalf("the doc's Experiment's metrics (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		name    string
		line    string
		filters []string
		want    []metricLog
	}{
		{name: "example trainer, default filter", line: trainer,
			want: []metricLog{{"loss", "0.287431"}, {"accuracy", "0.8912"}}},
		{name: "example trainer, the doc's filter", line: trainer, filters: exp.Spec.MetricsCollectorSpec.Source.Filter.MetricsFormat,
			want: []metricLog{{"loss", "0.287431"}, {"accuracy", "0.8912"}}},
		{name: "runner, default filter", line: runner,
			want: []metricLog{{"loss", "0.2874"}, {"accuracy", "0.8912"}}},
		{name: "runner, the doc's filter", line: runner, filters: exp.Spec.MetricsCollectorSpec.Source.Filter.MetricsFormat,
			want: []metricLog{{"loss", "0.2874"}, {"accuracy", "0.8912"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := append([]string{tc.line}, noise...)
			if diff := cmp.Diff(tc.want, parseTextLogs(logs, metrics, tc.filters)); diff != "" {
				t.Errorf("%q (-want +got):\n%s", tc.line, diff)
			}
			if got := parseTextLogs(logs, []string{"epoch"}, tc.filters); len(got) != 0 {
				t.Errorf("epoch read as a metric from %q: %v", tc.line, got)
			}
		})
	}
	if got := parseTextLogs([]string{trainer}, []string{"samples_per_second"}, nil); len(got) != 1 {
		t.Errorf("samples_per_second not read from %q: %v", trainer, got)
	}
	// Katib's webhook rejects a filter without two top groups (the first is the name, the second the value).
	for _, f := range exp.Spec.MetricsCollectorSpec.Source.Filter.MetricsFormat {
		if !regexp.MustCompile(`.*\(.*\).*\(.*\).*`).MatchString(f) || regexp.MustCompile(f).NumSubexp() < 2 || strings.Contains(f, ";") {
			t.Errorf("filter %q: Katib needs two groups and no ';' (it joins filters with ';')", f)
		}
	}
}

// experiment holds the fields of Katib's Experiment the doc's example sets and this test reads.
type experiment struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Objective struct {
			ObjectiveMetricName   string   `json:"objectiveMetricName"`
			AdditionalMetricNames []string `json:"additionalMetricNames"`
		} `json:"objective"`
		MetricsCollectorSpec struct {
			Collector struct {
				Kind string `json:"kind"`
			} `json:"collector"`
			Source struct {
				Filter struct {
					MetricsFormat []string `json:"metricsFormat"`
				} `json:"filter"`
			} `json:"source"`
		} `json:"metricsCollectorSpec"`
		TrialTemplate struct {
			PrimaryContainerName string            `json:"primaryContainerName"`
			PrimaryPodLabels     map[string]string `json:"primaryPodLabels"`
			SuccessCondition     string            `json:"successCondition"`
			FailureCondition     string            `json:"failureCondition"`
			TrialParameters      []struct {
				Name      string `json:"name"`
				Reference string `json:"reference"`
			} `json:"trialParameters"`
			TrialSpec *unstructured.Unstructured `json:"trialSpec"`
		} `json:"trialTemplate"`
	} `json:"spec"`
}

// docBlocks returns the YAML documents of docs/hyperparameter-search.md's yaml code blocks.
func docBlocks(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "hyperparameter-search.md"))
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
		docs = append(docs, strings.Split(m[1], "\n---\n")...)
	}
	return docs
}

// docExperiment returns the doc's Experiment (the block of kind Experiment).
func docExperiment(t *testing.T) experiment {
	t.Helper()
	for _, d := range docBlocks(t) {
		if !strings.Contains(d, "kind: Experiment") {
			continue
		}
		var e experiment // the fields read here; Katib's webhook validates the rest
		if err := yaml.Unmarshal([]byte(d), &e); err != nil {
			t.Fatalf("the doc's Experiment: %v", err)
		}
		return e
	}
	t.Fatal("docs/hyperparameter-search.md has no Experiment")
	return experiment{}
}

// TestDocExperiment: the doc's Experiment uses the conditions tested above, selects rank 0 and the trainer
// container by the operator's names, and its trialSpec, filled in the way Katib fills it, is a valid
// TrainingJob.
func TestDocExperiment(t *testing.T) {
	e := docExperiment(t)
	tt := e.Spec.TrialTemplate
	if e.APIVersion != "kubeflow.org/v1beta1" || e.Spec.MetricsCollectorSpec.Collector.Kind != "StdOut" {
		t.Errorf("the doc's Experiment is %s with collector %q, want kubeflow.org/v1beta1 and StdOut",
			e.APIVersion, e.Spec.MetricsCollectorSpec.Collector.Kind)
	}
	type picked struct {
		Success, Failure, Container string
		PodLabels                   map[string]string
	}
	want := picked{Success: successCondition, Failure: failureCondition, Container: names.ContainerName,
		PodLabels: map[string]string{names.RankLabel: "0"}}
	got := picked{Success: tt.SuccessCondition, Failure: tt.FailureCondition, Container: tt.PrimaryContainerName,
		PodLabels: tt.PrimaryPodLabels}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the doc's trialTemplate (-want +got):\n%s", diff)
	}
	if tt.TrialSpec == nil {
		t.Fatal("the doc's Experiment has no trialSpec")
	}
	// Katib's applyParameters (pkg/controller.v1beta1/experiment/manifest/generator.go:109-197): the
	// trialSpec as JSON text, each ${trialParameters.NAME} replaced by the value, read back.
	filled := toJSON(t, tt.TrialSpec)
	for _, p := range tt.TrialParameters {
		filled = strings.ReplaceAll(filled, "${trialParameters."+p.Name+"}", "0.05")
	}
	if strings.Contains(filled, "${") {
		t.Fatalf("placeholders left in the filled trialSpec: %s", filled)
	}
	tj := decodeTrainingJob(t, []byte(filled))
	if !strings.Contains(strings.Join(tj.Spec.Args, " "), "--learning-rate=0.05") {
		t.Errorf("the filled trialSpec passes no learning rate: args %q", tj.Spec.Args)
	}
	if len(tj.Spec.Command) == 0 || tj.Spec.NumWorkers < 1 {
		t.Errorf("the trialSpec needs a command (Katib wraps it) and workers: %+v", tj.Spec)
	}
	data, err := os.ReadFile(filepath.Join(root, "docs", "hyperparameter-search.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "katib.kubeflow.org/metrics-collector-injection=enabled") {
		t.Error("the doc does not label the namespace for Katib's webhook")
	}
}

// decodeTrainingJob decodes JSON strictly into a TrainingJob.
func decodeTrainingJob(t *testing.T, data []byte) mlv1.TrainingJob {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var tj mlv1.TrainingJob
	if err := dec.Decode(&tj); err != nil {
		t.Fatalf("not a TrainingJob: %v\n%s", err, data)
	}
	return tj
}

// TestPlaceholdersAreText: in trialSpec, a placeholder in a number field becomes a string (what the doc
// warns against: the API server rejects it); in a ConfigMap template, as the doc's, an unquoted
// placeholder becomes a number.
func TestPlaceholdersAreText(t *testing.T) {
	inSpec := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte("apiVersion: ml.example.com/v1\nkind: TrainingJob\nspec:\n  numWorkers: 1\n"+
		"  hyperparameters:\n    learningRate: \"${trialParameters.learningRate}\"\n"), &inSpec.Object); err != nil {
		t.Fatal(err)
	}
	filled := strings.ReplaceAll(toJSON(t, inSpec), "${trialParameters.learningRate}", "0.05")
	var tj mlv1.TrainingJob
	if err := json.Unmarshal([]byte(filled), &tj); err == nil {
		t.Errorf("a placeholder in hyperparameters.learningRate of trialSpec decoded as a number: %s", filled)
	}

	var template string
	for _, d := range docBlocks(t) {
		if !strings.Contains(d, "kind: ConfigMap") {
			continue
		}
		var cm struct {
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(d), &cm); err != nil {
			t.Fatal(err)
		}
		for _, v := range cm.Data {
			template = v
		}
	}
	if template == "" {
		t.Fatal("the doc has no ConfigMap template")
	}
	// Katib reads the filled text with a YAML-or-JSON decoder (util.ConvertStringToUnstructured).
	data, err := yaml.YAMLToJSON([]byte(strings.ReplaceAll(template, "${trialParameters.learningRate}", "0.05")))
	if err != nil {
		t.Fatal(err)
	}
	tj = decodeTrainingJob(t, data)
	if lr := tj.Spec.Hyperparameters; lr == nil || lr.LearningRate == nil || *lr.LearningRate != 0.05 {
		t.Errorf("the doc's ConfigMap template does not give learningRate 0.05: %s", data)
	}
	if len(tj.Spec.Command) == 0 {
		t.Errorf("the doc's ConfigMap template names no command (Katib wraps it): %s", data)
	}
}
