// Command progress-bench measures how fast rank 0's progress reaches the operator's gauges and the
// TrainingJob status, on a real kube-apiserver with the real manager binary as a separate process.
//
// For each job count it starts a fresh control plane and the manager, serves one rank-0 endpoint per
// job, makes every job Running (a pod with the endpoint's address), then changes each job's epoch at a
// random moment within one interval, several rounds, and reports: the time from the change to the gauge
// on the manager's /metrics and to .status (p50, p99, max), status writes per job per minute, scrapes
// per job per interval, and the manager's CPU time per scrape.
//
//	go run ./tests/performance/progress -manager bin/manager -jobs 100,1000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
)

type config struct {
	assets, manager, out string
	jobs                 []int
	rounds               int
	interval             time.Duration
	// sustain is how long every job's figure changes at every interval after the rounds (0: not measured),
	// under the manager's --status-write-qps statusQPS (0: its default).
	sustain   time.Duration
	statusQPS float64
}

func main() {
	c := config{}
	var jobs string
	flag.StringVar(&c.assets, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "control-plane binaries (hack/testbin.sh prints the directory)")
	flag.StringVar(&c.manager, "manager", "bin/manager", "the manager binary (make build)")
	flag.StringVar(&jobs, "jobs", "100,1000", "job counts to measure")
	flag.IntVar(&c.rounds, "rounds", 4, "measured changes per job (0: none, only -sustain's phase)")
	flag.DurationVar(&c.interval, "interval", 5*time.Second, "the manager's --progress-interval")
	flag.StringVar(&c.out, "out", "", "write the report here too")
	flag.DurationVar(&c.sustain, "sustain", 0, "after the rounds, change every job's figure at every interval for this long and "+
		"report the status writes per second and each job's longest wait for a status write (0: skip)")
	flag.Float64Var(&c.statusQPS, "status-write-qps", 0, "the manager's --status-write-qps (0: its default; negative: no budget)")
	flag.Parse()
	var err error
	if c.jobs, err = benchkit.Counts(jobs); err != nil {
		fmt.Fprintln(os.Stderr, "progress-bench:", err)
		os.Exit(2)
	}
	ctrl.SetLogger(logr.Discard())
	if err = run(context.Background(), c); err != nil {
		fmt.Fprintln(os.Stderr, "progress-bench:", err)
		os.Exit(1)
	}
}

func qpsWords(q float64) string {
	switch {
	case q == 0:
		return "default"
	case q < 0:
		return "none (no budget)"
	}
	return fmt.Sprint(q)
}

func run(ctx context.Context, c config) error {
	var report strings.Builder
	fmt.Fprintf(&report, "# Progress benchmark\n\ninterval %s, %d rounds per job; latencies from a metric change at rank 0\n\n",
		c.interval, c.rounds)
	fmt.Fprintln(&report, "| jobs | gauge p50 | gauge p99 | gauge max | status p50 | status p99 | status max | "+
		"status writes/job/min | scrapes/job/interval | manager CPU/scrape |")
	fmt.Fprintln(&report, "|---|---|---|---|---|---|---|---|---|---|")
	var sustained []string
	for _, n := range c.jobs {
		fmt.Fprintf(os.Stderr, "progress-bench: %d jobs\n", n)
		r, err := measure(ctx, c, n)
		if err != nil {
			return fmt.Errorf("%d jobs: %w", n, err)
		}
		if c.rounds > 0 {
			fmt.Fprintln(&report, r.row(n))
		}
		if c.sustain > 0 {
			sustained = append(sustained, r.sustained.row(n))
		}
	}
	if c.sustain > 0 {
		fmt.Fprintf(&report, "\nSustained: every job's figure changes every %s for %s; --status-write-qps %s\n\n", c.interval, c.sustain,
			qpsWords(c.statusQPS))
		fmt.Fprintln(&report, "| jobs | status writes/s | wanted writes/s | longest wait for a write p50 | p99 | max | jobs never written | "+
			"reads of rank 0/job/interval | manager heap MiB |")
		fmt.Fprintln(&report, "|---|---|---|---|---|---|---|---|---|")
		fmt.Fprintln(&report, strings.Join(sustained, "\n"))
	}
	fmt.Print(report.String())
	if c.out != "" {
		return os.WriteFile(c.out, []byte(report.String()), 0o644)
	}
	return nil
}
