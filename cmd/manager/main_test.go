package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func get(ctx context.Context, url string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(body), err
}

// TestManagerRuns starts the manager binary's run function against a real API server: probes answer,
// the metrics endpoint serves controller-runtime's series to an allowed scraper only (checkMetricsAccess),
// a TrainingJob in the watched namespace is reconciled, and cancelling stops it cleanly. (One manager per
// test binary: controller-runtime refuses a second controller of the same name in a process.)
func TestManagerRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane: make test runs it, make unit (go test -short) does not")
	}
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	metrics, probes := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	args := []string{"--metrics-bind-address=" + metrics, "--health-probe-bind-address=" + probes,
		"--watch-namespaces=default", "--zap-log-level=error", "--default-image-pytorch=torch:test"}
	go func() { done <- run(ctx, args, func() *rest.Config { return env.Config }) }()
	token, err := testenv.ScraperToken(ctx, env.Client, "monitoring", "prometheus", true)
	if err != nil {
		t.Fatal(err)
	}

	tj := tjtest.NewTJ("default", "smoke").Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		last = check(ctx, env.Client, probes, metrics, token)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("manager not serving: %v", last)
	}
	checkMetricsAccess(t, ctx, env, metrics, token)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run() = %v, want nil after cancel", err)
	}
}

func check(ctx context.Context, c client.Client, probes, metrics, token string) error {
	for _, p := range []string{"/healthz", "/readyz"} {
		if _, err := get(ctx, "http://"+probes+p); err != nil {
			return err
		}
	}
	code, body, err := benchkit.Fetch(ctx, benchkit.MetricsURL(metrics, true), token)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("GET /metrics: %d %s", code, body)
	}
	if err != nil {
		return err
	}
	for _, want := range []string{
		`controller_runtime_reconcile_total{controller="trainingjob"`, `controller_runtime_reconcile_total{controller="trainingjob-status"`,
		`trainingjob_reconciliation_total{controller="trainingjob",result=`, `trainingjob_total{namespace="default",state="Initializing"} 1`,
		`trainingjob_created_total{namespace="default"}`, `trainingjob_reconciliation_duration_seconds_bucket`,
	} {
		if !strings.Contains(body, want) {
			return fmt.Errorf("metrics lack %s", want)
		}
	}
	tj := &mlv1.TrainingJob{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "smoke"}, tj); err != nil {
		return err
	}
	if tj.Status.State != mlv1.StateInitializing {
		return fmt.Errorf("state %q, want Initializing", tj.Status.State)
	}
	return nil
}
