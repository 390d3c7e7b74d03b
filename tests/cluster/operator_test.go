//go:build cluster

package cluster

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/internal/local/realnode"
	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

// operatorPod returns the running pod of the operator the chart installed.
func operatorPod(t *testing.T) corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := stack.Client.List(context.Background(), pods, client.InNamespace(operatorNamespace)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p
		}
	}
	t.Fatalf("no running operator pod in %s (%d pods)", operatorNamespace, len(pods.Items))
	return corev1.Pod{}
}

// TestInClusterOperator: the operator the Helm chart installed runs as a pod on a real node in a namespace
// that enforces Pod Security "restricted", as the image's non-root user, ready by its probes, with its
// ServiceAccount's token (the only identity it has: every other test's TrainingJob is its work), and
// leads through its Lease.
func TestInClusterOperator(t *testing.T) {
	p := operatorPod(t)
	node := &corev1.Node{}
	err := stack.Client.Get(context.Background(), client.ObjectKey{Name: p.Spec.NodeName}, node)
	if err != nil || node.Labels[realnode.RealNodeLabel] != "true" {
		t.Errorf("the operator runs on %q, not a real node (%v)", p.Spec.NodeName, err)
	}
	ready := false
	for _, c := range p.Status.Conditions {
		ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
	}
	if !ready {
		t.Errorf("the operator's pod is not Ready: %+v", p.Status.Conditions)
	}
	if p.Spec.ServiceAccountName != "trainingjob-operator" {
		t.Errorf("serviceAccountName %q", p.Spec.ServiceAccountName)
	}
	mounted := false
	for _, c := range p.Spec.Containers {
		for _, m := range c.VolumeMounts {
			mounted = mounted || m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount"
		}
	}
	if !mounted {
		t.Errorf("no ServiceAccount token mounted: %+v", p.Spec.Containers[0].VolumeMounts)
	}
	var id string
	for _, cs := range p.Status.ContainerStatuses {
		id = cs.ContainerID
	}
	status := procFile(t, stack.RealNodes[p.Spec.NodeName], id, "status")
	if !strings.Contains(status, "\nUid:\t65532\t65532\t65532\t65532\n") {
		t.Errorf("the operator's process is not the image's user 65532:\n%s", status)
	}
	lease := &coordinationv1.Lease{}
	leaseKey := client.ObjectKey{Namespace: operatorNamespace, Name: "trainingjob-operator.ml.example.com"}
	if err := stack.Client.Get(context.Background(), leaseKey, lease); err != nil {
		t.Fatal(err)
	}
	if holder := ptrString(lease.Spec.HolderIdentity); !strings.HasPrefix(holder, p.Name) {
		t.Errorf("the Lease is held by %q, not the operator's pod %s", holder, p.Name)
	}
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestInClusterMetrics: the installed operator serves its metrics over HTTPS on its pod's address, as a
// ServiceMonitor's Prometheus scrapes them: with its own ServiceAccount it asks the API server about each
// scraper, so no token is 401 and a ServiceAccount bound to the chart's metrics reader gets the series.
func TestInClusterMetrics(t *testing.T) {
	ctx := context.Background()
	addr := net.JoinHostPort(operatorPod(t).Status.PodIP, "8443")
	token, err := testenv.ScraperToken(ctx, stack.Client, "monitoring", "prometheus", true)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token string
		want  int
	}{
		{token: "", want: http.StatusUnauthorized},
		{token: token, want: http.StatusOK},
	} {
		code, body, err := benchkit.Fetch(ctx, benchkit.MetricsURL(addr, true), tc.token)
		// The controllers' series are there from the start, whether or not a TrainingJob exists.
		served := strings.Contains(body, `controller_runtime_active_workers{controller="trainingjob"}`)
		if err != nil || code != tc.want || (code == http.StatusOK) != served {
			t.Errorf("GET https://%s/metrics (token %t): %d %v, want %d (body %.200q)",
				addr, tc.token != "", code, err, tc.want, body)
		}
	}
}
