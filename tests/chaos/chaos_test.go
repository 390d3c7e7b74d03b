// Package chaos kills the real operator (bin/manager, its own process) with SIGKILL at random moments of
// TrainingJob lifecycles on the local stack (real etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, process nodes running the example trainer) and checks that every job still ends as it
// would have: nothing duplicated, no restart counted twice or lost, no protected checkpoint deleted.
//
// `make test` runs one short round; `make chaos` runs CHAOS_ROUNDS rounds (CHAOS_SEED replays one).
package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/trainingjob-operator/trainingjob-operator/internal/local"
	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

var (
	stack       *local.Stack
	metricsAddr string
)

func TestMain(m *testing.M) {
	var err error
	if metricsAddr, err = freeAddr(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
	code := stacktest.Main(m, "chaos", &stack, func(o *local.Options, bin string) {
		o.MetricsAddr, o.ManagerBinary, o.AsServiceAccount = metricsAddr, filepath.Join(bin, "manager"), true
	})
	printReport()
	os.Exit(code)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// config is a chaos run's size: CHAOS_ROUNDS rounds (default 1), CHAOS_KILLS kills per round (default 3),
// CHAOS_SEED to replay a run.
type config struct {
	rounds, kills int
	seed          uint64
}

func loadConfig(t *testing.T) config {
	c := config{rounds: envInt("CHAOS_ROUNDS", 1), kills: envInt("CHAOS_KILLS", 3), seed: uint64(time.Now().UnixNano())}
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED: %v", err)
		}
		c.seed = n
	}
	t.Logf("chaos: %d rounds, %d operator kills each, seed %d (replay: CHAOS_SEED=%d)", c.rounds, c.kills, c.seed, c.seed)
	return c
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// killer SIGKILLs the operator kills times at random moments within window, restarting it after a
// random pause, and returns how long each restarted operator took to reconcile again.
func killer(t *testing.T, rng *rand.Rand, kills int, window time.Duration) []time.Duration {
	var recoveries []time.Duration
	for i := 0; i < kills; i++ {
		time.Sleep(time.Duration(rng.Int64N(int64(window) / int64(kills))))
		stack.KillOperator()
		time.Sleep(time.Duration(rng.Int64N(int64(time.Second))))
		start := time.Now()
		if err := stack.StartOperator(); err != nil {
			t.Fatalf("restarting the operator: %v", err)
		}
		if err := waitReconciling(2 * time.Minute); err != nil {
			t.Fatalf("the restarted operator: %v", err)
		}
		recoveries = append(recoveries, time.Since(start))
	}
	return recoveries
}

// waitReconciling waits until the operator's /metrics shows a finished reconcile of the JobController.
func waitReconciling(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		n, err := reconciles(metricsAddr)
		if n > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no reconcile after %s (last error %v)", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// reconciles returns how many JobController reconciles the manager at addr has finished.
func reconciles(addr string) (int, error) {
	return counter(addr, "trainingjob_reconciliation_total", map[string]string{"controller": "trainingjob"})
}

// counter sums the series of a counter on the /metrics of the manager at addr whose labels include match.
func counter(addr, name string, match map[string]string) (int, error) {
	token, err := scraperToken()
	if err != nil {
		return 0, err
	}
	families, err := benchkit.Metrics(addr, token)
	if err != nil {
		return 0, err
	}
	return int(benchkit.Sum(families, name, match)), nil
}

// scrapeMetrics reads the operator's /metrics.
func scrapeMetrics() (string, error) { return scrapeOperator(metricsAddr) }

// scrapeOperator reads the /metrics of the operator process at addr as a cluster's Prometheus does: over
// HTTPS, with the token of a ServiceAccount bound to the metrics reader (the manager, running as its own
// ServiceAccount, reviews it with the API server).
func scrapeOperator(addr string) (string, error) {
	token, err := scraperToken()
	if err != nil {
		return "", err
	}
	code, body, err := benchkit.Fetch(context.Background(), benchkit.MetricsURL(addr, true), token)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("GET /metrics: %d %s", code, body)
	}
	return body, err
}

// scraperToken is the suite's scraper's token, made once (the first scrape; the stack runs by then).
var scraperToken = sync.OnceValues(func() (string, error) {
	return testenv.ScraperToken(context.Background(), stack.Client, "monitoring", "prometheus", true)
})

// percentile returns the p-th percentile (0-100) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, (len(s)*p+99)/100-1)]
}
