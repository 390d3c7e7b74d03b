package controllers_test

import (
	"context"
	"testing"
	"time"

	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/cluster"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

// TestRestartRuleServed: on a real API server, the dry run finds the RestartAllContainers rule kept where
// the feature is on (Kubernetes 1.36's default) and not where its gate is off (the operator then recreates
// every gang, and each restart says why: builders.InPlaceUnavailable).
func TestRestartRuleServed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane: make test runs it, make unit (go test -short) does not")
	}
	for _, tc := range []struct {
		name  string
		gates string
		want  bool
	}{
		{name: "the default", want: true},
		{name: "RestartAllContainersOnContainerExits off", gates: "RestartAllContainersOnContainerExits=false", want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, err := testenv.Start(func(o *cluster.Options) { o.Bare, o.APIServerFeatureGates = true, tc.gates })
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = env.Stop() }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			served, err := controllers.RestartRuleServed(ctx, env.Client)
			if tc.want && err != nil || served != tc.want {
				t.Errorf("RestartRuleServed = %t, %v; want %t", served, err, tc.want)
			}
		})
	}
}
