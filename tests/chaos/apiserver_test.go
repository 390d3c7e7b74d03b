package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// TestAPIServerRestarted: kube-apiserver is stopped for 5 s and started again (etcd kept) while jobs run,
// one of them through a gang restart. The operator reconnects by itself (its process never exits), every
// job ends correctly, and the writes the operator makes after the restart are counted for the report.
func TestAPIServerRestarted(t *testing.T) {
	ns := newNamespace(t)
	var tjs []*mlv1.TrainingJob
	for _, lc := range lifecycles[:2] {
		tjs = append(tjs, createJob(t, ns, lc))
	}
	time.Sleep(2 * time.Second) // mid-run
	before := writes(t)
	start := time.Now()
	if err := stack.Cluster.RestartAPIServer(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := waitReconciling(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	correct := 0
	for i, lc := range lifecycles[:2] {
		if checkJob(t, tjs[i], lc, metricsAddr) {
			correct++
		}
	}
	if exited, err := stack.OperatorExited(); exited {
		t.Errorf("the operator exited across the API server's restart: %v", err)
	}
	t.Logf("API server restart report: down 5 s; %d of %d jobs ended correctly; the operator (never restarted) made %d writes from the restart to the end of both jobs (%s)",
		correct, len(tjs), writes(t)-before, time.Since(start).Round(100*time.Millisecond))
}

// writes is the operator's count of API requests that write (POST, PUT, PATCH, DELETE), from client-go's
// rest_client_requests_total.
func writes(t *testing.T) int {
	t.Helper()
	body, err := scrapeMetrics()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "rest_client_requests_total{") {
			continue
		}
		for _, m := range []string{`method="POST"`, `method="PUT"`, `method="PATCH"`, `method="DELETE"`} {
			if strings.Contains(line, m) {
				n += lastInt(line)
			}
		}
	}
	return n
}

func lastInt(line string) int {
	f := strings.Fields(line)
	var v float64
	if _, err := fmt.Sscan(f[len(f)-1], &v); err != nil {
		return 0
	}
	return int(v)
}
