package derive

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// RankProgress is what one rank's progress endpoint said when the run stalled.
type RankProgress struct {
	Rank, Pod, Node string
	// Step and Epoch are what the rank reported, nil when it reports none.
	Step, Epoch *float64
	// Err says why the endpoint did not answer; "" when it did.
	Err string
}

// Stragglers returns a description of the ranks that hold a stalled run back: in data-parallel training
// every rank waits in the same collective, so a rank whose step (else epoch) is behind the most advanced
// rank's, or whose endpoint does not answer, is the one to look at. "" when no rank reports a step or an
// epoch.
func Stragglers(ranks []RankProgress) string {
	sort.SliceStable(ranks, func(i, j int) bool { return rankNumber(ranks[i].Rank) < rankNumber(ranks[j].Rank) })
	unit, value := "step", func(r RankProgress) *float64 { return r.Step }
	if !anyRank(ranks, func(r RankProgress) bool { return r.Step != nil }) {
		unit, value = "epoch", func(r RankProgress) *float64 { return r.Epoch }
	}
	var best *float64
	for _, r := range ranks {
		if v := value(r); v != nil && (best == nil || *v > *best) {
			best = v
		}
	}
	var behind, silent, none, ahead []string
	for _, r := range ranks {
		where := fmt.Sprintf("rank %s (pod %s on node %s)", r.Rank, r.Pod, orNone(r.Node))
		switch v := value(r); {
		case r.Err != "":
			silent = append(silent, where+": "+r.Err)
		case v == nil:
			none = append(none, where)
		case *v < *best:
			behind = append(behind, fmt.Sprintf("%s at %s %s", where, unit, num(*v)))
		default:
			ahead = append(ahead, "rank "+r.Rank)
		}
	}
	if best == nil {
		return ""
	}
	var parts []string
	if len(behind) > 0 {
		parts = append(parts, fmt.Sprintf("behind the others (%s at %s %s): %s",
			strings.Join(ahead, ", "), unit, num(*best), strings.Join(behind, ", ")))
	}
	if len(none) > 0 {
		parts = append(parts, fmt.Sprintf("reporting no %s yet: %s", unit, strings.Join(none, ", ")))
	}
	if len(silent) > 0 {
		parts = append(parts, "not answering: "+strings.Join(silent, ", "))
	}
	if len(parts) == 0 {
		return fmt.Sprintf("every rank reports %s %s: none is behind", unit, num(*best))
	}
	return "ranks holding the run back: " + strings.Join(parts, "; ")
}

func anyRank(rs []RankProgress, f func(RankProgress) bool) bool {
	for _, r := range rs {
		if f(r) {
			return true
		}
	}
	return false
}

func rankNumber(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 1 << 30
	}
	return n
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
