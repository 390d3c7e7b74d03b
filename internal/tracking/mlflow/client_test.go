package mlflow_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking/mlflow"
	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking/mlflow/mlflowtest"
)

var ctx = context.Background()

func newClient(s *mlflowtest.Server) *mlflow.Client {
	return &mlflow.Client{BaseURL: s.URL, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
}

// TestEnsureExperimentConcurrently: jobs of one namespace creating its experiment at once all get the
// same one.
func TestEnsureExperimentConcurrently(t *testing.T) {
	s := mlflowtest.NewServer()
	defer s.Close()
	c := newClient(s)
	ids := make([]string, 10)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if ids[i], err = c.EnsureExperiment(ctx, "team-a"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] || id == "" {
			t.Fatalf("experiment ids %v: want one", ids)
		}
	}
	if n := s.Calls("POST /api/2.0/mlflow/experiments/create"); n < 1 {
		t.Errorf("%d creates", n)
	}
}

// TestRetries: 429 and 5xx answers are retried with backoff until the attempts run out; a server that
// is down and comes back is caught up with; other errors are not retried.
func TestRetries(t *testing.T) {
	cases := []struct {
		name     string
		fail     []int
		down     bool
		attempts int
		wantErr  string
		calls    int
	}{
		{"a 429 storm shorter than the attempts", []int{429, 429, 503}, false, 5, "", 4},
		{"a storm longer than the attempts", []int{429, 429, 429}, false, 2, "429", 2},
		{"down", nil, true, 3, "503", 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := mlflowtest.NewServer()
			defer s.Close()
			c := newClient(s)
			c.Attempts = tc.attempts
			s.FailNext(tc.fail...)
			s.Down(tc.down)
			_, err := c.EnsureExperiment(ctx, "x")
			got := ""
			if err != nil {
				got = err.Error()
			}
			if (tc.wantErr == "") != (err == nil) || !strings.Contains(got, tc.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
			if n := s.Calls("GET /api/2.0/mlflow/experiments/get-by-name"); n != tc.calls {
				t.Errorf("%d get-by-name calls, want %d", n, tc.calls)
			}
			s.Down(false)
			if _, err := c.EnsureExperiment(ctx, "x"); err != nil {
				t.Errorf("after the server came back: %v", err)
			}
		})
	}
}

// TestLogBatchSplits: a batch over the API's limits goes in as many calls as needed, nothing lost.
func TestLogBatchSplits(t *testing.T) {
	s := mlflowtest.NewServer()
	defer s.Close()
	c := newClient(s)
	exp, err := c.EnsureExperiment(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	run, err := c.CreateRun(ctx, exp, "job", time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var metrics []mlflow.Metric
	for i := range 2500 {
		metrics = append(metrics, mlflow.Metric{Key: "loss", Value: 1 / float64(i+1), Timestamp: int64(i), Step: int64(i)})
	}
	var params, tags []mlflow.Tag
	for i := range 150 {
		params = append(params, mlflow.Tag{Key: fmt.Sprintf("p%d", i), Value: "v"})
	}
	for i := range 10 {
		tags = append(tags, mlflow.Tag{Key: fmt.Sprintf("t%d", i), Value: "v"})
	}
	if err := c.LogBatch(ctx, run.RunID, metrics, params, tags); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetRun(ctx, run.RunID)
	if err != nil {
		t.Fatal(err)
	}
	// 100 params + 10 tags + 890 metrics, then 50 params + 950 metrics, then 660 metrics.
	if diff := cmp.Diff([]int{3, 2500, 150, 10}, []int{s.Calls("POST /api/2.0/mlflow/runs/log-batch"), len(s.History(run.RunID, "loss")), len(got.Data.Params), len(got.Data.Tags)}); diff != "" {
		t.Errorf("calls, metrics, params, tags (-want +got):\n%s", diff)
	}
}

// TestRunLifecycle: a run is found again by its tag (a restart between its creation and the record of
// its id never makes two), is finished with its end time, and MLflow's errors come back with their codes.
func TestRunLifecycle(t *testing.T) {
	s := mlflowtest.NewServer()
	defer s.Close()
	c := newClient(s)
	exp, err := c.EnsureExperiment(ctx, "ns")
	if err != nil {
		t.Fatal(err)
	}
	created, err := c.CreateRun(ctx, exp, "mnist", time.Now(), []mlflow.Tag{{Key: "trainingjob.uid", Value: "u-1"}})
	if err != nil {
		t.Fatal(err)
	}
	found, ok, err := c.FindRunByTag(ctx, exp, "trainingjob.uid", "u-1")
	if err != nil || !ok || found.RunID != created.RunID {
		t.Fatalf("found %+v %v %v, want run %s", found, ok, err, created.RunID)
	}
	if _, ok, err := c.FindRunByTag(ctx, exp, "trainingjob.uid", "u-2"); ok || err != nil {
		t.Errorf("a run of another uid was found (%v)", err)
	}
	end := time.UnixMilli(1_700_000_000_000)
	if err := c.UpdateRun(ctx, created.RunID, mlflow.RunFinished, end); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetRun(ctx, created.RunID)
	if err != nil || got.Info.Status != mlflow.RunFinished || got.Info.EndTime != end.UnixMilli() {
		t.Errorf("run %+v (%v), want FINISHED at %d", got.Info, err, end.UnixMilli())
	}
	errs := []struct {
		err  error
		code string
	}{
		{func() error { _, err := c.GetExperimentByName(ctx, "none"); return err }(), mlflow.ResourceDoesNotExist},
		{c.UpdateRun(ctx, created.RunID, "DONE", time.Time{}), mlflow.InvalidParameterValue},
		{c.UpdateRun(ctx, "run-none", mlflow.RunFailed, time.Time{}), mlflow.ResourceDoesNotExist},
		{func() error {
			_ = c.LogBatch(ctx, created.RunID, nil, []mlflow.Tag{{Key: "lr", Value: "0.1"}}, nil)
			return c.LogBatch(ctx, created.RunID, nil, []mlflow.Tag{{Key: "lr", Value: "0.2"}}, nil)
		}(), mlflow.InvalidParameterValue},
	}
	for i, e := range errs {
		if !mlflow.IsCode(e.err, e.code) {
			t.Errorf("case %d: error %v, want code %s", i, e.err, e.code)
		}
	}
}

// TestAuthorization: the header is sent; a wrong one is refused once (not retried) and never appears in
// the error.
func TestAuthorization(t *testing.T) {
	s := mlflowtest.NewServer()
	defer s.Close()
	s.Authorization = "Bearer s3cret"
	c := newClient(s)
	c.Authorization = "Bearer wrong-s3cret"
	_, err := c.EnsureExperiment(ctx, "x")
	var e *mlflow.Error
	if !errors.As(err, &e) || e.Status != http.StatusUnauthorized || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %v: want a 401 without the credentials", err)
	}
	if n := s.Calls("GET /api/2.0/mlflow/experiments/get-by-name"); n != 1 {
		t.Errorf("%d calls: a 401 is not retried", n)
	}
	c.Authorization = "Bearer s3cret"
	if _, err := c.EnsureExperiment(ctx, "x"); err != nil {
		t.Error(err)
	}
}
