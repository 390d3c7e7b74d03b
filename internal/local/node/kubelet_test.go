package node

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestServeLogsPerRun: a container's log file holds its runs appended; the endpoint serves the current run's
// part (previous: the run before it), and a follow ends when the container's run ends, as the kubelet's do.
func TestServeLogsPerRun(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "pods", "ns_p_uid", "logs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	first, second := "run 1\n", "run 2\n"
	if err := os.WriteFile(filepath.Join(dir, "trainer.log"), []byte(first+second), 0o644); err != nil {
		t.Fatal(err)
	}
	run := &podRun{key: types.NamespacedName{Namespace: "ns", Name: "p"}}
	run.logStarted("trainer", 0)
	run.logStarted("trainer", int64(len(first)))
	run.status.ContainerStatuses = []corev1.ContainerStatus{{Name: "trainer",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}}
	n := &Node{opts: Options{DataRoot: root}, runs: map[types.UID]*podRun{"uid": run}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", n.serveLogs)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	tests := []struct {
		name, query, want string
	}{
		{name: "current run", query: "", want: second},
		{name: "previous run", query: "?previous=true", want: first},
		{name: "follow of an ended run ends", query: "?follow=true", want: second},
		{name: "unknown container: whole file", query: "", want: first + second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			container := "trainer"
			if tt.name == "unknown container: whole file" {
				container = "other"
				if err := os.WriteFile(filepath.Join(dir, "other.log"), []byte(first+second), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/containerLogs/ns/p/"+container+tt.query, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			got, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("reading the log (a follow that did not end?): %v", err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("log (-want +got):\n%s", diff)
			}
		})
	}
}
