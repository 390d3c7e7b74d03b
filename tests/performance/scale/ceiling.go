package main

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
)

// ceilingNS holds the ceiling's objects, apart from the jobs'.
const ceilingNS = "ceiling"

// ceiling returns the bare-write ceiling of this API server: how long a plain client takes to create the
// Job, Service and ConfigMap the operator builds for each of n jobs, clients at a time. The objects carry
// no operator label, so the manager's caches never hold them.
func (b *bench) ceiling(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	err := benchkit.Parallel(b.n, clients, func(i int) error {
		tj := trainingJob(i, b.c.checkpoints)
		tj.Namespace = ceilingNS
		tj.Default() // as the operator reads it
		cm, err := builders.ConfigMap(tj, builders.Options{})
		if err != nil {
			return err
		}
		for _, o := range []client.Object{builders.Job(tj, builders.Options{}), builders.Service(tj), cm} {
			o.SetLabels(nil)
			if err := b.k.Create(ctx, o); err != nil {
				return err
			}
		}
		return nil
	})
	return time.Since(start), err
}
