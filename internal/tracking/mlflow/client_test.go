package mlflow_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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
		{name: "a 429 storm shorter than the attempts", fail: []int{429, 429, 503}, down: false, attempts: 5, wantErr: "", calls: 4},
		{name: "a storm longer than the attempts", fail: []int{429, 429, 429}, down: false, attempts: 2, wantErr: "429", calls: 2},
		{name: "down", fail: nil, down: true, attempts: 3, wantErr: "503", calls: 3},
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
	type logged struct {
		Calls, Metrics, Params, Tags int
	}
	gotLogged := logged{
		Calls:   s.Calls("POST /api/2.0/mlflow/runs/log-batch"),
		Metrics: len(s.History(run.RunID, "loss")),
		Params:  len(got.Data.Params),
		Tags:    len(got.Data.Tags),
	}
	if diff := cmp.Diff(logged{Calls: 3, Metrics: 2500, Params: 150, Tags: 10}, gotLogged); diff != "" {
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
		{err: func() error { _, err := c.GetExperimentByName(ctx, "none"); return err }(), code: mlflow.ResourceDoesNotExist},
		{err: c.UpdateRun(ctx, created.RunID, "DONE", time.Time{}), code: mlflow.InvalidParameterValue},
		{err: c.UpdateRun(ctx, "run-none", mlflow.RunFailed, time.Time{}), code: mlflow.ResourceDoesNotExist},
		{err: func() error {
			_ = c.LogBatch(ctx, created.RunID, nil, []mlflow.Tag{{Key: "lr", Value: "0.1"}}, nil)
			return c.LogBatch(ctx, created.RunID, nil, []mlflow.Tag{{Key: "lr", Value: "0.2"}}, nil)
		}(), code: mlflow.InvalidParameterValue},
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

// containsAny reports whether s contains one of subs.
func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// recorder is a server that answers every request with status and body, and records what it got.
type recorder struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string // "METHOD PATH?QUERY"
}

func newRecorder(t *testing.T, status int, body string) *recorder {
	r := &recorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.requests = append(r.requests, req.Method+" "+req.URL.RequestURI())
		r.mu.Unlock()
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.requests...)
}

// TestRefusedBaseURL: a tracking URI with a query (which would take the API path into the query), a
// fragment, user information, another scheme or no host is refused before any request.
func TestRefusedBaseURL(t *testing.T) {
	s := newRecorder(t, http.StatusOK, `{}`)
	host := strings.TrimPrefix(s.URL, "http://")
	cases := []struct {
		name    string
		baseURL string
		problem string
	}{
		{name: "an empty query", baseURL: s.URL + "/?", problem: "it has a query"},
		{name: "a query", baseURL: s.URL + "/?next=", problem: "it has a query"},
		{name: "a fragment", baseURL: s.URL + "/#", problem: "it has a fragment"},
		{name: "user information", baseURL: "http://user:pw@" + host, problem: "it carries user information"},
		{name: "another scheme", baseURL: "ftp://" + host, problem: `its scheme "ftp" is not http or https`},
		{name: "no host", baseURL: "http:///", problem: "it has no host"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &mlflow.Client{BaseURL: tc.baseURL, Attempts: 1}
			_, err := c.EnsureExperiment(ctx, "x")
			var uriErr *mlflow.URIError
			got := ""
			if errors.As(err, &uriErr) {
				got = uriErr.Problem
			}
			if diff := cmp.Diff(tc.problem, got); diff != "" {
				t.Errorf("error %v: problem (-want +got):\n%s", err, diff)
			}
			if reqs := s.got(); len(reqs) > 0 {
				t.Errorf("requests %v were made", reqs)
			}
		})
	}
}

// TestPathsAreJoined: the API path is joined to the base URL's path (a trailing slash or not), and
// parameters go in the query, escaped.
func TestPathsAreJoined(t *testing.T) {
	s := newRecorder(t, http.StatusOK, `{"experiment":{"experiment_id":"1"}}`)
	for _, base := range []string{s.URL, s.URL + "/", s.URL + "/tracking", s.URL + "/tracking/"} {
		c := &mlflow.Client{BaseURL: base, Attempts: 1}
		if _, err := c.GetExperimentByName(ctx, "a b&c=d"); err != nil {
			t.Fatalf("%s: %v", base, err)
		}
	}
	const get = "/api/2.0/mlflow/experiments/get-by-name?experiment_name=a+b%26c%3Dd"
	want := []string{"GET " + get, "GET " + get, "GET /tracking" + get, "GET /tracking" + get}
	if diff := cmp.Diff(want, s.got()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

// TestErrorsLeaveTheAnswerOut: whatever a server answers (MLflow's error JSON, plain text, a 2xx that is
// not MLflow's JSON, something that is not HTTP), the error carries the call, the HTTP status and at most
// an error_code that looks like one: never the answer's text, which would reach the job's status.
func TestErrorsLeaveTheAnswerOut(t *testing.T) {
	const secret = "AKIA-SECRET-XYZ"
	cases := []struct {
		name    string
		status  int
		body    string
		want    string
		retried bool
	}{
		{name: "MLflow's error JSON", status: 500, body: `{"error_code":"INTERNAL_ERROR","message":"` + secret + `"}`,
			want: "mlflow: GET experiments/get-by-name: HTTP 500 Internal Server Error (INTERNAL_ERROR)", retried: true},
		{name: "plain text", status: 404, body: "root:x:0:0 secret " + secret,
			want: "mlflow: GET experiments/get-by-name: HTTP 404 Not Found"},
		{name: "an error_code that is not one", status: 400, body: `{"error_code":"` + secret + `","message":"x"}`,
			want: "mlflow: GET experiments/get-by-name: HTTP 400 Bad Request"},
		{name: "a long error_code", status: 400, body: `{"error_code":"` + strings.Repeat("A", 65) + `"}`,
			want: "mlflow: GET experiments/get-by-name: HTTP 400 Bad Request"},
		{name: "a 2xx that is not MLflow's JSON", status: 200, body: "root:x:0:0 secret " + secret,
			want: "mlflow: GET experiments/get-by-name: HTTP 200: the answer is not MLflow's JSON"},
		{name: "a redirect, not followed", status: 302, body: secret,
			want: "mlflow: GET experiments/get-by-name: HTTP 302 Found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newRecorder(t, tc.status, tc.body)
			c := &mlflow.Client{BaseURL: s.URL, Attempts: 2, Backoff: time.Millisecond}
			_, err := c.GetExperimentByName(ctx, "x")
			if err == nil || containsAny(err.Error(), secret, "root:x") {
				t.Fatalf("error %v: want one without the answer", err)
			}
			if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if n, want := len(s.got()), map[bool]int{false: 1, true: 2}[tc.retried]; n != want {
				t.Errorf("%d requests, want %d", n, want)
			}
		})
	}
}

// TestRedirectsAreNotFollowed: a server that redirects elsewhere gets its 3xx as an error; the other
// address gets no request (and so neither the credentials).
func TestRedirectsAreNotFollowed(t *testing.T) {
	elsewhere := newRecorder(t, http.StatusOK, `{}`)
	s := httptest.NewServer(http.RedirectHandler(elsewhere.URL+"/internal", http.StatusTemporaryRedirect))
	defer s.Close()
	c := &mlflow.Client{BaseURL: s.URL, Attempts: 1, Authorization: "Bearer platform-token"}
	_, err := c.GetExperimentByName(ctx, "x")
	var e *mlflow.Error
	if !errors.As(err, &e) || e.Status != http.StatusTemporaryRedirect {
		t.Errorf("error %v, want a 307", err)
	}
	if reqs := elsewhere.got(); len(reqs) > 0 {
		t.Errorf("the redirect was followed: %v", reqs)
	}
}

// TestNoHTTPAnswer: a server that answers something that is not HTTP (Go's error would quote it) gives
// ErrNoHTTPAnswer without what it sent.
func TestNoHTTPAnswer(t *testing.T) {
	const secret = "root:x:0:0 secret AKIA-SECRET-XYZ"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(conn, secret+"\r\n\r\n")
			_ = conn.Close()
		}
	}()
	c := &mlflow.Client{BaseURL: "http://" + l.Addr().String(), Attempts: 1}
	_, err = c.GetExperimentByName(ctx, "x")
	if !errors.Is(err, mlflow.ErrNoHTTPAnswer) || containsAny(err.Error(), "root:x", "AKIA") {
		t.Errorf("error %v: want ErrNoHTTPAnswer without the answer", err)
	}
}
