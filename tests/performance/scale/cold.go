package main

import (
	"context"
	"fmt"
	"time"

	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
)

// coldStart kills the manager (SIGKILL) and starts a new one with every job finished: how long until the
// JobController has reconciled each job once, and the writes it made in the first 10 s.
func (b *bench) coldStart(ctx context.Context, res *result) error {
	b.mgr.Kill()
	from := time.Now()
	if err := b.startManager(ctx); err != nil {
		return err
	}
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		m, err := benchkit.Metrics(b.metrics, "")
		if err == nil && benchkit.Sum(m, "controller_runtime_reconcile_total", map[string]string{"controller": "trainingjob"}) >= float64(b.n) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cold start: the job controller did not reconcile %d jobs within 5 minutes", b.n)
		}
	}
	res.ColdStartS = time.Since(from).Seconds()
	time.Sleep(10 * time.Second)
	w, err := b.operatorWrites(from, time.Now())
	res.ColdStartWrites = w.Total
	return err
}

// idleSubmissions submits count jobs one at a time on the otherwise idle system, 200 ms apart, and
// returns the p50 and p99 from submission to Job.
func (b *bench) idleSubmissions(ctx context.Context, count int) ([2]float64, error) {
	for i := b.n; i < b.n+count; i++ {
		if err := b.submit(ctx, i); err != nil {
			return [2]float64{}, err
		}
		time.Sleep(200 * time.Millisecond)
	}
	wired := func(j *jobSeen) bool { return j.wired() || j.state == "Completed" }
	if _, err := b.seen.wait(time.Minute, "idle submissions wired", wired); err != nil {
		return [2]float64{}, err
	}
	return b.seen.submitToJob(b.n, b.n+count), nil
}
