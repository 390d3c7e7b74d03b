package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// TestAPIServerRestarted: kube-apiserver is stopped for 5 s and started again (etcd kept) while jobs run,
// one of them through a gang restart. The operator reconnects by itself (its process never exits), every
// job ends correctly, and the writes the operator makes after the restart are counted for the report.
func TestAPIServerRestarted(t *testing.T) {
	for i := 0; i < repeats(); i++ {
		t.Run(fmt.Sprint(i), restartAPIServerMidRun)
	}
}

func restartAPIServerMidRun(t *testing.T) {
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
	back := time.Now()
	recovered, err := waitStatusChange(tjs, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("API server restart timeline: stopped and started again in %s; first TrainingJob status change %s after it serves again",
		back.Sub(start).Round(100*time.Millisecond), recovered.Sub(back).Round(100*time.Millisecond))
	correct := 0
	for i, lc := range lifecycles[:2] {
		if checkJob(t, tjs[i], lc, metricsAddr) {
			correct++
		}
	}
	if exited, err := stack.OperatorExited(); exited {
		t.Errorf("the operator exited across the API server's restart: %v", err)
	}
	record("API server restarted mid-run (etcd kept)", "serving again → first TrainingJob status write",
		1, len(tjs), correct, recovered.Sub(back))
	t.Logf("API server restart report: down 5 s; %d of %d jobs ended correctly; "+
		"the operator (never restarted) made %d writes from the restart to the end of both jobs (%s)",
		correct, len(tjs), writes(t)-before, time.Since(start).Round(100*time.Millisecond))
}

// writes returns the operator's count of API requests that wrote (POST, PUT, PATCH, DELETE answered 2xx; not
// those refused while the API server was down), from client-go's rest_client_requests_total.
func writes(t *testing.T) int {
	t.Helper()
	n := 0
	for _, method := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		m, err := counter(metricsAddr, "rest_client_requests_total", map[string]string{"method": method, "code": "2*"})
		if err != nil {
			t.Fatal(err)
		}
		n += m
	}
	return n
}

// waitStatusChange waits until the status of one of tjs differs from what it was when called (the operator
// wrote it) and returns when it saw that.
func waitStatusChange(tjs []*mlv1.TrainingJob, timeout time.Duration) (time.Time, error) {
	ctx := context.Background()
	versions := map[string]string{}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, tj := range tjs {
			got := &mlv1.TrainingJob{}
			if err := stack.Client.Get(ctx, client.ObjectKeyFromObject(tj), got); err != nil {
				continue // the API server is still starting
			}
			if v, seen := versions[tj.Name]; !seen {
				versions[tj.Name] = got.ResourceVersion
			} else if v != got.ResourceVersion {
				return time.Now(), nil
			}
		}
	}
	return time.Time{}, fmt.Errorf("no TrainingJob changed within %s of the API server's restart", timeout)
}
