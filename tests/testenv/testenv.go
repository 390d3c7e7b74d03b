// Package testenv starts a real kube-apiserver and etcd (controller-runtime's envtest) with the
// TrainingJob CRD installed, and optionally the real kube-controller-manager, for integration tests.
//
// The binaries are built from pinned Go modules by hack/testbin.sh; KUBEBUILDER_ASSETS names their
// directory. When they are missing the tests fail: they never skip.
package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/trainingjob-operator/trainingjob-operator/controllers"
)

// Env is a running control plane.
type Env struct {
	Env    *envtest.Environment
	Config *rest.Config
	Client client.Client
	assets string
}

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Assets is the directory of the control-plane binaries, from KUBEBUILDER_ASSETS.
func Assets() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		return "", fmt.Errorf("KUBEBUILDER_ASSETS is not set: run the tests with `make test`, which builds the control plane with hack/testbin.sh")
	}
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("control-plane binary %s missing in KUBEBUILDER_ASSETS=%s (run hack/testbin.sh): %w", b, dir, err)
		}
	}
	return dir, nil
}

// Start starts etcd and kube-apiserver with the CRDs of deploy/crd installed.
func Start() (*Env, error) {
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	e := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "deploy", "crd")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := e.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: controllers.NewScheme()})
	if err == nil {
		err = applyPolicies(c)
	}
	if err != nil {
		_ = e.Stop()
		return nil, err
	}
	return &Env{Env: e, Config: cfg, Client: c, assets: assets}, nil
}

// applyPolicies installs the ValidatingAdmissionPolicies of deploy/policy, as `kubectl apply -k deploy/` does.
func applyPolicies(c client.Client) error {
	files, err := filepath.Glob(filepath.Join(RepoRoot(), "deploy", "policy", "*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range files {
		objs, err := ReadObjects(f)
		if err != nil {
			return err
		}
		for _, u := range objs {
			if err := c.Create(context.Background(), u); err != nil {
				return fmt.Errorf("installing %s %s: %w", u.GetKind(), u.GetName(), err)
			}
		}
	}
	return nil
}

// ReadObjects reads every object of a (multi-document) YAML file.
func ReadObjects(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// Stop stops the control plane.
func (e *Env) Stop() error { return e.Env.Stop() }
