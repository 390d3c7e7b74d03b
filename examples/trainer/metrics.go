package main

import (
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
)

// progress is what rank 0 exposes in the Prometheus text format at /metrics on METRICS_PORT. The names
// are the ones the operator reads (see "Progress from rank 0" in docs/monitoring.md).
type progress struct {
	mu     sync.Mutex
	values map[string]float64
}

var help = map[string]string{
	"training_epoch":        "Epochs completed.",
	"training_epochs_total": "Epochs the run will train.",
	"training_step": "Optimizer steps this rank has done its part of " +
		"(its gradient computed; the all-reduce may still wait for others).",
	"training_steps_total":        "Optimizer steps the run will take.",
	"training_loss":               "Training loss after the last epoch.",
	"training_accuracy":           "Training accuracy after the last epoch, 0 to 1.",
	"training_learning_rate":      "Current learning rate.",
	"training_samples_per_second": "Samples processed per second over the last epoch, all ranks.",
	"training_checkpoint_epoch":   "Epoch of the newest complete checkpoint.",
	"training_world_size":         "Number of ranks.",
}

func (p *progress) set(name string, v float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.values[name] = v
}

func (p *progress) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	names := make([]string, 0, len(p.values))
	for n := range p.values {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n%s %g\n", n, help[n], n, n, p.values[n])
	}
	p.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write([]byte(b.String()))
}

// serveProgress starts the /metrics endpoint on addr.
func serveProgress(addr string) (*progress, error) {
	p := &progress{values: map[string]float64{}}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", p)
	go func() { _ = http.Serve(l, mux) }()
	return p, nil
}
