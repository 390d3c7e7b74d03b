// Package bench holds what the benchmark commands (tests/performance/progress, tests/performance/scale) share: free
// ports, a bounded parallel loop, quantiles, reading a manager's /metrics and a process's CPU time.
package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// FreeAddr returns a free loopback address.
func FreeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Parallel runs f(0..n-1) on workers goroutines and returns the first error.
func Parallel(n, workers int, f func(int) error) error {
	var next atomic.Int64
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Quantiles returns the p50, p99 and max of d, rounded to the millisecond.
func Quantiles(d []time.Duration) [3]time.Duration {
	if len(d) == 0 {
		return [3]time.Duration{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))].Round(time.Millisecond) }
	return [3]time.Duration{at(0.5), at(0.99), s[len(s)-1].Round(time.Millisecond)}
}

// Metrics reads the series a manager serves at addr/metrics: over HTTPS with the token (its default), or
// over plain HTTP without one (a manager with --metrics-insecure-http).
func Metrics(addr, token string) (map[string]*dto.MetricFamily, error) {
	code, body, err := Fetch(context.Background(), MetricsURL(addr, token != ""), token)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("GET %s/metrics: %d %s", addr, code, strings.TrimSpace(body))
	}
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(strings.NewReader(body))
}

// MetricsURL returns a manager's metrics URL at addr, HTTPS when secure.
func MetricsURL(addr string, secure bool) string {
	if secure {
		return "https://" + addr + "/metrics"
	}
	return "http://" + addr + "/metrics"
}

// Fetch GETs url as the ServiceMonitor does (the bearer token unless empty; the manager's self-signed
// certificate not verified) and returns the status code and the body.
func Fetch(ctx context.Context, url, token string) (int, string, error) {
	hc := http.Client{Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed, as in the ServiceMonitor
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp.StatusCode, string(body), err
}

// Sum adds the values (gauge, counter or untyped) of a family's series whose labels include every pair
// of match.
func Sum(families map[string]*dto.MetricFamily, name string, match map[string]string) float64 {
	f, ok := families[name]
	if !ok {
		return 0
	}
	var sum float64
	for _, m := range f.GetMetric() {
		if !hasLabels(m, match) {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, match map[string]string) bool {
	found := 0
	for _, l := range m.GetLabel() {
		v, ok := match[l.GetName()]
		prefix := strings.HasSuffix(v, "*") && strings.HasPrefix(l.GetValue(), strings.TrimSuffix(v, "*"))
		if ok && (v == l.GetValue() || prefix) {
			found++
		}
	}
	return found == len(match)
}

// ProcCPU returns the user+system CPU time of a process, from /proc (clock ticks of 10 ms).
func ProcCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// Counts parses a comma-separated list of positive job counts ("1,100,1000").
func Counts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad job count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}
