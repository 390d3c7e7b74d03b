// Package integration tests the TrainingJob API and the operator against a real kube-apiserver and etcd
// and, for the lifecycle, the real kube-controller-manager.
package integration

import (
	"fmt"
	"os"
	"testing"

	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration tests cannot start:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping control plane:", err)
	}
	os.Exit(code)
}
