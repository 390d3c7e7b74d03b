// Package e2e runs TrainingJobs end to end on the local stack: a real kube-apiserver, etcd,
// kube-controller-manager and kube-scheduler, two process nodes that run pods as local processes, the
// operator, the real Kueue manager, and the example trainer built from examples/trainer.
package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

var (
	stack *local.Stack
	// gcs is the GCS emulator every pod reaches through STORAGE_EMULATOR_HOST, as pods on GKE reach GCS.
	gcs *fakestorage.Server
	// operatorMetrics is the address of the operator's /metrics.
	operatorMetrics string
)

func TestMain(m *testing.M) {
	var err error
	gcs, err = fakestorage.NewServerWithOptions(fakestorage.Options{Scheme: "http", Host: "127.0.0.1", Port: 0})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	if operatorMetrics, err = freeAddr(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	kueueAssets, err := testenv.KueueAssets()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	code := stacktest.Main(m, "e2e", &stack, func(o *local.Options, _ string) {
		o.NodeEnv = map[string]string{"STORAGE_EMULATOR_HOST": gcs.URL()}
		o.MetricsAddr = operatorMetrics
		o.Kueue = kueueAssets // the real Kueue manager (kueue_test.go); the other tests queue nothing
	})
	gcs.Stop()
	os.Exit(code)
}

// freeAddr returns a loopback address with a port free now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// TestKubeconfig: the kubeconfig the stack writes works for a client of its own, as kubectl uses it.
func TestKubeconfig(t *testing.T) {
	cfg, err := clientcmd.BuildConfigFromFlags("", stack.Cluster.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: controllers.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	nodes := &corev1.NodeList{}
	if err := c.List(context.Background(), nodes); err != nil {
		t.Fatal(err)
	}
	if err := c.List(context.Background(), &mlv1.TrainingJobList{}); err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 2 {
		t.Errorf("%d nodes, want the 2 process nodes", len(nodes.Items))
	}
}
