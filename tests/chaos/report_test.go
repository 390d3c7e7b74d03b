package chaos

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// faultRow is what the suite did and saw for one kind of fault: the rows of the Reliability table.
type faultRow struct {
	kind, recovery     string // the fault, and what its recovery time measures
	iterations, faults int
	jobs, correct      int
	recoveries         []time.Duration
}

var (
	reportMu sync.Mutex
	rows     []*faultRow
)

// record adds one iteration of a fault kind to the report: faults injected, jobs run and how many ended
// correctly (every invariant of checkJob held: nothing lost or duplicated), and the recovery times.
func record(kind, recovery string, faults, jobs, correct int, recoveries ...time.Duration) {
	reportMu.Lock()
	defer reportMu.Unlock()
	i := slices.IndexFunc(rows, func(r *faultRow) bool { return r.kind == kind })
	if i < 0 {
		rows = append(rows, &faultRow{kind: kind, recovery: recovery})
		i = len(rows) - 1
	}
	r := rows[i]
	r.iterations++
	r.faults += faults
	r.jobs += jobs
	r.correct += correct
	r.recoveries = append(r.recoveries, recoveries...)
}

// reliabilityTable returns the report as a Markdown table, the format of docs/reliability.md.
func reliabilityTable() string {
	reportMu.Lock()
	defer reportMu.Unlock()
	var b strings.Builder
	b.WriteString("| fault | iterations | faults injected | jobs | ended correctly | lost or duplicated | " +
		"recovery p50 | recovery p99 | recovery measured as |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		p50, p99 := "-", "-"
		if len(r.recoveries) > 0 {
			p50 = percentile(r.recoveries, 50).Round(10 * time.Millisecond).String()
			p99 = percentile(r.recoveries, 99).Round(10 * time.Millisecond).String()
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %s | %s | %s |\n",
			r.kind, r.iterations, r.faults, r.jobs, r.correct, r.jobs-r.correct, p50, p99, r.recovery)
	}
	fmt.Fprintf(&b, "\nCheckpoints kept beyond retention (an acknowledgement missed while the operator was down; safe): %d. "+
		"Finished jobs whose status.checkpoint stayed empty because their only report of a checkpoint came in the final report "+
		"of a pod that was gone before the operator came back (safe: nothing deleted, the run had ended): %d.\n",
		extraKept.Load(), missedFinalReports.Load())
	return b.String()
}

// printReport prints the table and writes it to CHAOS_REPORT when that is set.
func printReport() {
	table := reliabilityTable()
	fmt.Print("\nReliability report\n\n" + table)
	if path := os.Getenv("CHAOS_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: writing the report:", err)
		}
	}
}

// repeats returns how many times the single-fault scenarios (API server restart, leader loss, node loss)
// run: CHAOS_REPEATS, default 1.
func repeats() int { return envInt("CHAOS_REPEATS", 1) }
