// Package testenv starts a real kube-apiserver and etcd with the TrainingJob CRD and policies installed
// (package cluster, on controller-runtime's envtest), and optionally the real kube-controller-manager,
// for integration tests.
//
// The binaries are built from pinned Go modules by hack/testbin.sh; KUBEBUILDER_ASSETS names their
// directory. When they are missing the tests fail: they never skip.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/cluster"
)

// Env is a running control plane with an admin client.
type Env struct {
	*cluster.Cluster
	Client client.Client
	dir    string
}

// RepoRoot returns the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// BuildWorkerTools builds the example trainer and the manager (whose checkpoint-agent subcommand is the
// agent sidecar) into dir/bin, for the process nodes' PATH, and returns that directory.
func BuildWorkerTools(dir string) (string, error) {
	bin := filepath.Join(dir, "bin")
	build := exec.Command("go", "build", "-o", bin+"/", "./examples/trainer", "./cmd/manager", "./cmd/supervisor")
	build.Dir, build.Stdout, build.Stderr = RepoRoot(), os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building the example trainer and the manager: %w", err)
	}
	return bin, nil
}

// Assets returns the directory of the control-plane binaries, from KUBEBUILDER_ASSETS.
func Assets() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		return "", fmt.Errorf("KUBEBUILDER_ASSETS is not set: run the tests with `make test`, " +
			"which builds the control plane with hack/testbin.sh")
	}
	return dir, nil
}

// KueueAssets returns the directory of the Kueue manager and its CRDs, from KUEUE_ASSETS.
func KueueAssets() (string, error) {
	dir := os.Getenv("KUEUE_ASSETS")
	if dir == "" {
		return "", fmt.Errorf("KUEUE_ASSETS is not set: run the tests with `make test`, which builds the Kueue manager with hack/kueue.sh")
	}
	return dir, nil
}

// Start starts etcd and kube-apiserver with the CRD and policies of deploy/ installed; options change the
// cluster's (cluster.Options.Bare leaves the API out).
func Start(options ...func(*cluster.Options)) (*Env, error) {
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "trainingjob-testenv-")
	if err != nil {
		return nil, err
	}
	opts := cluster.Options{Assets: assets, Dir: dir}
	for _, o := range options {
		o(&opts)
	}
	c, err := cluster.Start(opts)
	if err != nil {
		return nil, err
	}
	cl, err := client.New(c.Config, client.Options{Scheme: controllers.NewScheme()})
	if err != nil {
		_ = c.Stop()
		return nil, err
	}
	return &Env{Cluster: c, Client: cl, dir: dir}, nil
}

// Stop stops the control plane and removes its files.
func (e *Env) Stop() error {
	err := e.Cluster.Stop()
	_ = os.RemoveAll(e.dir)
	return err
}
