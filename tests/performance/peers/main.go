// Command peer-bench measures the operator beside the operators users already know, in one run on the same
// machine: Kubeflow Trainer v2 on JobSet and Kubeflow Training Operator v1 (built by hack/peers.sh from their
// pinned Go modules), each on a fresh kube-apiserver + etcd (with an audit log) with kube-controller-manager's
// Job and garbage-collector controllers, and the same played scheduler and kubelet (tests/performance/peers/kubelet.go).
//
// For each operator, at its published client rate and at one tuned rate, and for each job count N it
// measures the same lifecycle of N jobs of 2 workers: time until every job's pods exist (wired) and its ratio
// to the same run's bare-write ceiling, submit → pods p50/p99 in the burst and idle, the whole lifecycle, the
// operator's API writes per lifecycle by kind (and kube-controller-manager's) from the audit log, its CPU
// seconds and peak RSS, and the time from one rank's failure to the job running all its workers again.
//
// With -ranks it measures our gang restart at scale instead: one job of R ranks, the failure of one rank
// until all R run again, split into its phases, beside a fresh start of the same size.
//
//	go run ./tests/performance/peers -peers "$(hack/peers.sh)" -jobs 100,1000 -out bin/peer-report
//	go run ./tests/performance/peers -ranks 8,64,256 -out bin/restart-report
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
)

const (
	ns = "bench"
	// clients is how many requests the bench sends at once (submitting, playing the kubelet).
	clients = 32
	// warmUp is how long a fresh kube-apiserver is left to finish starting before anything is measured (it
	// serves about 3x slower in its first seconds; see docs/benchmarks.md).
	warmUp = 10 * time.Second
)

type config struct {
	assets, manager, peers, out string
	jobs, ranks, kcmQPS         []int
	operators                   []string
	rates                       []string
	stopDelay                   time.Duration
	repeats                     int
	strategies                  []mlv1.RestartStrategy
}

func main() {
	c := config{}
	var jobs, ranks, ops, rates, kcm, strategies string
	flag.StringVar(&c.assets, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "control-plane binaries (hack/testbin.sh prints the directory)")
	flag.StringVar(&c.manager, "manager", "bin/manager", "the manager binary (make build)")
	flag.StringVar(&c.peers, "peers", "", "the peers' directory (hack/peers.sh prints it)")
	flag.StringVar(&jobs, "jobs", "", "job counts of the peer comparison (100,1000); empty: none")
	flag.StringVar(&ops, "operators", "trainingjob-operator,trainer,training-operator", "operators of the peer comparison")
	flag.StringVar(&rates, "rates", "published,tuned", "client rates of the peer comparison")
	flag.StringVar(&ranks, "ranks", "", "ranks of the gang-restart measurement (8,64,256); empty: none")
	flag.StringVar(&kcm, "kcm-qps", "20,200", "gang restart: kube-controller-manager client rates to measure at (20: its default)")
	flag.DurationVar(&c.stopDelay, "stop-delay", time.Second,
		"gang restart: how long the played kubelet takes to stop a deleted pod's containers")
	flag.StringVar(&strategies, "restart-strategies", "Recreate,InPlace", "gang restart: failurePolicy.restartStrategy values to measure")
	flag.IntVar(&c.repeats, "repeats", 2, "gang restart: restarts and fresh starts measured per size")
	flag.StringVar(&c.out, "out", "", "directory for report.json, report.md and the components' logs")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	var err error
	if jobs != "" {
		c.jobs, err = benchkit.Counts(jobs)
	}
	if err == nil && ranks != "" {
		c.ranks, err = benchkit.Counts(ranks)
	}
	if err == nil {
		c.kcmQPS, err = benchkit.Counts(kcm)
	}
	c.operators, c.rates = strings.Split(ops, ","), strings.Split(rates, ",")
	for _, s := range strings.Split(strategies, ",") {
		c.strategies = append(c.strategies, mlv1.RestartStrategy(s))
	}
	notOurs := func(o string) bool { return o != "trainingjob-operator" }
	if err == nil && len(c.jobs) > 0 && c.peers == "" && slices.ContainsFunc(c.operators, notOurs) {
		err = fmt.Errorf("-peers is required (hack/peers.sh builds them and prints the directory)")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer-bench:", err)
		os.Exit(2)
	}
	if err = run1(context.Background(), c); err != nil {
		fmt.Fprintln(os.Stderr, "peer-bench:", err)
		os.Exit(1)
	}
}

// report is everything measured, as report.json holds it.
type report struct {
	Machine  string          `json:"machine"`
	Peers    []peerResult    `json:"peers,omitempty"`
	Restarts []restartResult `json:"restarts,omitempty"`
}

func run1(ctx context.Context, c config) error {
	if c.out != "" {
		if err := os.MkdirAll(c.out, 0o755); err != nil {
			return err
		}
	}
	rep := report{Machine: machine()}
	for _, n := range c.jobs {
		for _, op := range operators() {
			if !slices.Contains(c.operators, op.key()) {
				continue
			}
			for _, rt := range []rate{op.published, tunedRate} {
				if !slices.Contains(c.rates, strings.Fields(rt.name)[0]) {
					continue
				}
				fmt.Fprintf(os.Stderr, "peer-bench: %s, %s, %d jobs\n", op.name, rt.name, n)
				res, err := measurePeer(ctx, c, op, rt, n)
				if err != nil { // reported in its row; the other runs go on
					res.Error = err.Error()
				}
				fmt.Fprintln(os.Stderr, res.row())
				rep.Peers = append(rep.Peers, res)
			}
		}
	}
	for _, qps := range c.kcmQPS {
		for _, ranks := range c.ranks {
			fmt.Fprintf(os.Stderr, "peer-bench: gang restart, %d ranks, kube-controller-manager at %d QPS\n", ranks, qps)
			if qps == 20 {
				qps = 0 // its default: 20, burst 30
			}
			res, err := measureRestart(ctx, c, ranks, qps)
			if err != nil {
				return fmt.Errorf("gang restart, %d ranks: %w", ranks, err)
			}
			rep.Restarts = append(rep.Restarts, res...)
		}
	}
	return benchkit.WriteReport(c.out, rep, rep.markdown())
}

// key names the operator in -operators.
func (o *operator) key() string {
	switch o.name {
	case ours().name:
		return "trainingjob-operator"
	case trainer().name:
		return "trainer"
	}
	return "training-operator"
}

func (rep report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Peer benchmark\n\n%s; times in seconds; per-lifecycle figures divide by the job count; "+
		"kube-controller-manager at its default client rate (20/30) unless tuned\n\n", rep.Machine)
	if len(rep.Peers) > 0 {
		b.WriteString("| operator | client rate | jobs | ceiling | wired | ratio | submit→pods p50 / p99 (burst) | idle p50 / p99 | " +
			"lifecycle | operator writes/lifecycle | kube-controller-manager writes/lifecycle | events/lifecycle | conflicts | " +
			"operator CPU s | peak RSS MiB | failure → all ranks Running p50 / p99 / max |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, p := range rep.Peers {
			b.WriteString(p.row() + "\n")
		}
		b.WriteString("\nOperator writes per lifecycle by kind:\n\n")
		for _, p := range rep.Peers {
			fmt.Fprintf(&b, "- %s, %s, %d jobs: %s\n", p.Operator, p.Rate, p.Jobs, byKind(p.WritesByKind))
		}
	}
	if len(rep.Restarts) > 0 {
		b.WriteString("\n" + restartTable(rep.Restarts))
	}
	return b.String()
}

func byKind(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// machine describes where the figures were measured.
func machine() string {
	cpus := 0
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		cpus = strings.Count(string(data), "processor\t:")
	}
	return fmt.Sprintf("%d CPUs, control plane, operators and bench on the same machine, %s", cpus, time.Now().UTC().Format("2006-01-02"))
}
