package main

import (
	"context"
	"net/http"
	"strings"
	"testing"

	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

// checkMetricsAccess: with its default settings the manager serves /metrics over HTTPS, and the real API
// server's answers to its TokenReviews and SubjectAccessReviews decide who reads them: no token (or one the
// API server does not know) gets 401, a ServiceAccount that may not get /metrics 403, one bound to the
// metrics-reader ClusterRole of deploy/rbac the series. TestManagerRuns calls it once the manager serves.
func checkMetricsAccess(t *testing.T, ctx context.Context, env *testenv.Env, addr, reader string) {
	t.Helper()
	other, err := testenv.ScraperToken(ctx, env.Client, "team-a", "notebook", false)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, token string
		want        int
	}{
		{name: "no token", token: "", want: http.StatusUnauthorized},
		{name: "a token the API server does not know", token: "not-a-token", want: http.StatusUnauthorized},
		{name: "another tenant's ServiceAccount", token: other, want: http.StatusForbidden},
		{name: "a ServiceAccount bound to the metrics reader", token: reader, want: http.StatusOK},
	}
	for _, tc := range cases {
		code, body, err := benchkit.Fetch(ctx, benchkit.MetricsURL(addr, true), tc.token)
		if err != nil {
			t.Errorf("%s: GET https://%s/metrics: %v", tc.name, addr, err)
			continue
		}
		if code != tc.want || (code == http.StatusOK) != strings.Contains(body, "trainingjob_") {
			t.Errorf("%s: GET /metrics: %d, want %d (body %.200q)", tc.name, code, tc.want, body)
		}
	}
}
