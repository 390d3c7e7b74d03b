//go:build cluster

// Package cluster is the end-to-end suite on real nodes: the local stack with real kubelets, containerd
// and runc (package local/realnode), the cluster DNS, and images built from this repository (package
// local/images). Every case runs real containers. make test-cluster runs it (root, Linux).
package cluster

import (
	"fmt"
	"os"
	"testing"

	"github.com/trainingjob-operator/trainingjob-operator/local"
	"github.com/trainingjob-operator/trainingjob-operator/local/images"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

var stack *local.Stack

// realNodes is how many real nodes the suite runs.
const realNodes = 2

func TestMain(m *testing.M) {
	assets := os.Getenv("NODE_ASSETS")
	if assets == "" {
		fmt.Fprintln(os.Stderr, "cluster: NODE_ASSETS is not set: run make test-cluster (hack/node.sh installs and builds the node's parts)")
		os.Exit(1)
	}
	tars, err := images.Build(testenv.RepoRoot(), images.CacheDir())
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
	os.Exit(stacktest.Main(m, "cluster", &stack, func(o *local.Options, _ string) {
		o.RealNodes, o.NodeAssets, o.Images = realNodes, assets, tars
	}))
}
