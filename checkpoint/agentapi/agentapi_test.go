package agentapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestClientAcknowledgesWithTheToken: the operator's client carries the token it is given as a bearer
// token, and an agent with a token takes the acknowledgement only from it: without it or with another
// one the agent answers 401, calls nothing, and the client's error names the status but never a token.
// GET /status needs none.
func TestClientAcknowledgesWithTheToken(t *testing.T) {
	const token = "the-jobs-token"
	cases := []struct {
		name        string
		agentToken  string
		clientToken string
		wantAcked   []string
		wantErr     string // a part of the error; "" for none
	}{
		{name: "the job's token", agentToken: token, clientToken: token, wantAcked: []string{"s3://b/ml/a/checkpoint-epoch-3"}},
		{name: "no token", agentToken: token, wantErr: "401 Unauthorized"},
		{name: "another token", agentToken: token, clientToken: "another-token", wantErr: "401 Unauthorized"},
		{name: "an agent without a token takes one", clientToken: token, wantAcked: []string{"s3://b/ml/a/checkpoint-epoch-3"}},
		{name: "an agent without a token takes none", wantAcked: []string{"s3://b/ml/a/checkpoint-epoch-3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var acked []string
			var refused int
			mux := http.NewServeMux()
			Server{Status: func() Status { return Status{Latest: "s3://b/ml/a/checkpoint-epoch-3", LatestEpoch: 3} },
				Acknowledge: func(uri string) { acked = append(acked, uri) }, Token: tc.agentToken,
				Refused: func(*http.Request) { refused++ }}.Register(mux)
			srv := httptest.NewServer(mux)
			defer srv.Close()
			c := &Client{HTTP: srv.Client(), Timeout: 5 * time.Second}
			addr := strings.TrimPrefix(srv.URL, "http://")
			ctx := context.Background()

			st, err := c.Status(ctx, addr)
			if err != nil || st.LatestEpoch != 3 {
				t.Fatalf("GET /status without a token: %+v, %v", st, err)
			}
			err = c.AcknowledgeResumeFrom(ctx, addr, "s3://b/ml/a/checkpoint-epoch-3", tc.clientToken)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
				for _, secret := range []string{token, "another-token"} {
					if strings.Contains(gotErr, secret) {
						t.Errorf("the error %q shows a token", gotErr)
					}
				}
			}
			if (tc.wantErr == "") != (gotErr == "") || !strings.Contains(gotErr, tc.wantErr) {
				t.Errorf("error %q, want one with %q", gotErr, tc.wantErr)
			}
			wantRefused := 0
			if tc.wantErr != "" {
				wantRefused = 1
			}
			type outcome struct {
				Acked   []string
				Refused int
			}
			want, got := outcome{Acked: tc.wantAcked, Refused: wantRefused}, outcome{Acked: acked, Refused: refused}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("acknowledged, refused (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAuthorized: only "Bearer <token>" (the scheme in any case) passes an agent with a token; an agent
// without one lets all pass.
func TestAuthorized(t *testing.T) {
	cases := []struct {
		name   string
		token  string
		header []string // Authorization values sent
		want   bool
	}{
		{name: "the token", token: "t0k", header: []string{"Bearer t0k"}, want: true},
		{name: "the scheme in lower case", token: "t0k", header: []string{"bearer t0k"}, want: true},
		{name: "no header", token: "t0k", want: false},
		{name: "another token", token: "t0k", header: []string{"Bearer t0K"}, want: false},
		{name: "a prefix of the token", token: "t0k", header: []string{"Bearer t0"}, want: false},
		{name: "the token and more", token: "t0k", header: []string{"Bearer t0k "}, want: false},
		{name: "another scheme", token: "t0k", header: []string{"Basic t0k"}, want: false},
		{name: "the bare token", token: "t0k", header: []string{"t0k"}, want: false},
		{name: "the scheme alone", token: "t0k", header: []string{"Bearer"}, want: false},
		{name: "the token in a second header", token: "t0k", header: []string{"Bearer x", "Bearer t0k"}, want: false},
		{name: "no token configured", header: nil, want: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPut, ResumeFromPath, nil)
			for _, h := range tc.header {
				r.Header.Add("Authorization", h)
			}
			if diff := cmp.Diff(tc.want, Authorized(r, tc.token)); diff != "" {
				t.Errorf("Authorized (-want +got):\n%s", diff)
			}
		})
	}
}
