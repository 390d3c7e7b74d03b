package controllers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestReadEndpointFollowsNoRedirect: a rank 0 that answers with a redirect makes the operator read nothing
// else (before, the client followed it: another team's supervisor's figures landed in the attacker's
// status, and the message told one answer from another, a port scanner), and the error says only the code.
func TestReadEndpointFollowsNoRedirect(t *testing.T) {
	var read atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		read.Add(1)
		_, _ = w.Write([]byte("training_epoch 7\ntraining_loss 0.1\n"))
	}))
	defer other.Close()
	cases := []struct {
		name    string
		answer  func(w http.ResponseWriter, r *http.Request)
		wantErr string
	}{
		{name: "302 to another pod", answer: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/metrics", http.StatusFound)
		}, wantErr: "answered 302 Found"},
		{name: "307 to another pod", answer: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/metrics", http.StatusTemporaryRedirect)
		}, wantErr: "answered 307 Temporary Redirect"},
		{name: "a status line of its own", answer: func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(599)
			_, _ = w.Write([]byte("secret page"))
		}, wantErr: "answered 599 "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rank0 := httptest.NewServer(http.HandlerFunc(tc.answer))
			defer rank0.Close()
			r := &StatusReconciler{HTTP: endpointClient(time.Second), Timeout: 2 * time.Second}
			_, err := r.readEndpoint(context.Background(), rank0.URL+"/metrics")
			if err == nil || err.Error() != strings.TrimSpace(tc.wantErr) && !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
			if err != nil && (strings.Contains(err.Error(), other.URL) || strings.Contains(err.Error(), "secret")) {
				t.Errorf("the error echoes what it should not: %v", err)
			}
			if n := read.Load(); n != 0 {
				t.Errorf("the other server was read %d times", n)
			}
		})
	}
}
