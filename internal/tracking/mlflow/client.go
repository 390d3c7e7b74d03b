// Package mlflow is a small client of the MLflow tracking server's REST API 2.0: the calls the operator
// makes to keep one MLflow run per TrainingJob (experiments get-by-name and create, runs create, get,
// search, update and log-batch). Failed calls that may succeed later (429, 5xx, a server that does not
// answer) are retried with capped exponential backoff and jitter; MLflow's own errors come back as *Error
// with their HTTP status and error code, never the answer's text (errors end up in a job's status, and the
// server may not be MLflow). The base URL is checked (ParseBaseURL) before any call and the API paths are
// joined to it, never concatenated. Log batches are split to the API's limits.
package mlflow

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Error codes MLflow returns that callers act on.
const (
	ResourceAlreadyExists = "RESOURCE_ALREADY_EXISTS"
	ResourceDoesNotExist  = "RESOURCE_DOES_NOT_EXIST"
	InvalidParameterValue = "INVALID_PARAMETER_VALUE"
)

// Batch limits of runs/log-batch.
const (
	MaxMetricsPerBatch  = 1000
	MaxParamsPerBatch   = 100
	MaxTagsPerBatch     = 100
	MaxEntitiesPerBatch = 1000
)

// Run statuses.
const (
	RunRunning  = "RUNNING"
	RunFinished = "FINISHED"
	RunFailed   = "FAILED"
	RunKilled   = "KILLED"
)

// Error is an error answer of the tracking server: the call, the HTTP status and, when the answer is
// MLflow's error JSON, its error_code. It never holds the answer's message or body: a server that is not
// MLflow (or not the one meant) writes those, and errors reach the job's status.
type Error struct {
	// Call is the request, as "GET experiments/get-by-name".
	Call   string
	Status int
	// Code is MLflow's error_code when it is one (a short upper-case token), else "".
	Code string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("mlflow: %s: HTTP %d %s", e.Call, e.Status, http.StatusText(e.Status))
	if e.Code != "" {
		s += " (" + e.Code + ")"
	}
	return s
}

// IsCode reports whether err is an MLflow error with that code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// Client talks to one tracking server. BaseURL must pass ParseBaseURL (no call is made otherwise); the
// API paths are joined to its path. Authorization, when set, is sent as the Authorization header ("Bearer
// TOKEN" or "Basic ..."); it never appears in errors. Redirects are not followed: a 3xx answer is an
// *Error.
type Client struct {
	BaseURL       string
	HTTP          *http.Client
	Authorization string
	// Attempts is how many times a retryable call is tried (default 5); Backoff the first wait (default
	// 200 ms), doubled each time up to MaxBackoff (default 5 s), with jitter.
	Attempts   int
	Backoff    time.Duration
	MaxBackoff time.Duration
}

// Tag is a key and value (experiment and run tags, params).
type Tag struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Metric is one metric value at a step.
type Metric struct {
	Key       string  `json:"key"`
	Value     float64 `json:"value"`
	Timestamp int64   `json:"timestamp"`
	Step      int64   `json:"step"`
}

// Experiment is an MLflow experiment.
type Experiment struct {
	ID   string `json:"experiment_id"`
	Name string `json:"name"`
}

// RunInfo is a run's identity and state.
type RunInfo struct {
	RunID        string `json:"run_id"`
	ExperimentID string `json:"experiment_id"`
	RunName      string `json:"run_name"`
	Status       string `json:"status"`
	StartTime    int64  `json:"start_time"`
	EndTime      int64  `json:"end_time,omitempty"`
}

// Run is a run with its data.
type Run struct {
	Info RunInfo `json:"info"`
	Data struct {
		Tags    []Tag    `json:"tags,omitempty"`
		Params  []Tag    `json:"params,omitempty"`
		Metrics []Metric `json:"metrics,omitempty"`
	} `json:"data"`
}

// GetExperimentByName returns the experiment, or an error with code ResourceDoesNotExist.
func (c *Client) GetExperimentByName(ctx context.Context, name string) (Experiment, error) {
	var out struct {
		Experiment Experiment `json:"experiment"`
	}
	err := c.call(ctx, http.MethodGet, "experiments/get-by-name", url.Values{"experiment_name": {name}}, nil, &out)
	return out.Experiment, err
}

// EnsureExperiment finds the experiment by name or creates it; two callers creating it at once both get
// the same one (the loser of the race finds the winner's).
func (c *Client) EnsureExperiment(ctx context.Context, name string) (string, error) {
	exp, err := c.GetExperimentByName(ctx, name)
	if err == nil {
		return exp.ID, nil
	}
	if !IsCode(err, ResourceDoesNotExist) {
		return "", err
	}
	var out struct {
		ID string `json:"experiment_id"`
	}
	err = c.call(ctx, http.MethodPost, "experiments/create", nil, map[string]any{"name": name}, &out)
	if IsCode(err, ResourceAlreadyExists) {
		exp, err = c.GetExperimentByName(ctx, name)
		return exp.ID, err
	}
	return out.ID, err
}

// CreateRun starts a run.
func (c *Client) CreateRun(ctx context.Context, experimentID, name string, start time.Time, tags []Tag) (RunInfo, error) {
	var out struct {
		Run Run `json:"run"`
	}
	err := c.call(ctx, http.MethodPost, "runs/create", nil, map[string]any{
		"experiment_id": experimentID, "run_name": name, "start_time": start.UnixMilli(), "tags": tags}, &out)
	return out.Run.Info, err
}

// GetRun returns a run with its data.
func (c *Client) GetRun(ctx context.Context, runID string) (Run, error) {
	var out struct {
		Run Run `json:"run"`
	}
	err := c.call(ctx, http.MethodGet, "runs/get", url.Values{"run_id": {runID}}, nil, &out)
	return out.Run, err
}

// FindRunByTag returns the run of the experiment whose tag key has value, if there is one: how a run is
// found again after a restart between its creation and the record of its id.
func (c *Client) FindRunByTag(ctx context.Context, experimentID, key, value string) (RunInfo, bool, error) {
	var out struct {
		Runs []Run `json:"runs"`
	}
	filter := fmt.Sprintf("tags.`%s` = '%s'", key, strings.ReplaceAll(value, "'", "\\'"))
	err := c.call(ctx, http.MethodPost, "runs/search", nil, map[string]any{
		"experiment_ids": []string{experimentID}, "filter": filter, "max_results": 1}, &out)
	if err != nil || len(out.Runs) == 0 {
		return RunInfo{}, false, err
	}
	return out.Runs[0].Info, true, nil
}

// UpdateRun sets a run's status (and, for a finished run, its end time).
func (c *Client) UpdateRun(ctx context.Context, runID, status string, end time.Time) error {
	body := map[string]any{"run_id": runID, "status": status}
	if !end.IsZero() {
		body["end_time"] = end.UnixMilli()
	}
	return c.call(ctx, http.MethodPost, "runs/update", nil, body, nil)
}

// LogBatch logs metrics, params and tags, in as many log-batch calls as the API's limits need.
func (c *Client) LogBatch(ctx context.Context, runID string, metrics []Metric, params, tags []Tag) error {
	for len(metrics)+len(params)+len(tags) > 0 {
		np := min(len(params), MaxParamsPerBatch)
		nt := min(len(tags), MaxTagsPerBatch, MaxEntitiesPerBatch-np)
		nm := min(len(metrics), MaxMetricsPerBatch, MaxEntitiesPerBatch-np-nt)
		body := map[string]any{"run_id": runID, "metrics": metrics[:nm], "params": params[:np], "tags": tags[:nt]}
		if err := c.call(ctx, http.MethodPost, "runs/log-batch", nil, body, nil); err != nil {
			return err
		}
		metrics, params, tags = metrics[nm:], params[np:], tags[nt:]
	}
	return nil
}
