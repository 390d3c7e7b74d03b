// Package e2e runs TrainingJobs end to end on the local stack: a real kube-apiserver, etcd,
// kube-controller-manager and kube-scheduler, two process nodes that run pods as local processes, the
// operator, and the example trainer built from examples/trainer.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/local"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

var (
	stack *local.Stack
	// gcs is the GCS emulator every pod reaches through STORAGE_EMULATOR_HOST, as pods on GKE reach GCS.
	gcs *fakestorage.Server
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	assets, err := testenv.Assets()
	if err != nil {
		return 1, err
	}
	dir, err := os.MkdirTemp("", "trainingjob-e2e-")
	if err != nil {
		return 1, err
	}
	bin, err := testenv.BuildWorkerTools(dir)
	if err != nil {
		return 1, err
	}
	logFile, err := os.Create(filepath.Join(dir, "stack.log"))
	if err != nil {
		return 1, err
	}
	defer logFile.Close()
	gcs, err = fakestorage.NewServerWithOptions(fakestorage.Options{Scheme: "http", Host: "127.0.0.1", Port: 0})
	if err != nil {
		return 1, err
	}
	defer gcs.Stop()
	stack, err = local.Up(context.Background(), local.Options{
		NodeEnv: map[string]string{"STORAGE_EMULATOR_HOST": gcs.URL()},
		Assets:  assets, Dir: dir, Nodes: 2, Path: []string{bin}, WorkDir: testenv.RepoRoot(),
		RestartBackoff: time.Second, ProgressInterval: 300 * time.Millisecond, CheckpointInterval: 300 * time.Millisecond, Log: zap.New(zap.WriteTo(logFile), zap.Level(zapcore.InfoLevel)),
	})
	if err != nil {
		return 1, err
	}
	code := m.Run()
	if err := stack.Down(); err != nil {
		return 1, err
	}
	if code == 0 {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Fprintln(os.Stderr, "e2e: logs of the stack and the pods are kept in", dir)
	}
	return code, nil
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
