package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
)

// operatorWrites reads the audit log for the writes the operator's user made between from and to.
func (b *bench) operatorWrites(from, to time.Time) (benchkit.Writes, error) {
	return benchkit.AuditWrites(filepath.Join(b.dir, "audit.log"), from, to, func(u string) bool { return u == operatorUser })
}

// countWrites puts the lifecycle's writes per job into res: from the audit log, and from the manager's
// own client metric (successful and conflicting writes, events included) as a cross-check, plus the
// errors the manager logged.
func (b *bench) countWrites(res *result) error {
	w, err := b.operatorWrites(time.Time{}, time.Now())
	if err != nil {
		return err
	}
	n := float64(b.n)
	res.Writes, res.StatusWrites, res.Events, res.Conflicts = float64(w.Total)/n, float64(w.Status)/n, float64(w.Events)/n, w.Conflicts
	res.WritesByKind = map[string]float64{}
	for k, v := range w.ByKind {
		res.WritesByKind[k] = float64(v) / n
	}
	m, err := benchkit.Metrics(b.metrics, "")
	if err != nil {
		return err
	}
	var client float64
	for _, verb := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		client += benchkit.Sum(m, "rest_client_requests_total", map[string]string{"method": verb, "code": "2*"})
		client += benchkit.Sum(m, "rest_client_requests_total", map[string]string{"method": verb, "code": "409"})
	}
	res.ClientWrites = client / n
	res.ErrorsLogged, err = countErrors(filepath.Join(b.dir, fmt.Sprintf("manager-%d.log", b.runs)))
	return err
}

// countErrors counts the ERROR lines of a manager's log.
func countErrors(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "\tERROR\t") || strings.Contains(line, `"level":"error"`) {
			n++
		}
	}
	return n, nil
}

// keyOf returns the key of a bench namespace object.
func keyOf(name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
