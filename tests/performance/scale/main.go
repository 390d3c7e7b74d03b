// Command scale-bench measures how the operator copes with many TrainingJobs at once, on a fresh real
// kube-apiserver + etcd (with an audit log) and the real manager binary as its own process, against the
// bare-write ceiling of the same API server in the same run.
//
// For each job count N it measures: the ceiling (a plain client creating the N Jobs, Services and
// ConfigMaps the operator would, 32 at a time); the wiring of N TrainingJobs submitted at once until each
// has its Job, Service, ConfigMap and a state, as a ratio to the ceiling; submit → Job latency (burst, and
// idle afterwards); a full lifecycle of every job (the bench plays Kubernetes' Job controller and the kubelet:
// one Running pod, then Succeeded and the Job Complete) and its throughput; the operator's writes per
// lifecycle by kind from the audit log, cross-checked with its own client metrics; conflicts and errors
// logged; writes while idle; heap and RSS per job; and a cold start (the manager restarted with N
// finished jobs): time until every job was reconciled and the writes it caused.
//
//	go run ./tests/performance/scale -manager bin/manager -jobs 1,100,1000 -repeats 2 -out bin/scale-report
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
	repeats              int
	idle                 time.Duration
	runningIdle          time.Duration
	managerArgs          []string
	// checkpoints gives every job checkpoints (in S3, read through the bench's agent stand-in).
	checkpoints bool
}

func main() {
	c := config{}
	var jobs, args string
	flag.StringVar(&c.assets, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "control-plane binaries (hack/testbin.sh prints the directory)")
	flag.StringVar(&c.manager, "manager", "bin/manager", "the manager binary (make build)")
	flag.StringVar(&jobs, "jobs", "1,100,1000", "job counts to measure")
	flag.IntVar(&c.repeats, "repeats", 2, "measurements per job count, each on a fresh control plane")
	flag.DurationVar(&c.idle, "idle", 20*time.Second, "how long the finished jobs are watched for writes")
	flag.DurationVar(&c.runningIdle, "running-idle", 0,
		"how long the running jobs, whose figures do not change, are watched for writes before they finish (0: not)")
	flag.StringVar(&args, "manager-args", "", "extra manager flags, space-separated (e.g. --max-concurrent-reconciles=1)")
	flag.BoolVar(&c.checkpoints, "checkpoints", false,
		"jobs with checkpoints enabled: adds the CheckpointController's writes (RESUME_FROM, status.checkpoint)")
	flag.StringVar(&c.out, "out", "", "directory for report.json, report.md and the manager's CPU and heap profiles")
	flag.Parse()
	var err error
	if c.jobs, err = benchkit.Counts(jobs); err != nil {
		fmt.Fprintln(os.Stderr, "scale-bench:", err)
		os.Exit(2)
	}
	c.managerArgs = strings.Fields(args)
	ctrl.SetLogger(logr.Discard())
	if err = run(context.Background(), c); err != nil {
		fmt.Fprintln(os.Stderr, "scale-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) error {
	if c.checkpoints {
		stop, err := serveAgent()
		if err != nil {
			return err
		}
		defer stop()
	}
	if c.out != "" {
		if err := os.MkdirAll(c.out, 0o755); err != nil {
			return err
		}
	}
	var results []result
	for _, n := range c.jobs {
		for r := 1; r <= c.repeats; r++ {
			fmt.Fprintf(os.Stderr, "scale-bench: %d jobs, run %d of %d\n", n, r, c.repeats)
			res, err := measure(ctx, c, n, r)
			if err != nil {
				return fmt.Errorf("%d jobs, run %d: %w", n, r, err)
			}
			fmt.Fprintln(os.Stderr, res.row())
			results = append(results, res)
		}
	}
	return benchkit.WriteReport(c.out, results, table(c, results))
}

// table returns the readable report: one row per run.
func table(c config, rs []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Scale benchmark\n\nmanager flags: %q; checkpoints: %t; times in seconds; per-job figures divide by the job count\n\n",
		c.managerArgs, c.checkpoints)
	b.WriteString("| jobs | run | ceiling | submitted | wired | ratio | submit→Job p50 / p99 (burst) | idle p50 / p99 | lifecycle | " +
		"jobs/s | writes/lifecycle | status writes | events | conflicts | errors logged | idle writes | running idle writes/job/min | " +
		"heap KiB/job | RSS KiB/job | " +
		"cold start | cold writes |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		b.WriteString(r.row() + "\n")
	}
	return b.String()
}
