package supervisor

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/recognize"
)

// TestAppendProgress: only the series the recogniser has values for, as gauges, numbers as Go's
// shortest representation.
func TestAppendProgress(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		name string
		p    recognize.Progress
		want string
	}{
		{name: "nothing", p: recognize.Progress{}, want: ""},
		{
			name: "some",
			p:    recognize.Progress{Epoch: f(1), TotalEpochs: f(3), Fraction: f(0.25), LearningRate: f(1e-05)},
			want: "# HELP training_epoch Epoch the program printed last.\n# TYPE training_epoch gauge\ntraining_epoch 1\n" +
				"# HELP training_epochs_total Epochs the program plans.\n# TYPE training_epochs_total gauge\ntraining_epochs_total 3\n" +
				"# HELP training_progress_ratio Fraction of the run done, 0 to 1.\n" +
				"# TYPE training_progress_ratio gauge\n" +
				"training_progress_ratio 0.25\n" +
				"# HELP training_learning_rate Learning rate the program printed last.\n" +
				"# TYPE training_learning_rate gauge\n" +
				"training_learning_rate 1e-05\n",
		},
		{
			name: "named metrics, escaped",
			p: recognize.Progress{Epoch: f(13), Loss: f(0.25514), Metrics: []recognize.NamedMetric{{Name: "eval-logloss", Value: 0.25627},
				{Name: `odd "name" \ é`, Value: -1.5e-07}, {Name: "train-logloss", Value: 0.25514}}},
			want: "# HELP training_epoch Epoch the program printed last.\n# TYPE training_epoch gauge\ntraining_epoch 13\n" +
				"# HELP training_loss Loss the program printed last.\n# TYPE training_loss gauge\ntraining_loss 0.25514\n" +
				"# HELP trainingjob_output_metric A figure the program printed under its own name (label name).\n" +
				"# TYPE trainingjob_output_metric gauge\n" +
				"trainingjob_output_metric{name=\"eval-logloss\"} 0.25627\n" +
				"trainingjob_output_metric{name=\"odd \\\"name\\\" \\\\ é\"} -1.5e-07\n" +
				"trainingjob_output_metric{name=\"train-logloss\"} 0.25514\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, string(appendProgress(nil, tt.p))); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOutputSeries: the output series are always there when the output is piped, the format once a line
// was recognised; none when it is not piped (a terminal).
func TestOutputSeries(t *testing.T) {
	tests := []struct {
		name   string
		piped  bool
		format string
		want   string
	}{
		{name: "terminal", piped: false, want: ""},
		{
			name: "piped", piped: true, format: "tqdm",
			want: "# HELP trainingjob_output_bytes_total Bytes the program wrote to stdout and stderr.\n" +
				"# TYPE trainingjob_output_bytes_total counter\n" +
				"trainingjob_output_bytes_total 1234\n" +
				"# HELP trainingjob_output_lines_total Non-empty lines (ended by a newline or carriage return) the program wrote.\n" +
				"# TYPE trainingjob_output_lines_total counter\n" +
				"trainingjob_output_lines_total 5\n" +
				"# HELP trainingjob_output_recognized_lines_total Lines that showed progress.\n" +
				"# TYPE trainingjob_output_recognized_lines_total counter\n" +
				"trainingjob_output_recognized_lines_total 2\n" +
				"# HELP trainingjob_output_unread_bytes_total Bytes passed through but not read for progress: " +
				"the program wrote faster than they could be.\n" +
				"# TYPE trainingjob_output_unread_bytes_total counter\n" +
				"trainingjob_output_unread_bytes_total 0\n" +
				"# HELP trainingjob_output_idle_seconds Seconds since the program last wrote, or since it started.\n" +
				"# TYPE trainingjob_output_idle_seconds gauge\n" +
				"trainingjob_output_idle_seconds 2.5\n" +
				"# HELP trainingjob_output_format Format of the last line that showed progress.\n" +
				"# TYPE trainingjob_output_format gauge\n" +
				"trainingjob_output_format{format=\"tqdm\"} 1\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMonitor("", tt.piped)
			m.bytes.Store(1234)
			m.lines.Store(5)
			m.recognized.Store(2)
			m.lastOutput.Store(int64(500 * time.Millisecond))
			m.format = tt.format
			got := string(m.AppendMetrics(nil, m.start.Add(3*time.Second)))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
		})
	}
}

// TestServer: GET /metrics in the text format's content type, GET /healthz "ok", other methods refused.
func TestServer(t *testing.T) {
	srv := httptest.NewServer(newServer(newMonitor("", true), nil, newFairConns(maxConns, maxConnsPerSource)).Handler)
	defer srv.Close()
	tests := []struct {
		name, method, path string
		wantStatus         int
		wantType           string
		wantBody           string
	}{
		{name: "metrics", method: "GET", path: "/metrics", wantStatus: 200, wantType: contentType},
		{name: "healthz", method: "GET", path: "/healthz", wantStatus: 200, wantType: "text/plain; charset=utf-8", wantBody: "ok"},
		{name: "post", method: "POST", path: "/metrics", wantStatus: 405},
		{name: "elsewhere", method: "GET", path: "/", wantStatus: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if tt.wantType != "" && resp.Header.Get("Content-Type") != tt.wantType {
				t.Errorf("Content-Type %q, want %q", resp.Header.Get("Content-Type"), tt.wantType)
			}
			if tt.wantBody != "" && string(body) != tt.wantBody {
				t.Errorf("body %q, want %q", body, tt.wantBody)
			}
		})
	}
}
