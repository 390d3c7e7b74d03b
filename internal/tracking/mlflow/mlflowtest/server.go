// Package mlflowtest is an in-memory stand-in for an MLflow tracking server (no MLflow server can be
// installed on the project's machines). It follows MLflow 2.x's REST API 2.0 for the endpoints the
// operator calls and enforces what the real server does there: required fields, the error JSON
// ({"error_code", "message"}) with RESOURCE_ALREADY_EXISTS, RESOURCE_DOES_NOT_EXIST and
// INVALID_PARAMETER_VALUE, unique experiment names, log-batch limits (1,000 metrics, 100 params, 100
// tags, 1,000 entities), params that may not change value, and runs/search's tag filter (the one form
// `tags.`KEY` = 'VALUE'`). Faults are injected with FailNext (answer the next calls with a status) and
// Down (refuse everything); Calls counts requests by endpoint, Authorizations records the Authorization
// header of each.
package mlflowtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
)

// Server is a fake tracking server.
type Server struct {
	*httptest.Server

	mu          sync.Mutex
	experiments map[string]string // name -> id
	runs        map[string]*run
	nextID      int
	failNext    []int
	down        bool
	calls       map[string]int
	auths       []string
	// Authorization, when set, is the Authorization header every request must carry.
	Authorization string
}

type run struct {
	info    map[string]any
	tags    map[string]string
	params  map[string]string
	metrics []map[string]any
}

// NewServer starts a fake tracking server; Close stops it.
func NewServer() *Server {
	s := &Server{experiments: map[string]string{}, runs: map[string]*run{}, calls: map[string]int{}}
	mux := http.NewServeMux()
	for path, h := range map[string]func(map[string]any, *http.Request) (any, *apiError){
		"GET /api/2.0/mlflow/experiments/get-by-name": s.getExperimentByName,
		"POST /api/2.0/mlflow/experiments/create":     s.createExperiment,
		"POST /api/2.0/mlflow/runs/create":            s.createRun,
		"GET /api/2.0/mlflow/runs/get":                s.getRun,
		"POST /api/2.0/mlflow/runs/search":            s.searchRuns,
		"POST /api/2.0/mlflow/runs/update":            s.updateRun,
		"POST /api/2.0/mlflow/runs/log-batch":         s.logBatch,
	} {
		mux.HandleFunc(path, s.handle(path, h))
	}
	s.Server = httptest.NewServer(mux)
	return s
}

type apiError struct {
	status int
	Code   string `json:"error_code"`
	Msg    string `json:"message"`
}

func invalid(format string, a ...any) *apiError {
	return &apiError{http.StatusBadRequest, "INVALID_PARAMETER_VALUE", fmt.Sprintf(format, a...)}
}

// FailNext answers the next len(statuses) requests with these HTTP statuses (429, 503, ...).
func (s *Server) FailNext(statuses ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = append(s.failNext, statuses...)
}

// Down makes the server answer every request 503 (true) or serve again (false).
func (s *Server) Down(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// Calls returns how many requests reached the endpoint ("POST /api/2.0/mlflow/runs/log-batch").
func (s *Server) Calls(endpoint string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[endpoint]
}

// Authorizations returns the Authorization header of every request that reached an endpoint, in order ("" for
// a request without one).
func (s *Server) Authorizations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auths...)
}

// Runs returns every run of an experiment as the API's Run JSON (info, data.tags, data.params and the
// latest value of each metric in data.metrics; History has the others).
func (s *Server) Runs(experimentID string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, r := range s.runs {
		if r.info["experiment_id"] == experimentID {
			out = append(out, r.json())
		}
	}
	return out
}

func (s *Server) handle(path string, h func(map[string]any, *http.Request) (any, *apiError)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.calls[path]++
		s.auths = append(s.auths, r.Header.Get("Authorization"))
		if s.down || len(s.failNext) > 0 {
			status := http.StatusServiceUnavailable
			if !s.down {
				status, s.failNext = s.failNext[0], s.failNext[1:]
			}
			writeJSON(w, status, apiError{Code: "TEMPORARILY_UNAVAILABLE", Msg: http.StatusText(status)})
			return
		}
		if s.Authorization != "" && r.Header.Get("Authorization") != s.Authorization {
			writeJSON(w, http.StatusUnauthorized, apiError{Code: "UNAUTHENTICATED", Msg: "credentials are missing or wrong"})
			return
		}
		body := map[string]any{}
		if r.Method == http.MethodPost {
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				writeJSON(w, http.StatusBadRequest, apiError{Code: "MALFORMED_REQUEST", Msg: err.Error()})
				return
			}
		}
		out, apiErr := h(body, r)
		if apiErr != nil {
			writeJSON(w, apiErr.status, apiErr)
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func str(body map[string]any, key string) string { v, _ := body[key].(string); return v }

func (s *Server) getExperimentByName(_ map[string]any, r *http.Request) (any, *apiError) {
	name := r.URL.Query().Get("experiment_name")
	if name == "" {
		return nil, invalid("Missing value for required parameter 'experiment_name'")
	}
	id, ok := s.experiments[name]
	if !ok {
		return nil, &apiError{http.StatusNotFound, "RESOURCE_DOES_NOT_EXIST", fmt.Sprintf("Could not find experiment with name '%s'", name)}
	}
	return map[string]any{"experiment": map[string]any{"experiment_id": id, "name": name, "lifecycle_stage": "active"}}, nil
}

func (s *Server) createExperiment(body map[string]any, _ *http.Request) (any, *apiError) {
	name := str(body, "name")
	if name == "" {
		return nil, invalid("Missing value for required parameter 'name'")
	}
	if _, ok := s.experiments[name]; ok {
		return nil, &apiError{http.StatusBadRequest, "RESOURCE_ALREADY_EXISTS", fmt.Sprintf("Experiment '%s' already exists.", name)}
	}
	s.nextID++
	s.experiments[name] = strconv.Itoa(s.nextID)
	return map[string]any{"experiment_id": s.experiments[name]}, nil
}

func (s *Server) experimentExists(id string) bool {
	for _, e := range s.experiments {
		if e == id {
			return true
		}
	}
	return false
}

func (s *Server) createRun(body map[string]any, _ *http.Request) (any, *apiError) {
	exp := str(body, "experiment_id")
	if !s.experimentExists(exp) {
		return nil, &apiError{http.StatusNotFound, "RESOURCE_DOES_NOT_EXIST", fmt.Sprintf("No Experiment with id=%s exists", exp)}
	}
	s.nextID++
	id := fmt.Sprintf("run%04d", s.nextID)
	r := &run{
		info: map[string]any{"run_id": id, "run_uuid": id, "experiment_id": exp, "run_name": str(body, "run_name"),
			"status": "RUNNING", "start_time": body["start_time"], "lifecycle_stage": "active"},
		tags:   map[string]string{},
		params: map[string]string{},
	}
	tags, _ := body["tags"].([]any)
	for _, t := range tags {
		m, _ := t.(map[string]any)
		r.tags[str(m, "key")] = str(m, "value")
	}
	s.runs[id] = r
	return map[string]any{"run": r.json()}, nil
}

// json returns the run as runs/get and runs/search return it: like MLflow, data.metrics holds the latest
// value of each metric (the largest step, then the latest timestamp, then the largest value).
func (r *run) json() map[string]any {
	kv := func(m map[string]string) []map[string]string {
		var out []map[string]string
		for k, v := range m {
			out = append(out, map[string]string{"key": k, "value": v})
		}
		return out
	}
	latest := map[string]map[string]any{}
	for _, m := range r.metrics {
		if l, ok := latest[str(m, "key")]; !ok || later(m, l) {
			latest[str(m, "key")] = m
		}
	}
	metrics := make([]map[string]any, 0, len(latest))
	for _, m := range latest {
		metrics = append(metrics, m)
	}
	return map[string]any{"info": r.info, "data": map[string]any{"tags": kv(r.tags), "params": kv(r.params), "metrics": metrics}}
}

func later(a, b map[string]any) bool {
	for _, k := range []string{"step", "timestamp", "value"} {
		x, _ := a[k].(float64)
		y, _ := b[k].(float64)
		if x != y {
			return x > y
		}
	}
	return false
}

// Metric is one logged value of a metric.
type Metric struct {
	Step      int64
	Value     float64
	Timestamp int64
}

// History returns every value logged to a run's metric, in the order logged (MLflow's metrics/get-history).
func (s *Server) History(runID, key string) []Metric {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.runs[runID]
	if !ok {
		return nil
	}
	var out []Metric
	for _, m := range r.metrics {
		if str(m, "key") == key {
			step, _ := m["step"].(float64)
			v, _ := m["value"].(float64)
			ts, _ := m["timestamp"].(float64)
			out = append(out, Metric{Step: int64(step), Value: v, Timestamp: int64(ts)})
		}
	}
	return out
}

func (s *Server) run(id string) (*run, *apiError) {
	if id == "" {
		return nil, invalid("Missing value for required parameter 'run_id'")
	}
	r, ok := s.runs[id]
	if !ok {
		return nil, &apiError{http.StatusNotFound, "RESOURCE_DOES_NOT_EXIST", fmt.Sprintf("Run '%s' not found", id)}
	}
	return r, nil
}

func (s *Server) getRun(_ map[string]any, req *http.Request) (any, *apiError) {
	r, err := s.run(req.URL.Query().Get("run_id"))
	if err != nil {
		return nil, err
	}
	return map[string]any{"run": r.json()}, nil
}

var (
	tagFilter = regexp.MustCompile("^tags\\.`([^`]+)` = '((?:[^'\\\\]|\\\\.)*)'$")
	unescape  = regexp.MustCompile(`\\(.)`)
)

func (s *Server) searchRuns(body map[string]any, _ *http.Request) (any, *apiError) {
	ids, _ := body["experiment_ids"].([]any)
	m := tagFilter.FindStringSubmatch(str(body, "filter"))
	if len(ids) == 0 || m == nil {
		return nil, invalid("search needs experiment_ids and a filter tags.`KEY` = 'VALUE' (the only form this fake supports)")
	}
	var runs []map[string]any
	for _, r := range s.runs {
		for _, id := range ids {
			if r.info["experiment_id"] == id && r.tags[m[1]] == unescape.ReplaceAllString(m[2], "$1") {
				runs = append(runs, r.json())
			}
		}
	}
	return map[string]any{"runs": runs}, nil
}

func (s *Server) updateRun(body map[string]any, _ *http.Request) (any, *apiError) {
	r, err := s.run(str(body, "run_id"))
	if err != nil {
		return nil, err
	}
	status := str(body, "status")
	switch status {
	case "RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED":
	default:
		return nil, invalid("Invalid value %q for parameter 'status'", status)
	}
	r.info["status"] = status
	if end, ok := body["end_time"]; ok {
		r.info["end_time"] = end
	}
	return map[string]any{"run_info": r.info}, nil
}

func (s *Server) logBatch(body map[string]any, _ *http.Request) (any, *apiError) {
	r, err := s.run(str(body, "run_id"))
	if err != nil {
		return nil, err
	}
	metrics, _ := body["metrics"].([]any)
	params, _ := body["params"].([]any)
	tags, _ := body["tags"].([]any)
	switch {
	case len(metrics) > 1000:
		return nil, invalid("A batch logging request can contain at most 1000 metrics. Got %d metrics.", len(metrics))
	case len(params) > 100:
		return nil, invalid("A batch logging request can contain at most 100 params. Got %d params.", len(params))
	case len(tags) > 100:
		return nil, invalid("A batch logging request can contain at most 100 tags. Got %d tags.", len(tags))
	case len(metrics)+len(params)+len(tags) > 1000:
		return nil, invalid("A batch logging request can contain at most 1000 total entities")
	}
	for _, p := range params {
		m, _ := p.(map[string]any)
		if old, ok := r.params[str(m, "key")]; ok && old != str(m, "value") {
			return nil, invalid("Changing param values is not allowed. Param with key='%s' was already logged with value='%s'", str(m, "key"), old)
		}
		r.params[str(m, "key")] = str(m, "value")
	}
	for _, t := range tags {
		m, _ := t.(map[string]any)
		r.tags[str(m, "key")] = str(m, "value")
	}
	for _, mt := range metrics {
		m, _ := mt.(map[string]any)
		if str(m, "key") == "" || m["value"] == nil || m["timestamp"] == nil {
			return nil, invalid("Missing value for required parameter 'metrics[...]': key, value and timestamp are required")
		}
		r.metrics = append(r.metrics, m)
	}
	return map[string]any{}, nil
}
