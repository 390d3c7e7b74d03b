package checkpoint

import (
	"context"
	"sort"
	"strings"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
)

// MaxEarlierRuns bounds how many earlier runs a report names: the newest.
const MaxEarlierRuns = 3

// EarlierRuns returns the newest complete checkpoint of each earlier run under nameRoot, the runs of a job's
// name ([prefix/]<namespace>/<name>): each directory <nameRoot>/<run> other than own, and the checkpoints
// directly under nameRoot (a job created before run IDs). Newest first, at most MaxEarlierRuns; runs
// without a complete checkpoint are left out.
func EarlierRuns(ctx context.Context, s Store, nameRoot, own string) ([]agentapi.EarlierRun, error) {
	nameRoot = strings.Trim(nameRoot, "/")
	objs, err := s.List(ctx, nameRoot+"/")
	if err != nil {
		return nil, err
	}
	byRun := map[string][]Object{}
	for _, o := range objs {
		rest, ok := strings.CutPrefix(o.Key, nameRoot+"/")
		first, _, found := strings.Cut(rest, "/")
		if !ok || !found || first == own {
			continue
		}
		if _, isCheckpoint := agentapi.PositionOf(first); isCheckpoint {
			first = "" // the layout before run IDs
		}
		byRun[first] = append(byRun[first], o)
	}
	var runs []Checkpoint
	for run, objs := range byRun {
		root := nameRoot
		if run != "" {
			root += "/" + run
		}
		if l, ok := Latest(Scan(root, objs)); ok {
			runs = append(runs, l)
		}
	}
	sort.Slice(runs, func(i, j int) bool {
		if !runs[i].Time.Equal(runs[j].Time) {
			return runs[i].Time.After(runs[j].Time)
		}
		return runs[i].Dir < runs[j].Dir
	})
	out := make([]agentapi.EarlierRun, 0, min(len(runs), MaxEarlierRuns))
	for _, c := range runs[:min(len(runs), MaxEarlierRuns)] {
		out = append(out, agentapi.EarlierRun{Latest: s.URI(c.Dir), LatestEpoch: c.Epoch, LastTime: c.Time})
	}
	return out, nil
}
