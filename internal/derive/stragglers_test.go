package derive

import (
	"testing"

	"k8s.io/utils/ptr"
)

// TestStragglers: which ranks a stall names.
func TestStragglers(t *testing.T) {
	at := func(rank string, step float64) RankProgress {
		return RankProgress{Rank: rank, Pod: "j-worker-" + rank, Node: "n" + rank, Step: ptr.To(step), Epoch: ptr.To(3.0)}
	}
	for _, tc := range []struct {
		name  string
		ranks []RankProgress
		want  string
	}{
		{
			name:  "one behind",
			ranks: []RankProgress{at("0", 180), at("2", 120), at("1", 180)},
			want:  "ranks holding the run back: behind the others (rank 0, rank 1 at step 180): rank 2 (pod j-worker-2 on node n2) at step 120",
		},
		{
			name:  "one silent",
			ranks: []RankProgress{at("0", 180), {Rank: "1", Pod: "j-worker-1", Node: "n1", Err: "connection refused"}},
			want:  "ranks holding the run back: not answering: rank 1 (pod j-worker-1 on node n1): connection refused",
		},
		{
			name:  "one that never stepped",
			ranks: []RankProgress{{Rank: "0", Pod: "p0", Node: "n0"}, at("1", 1)},
			want:  "ranks holding the run back: reporting no step yet: rank 0 (pod p0 on node n0)",
		},
		{name: "all equal", ranks: []RankProgress{at("0", 50), at("1", 50)}, want: "every rank reports step 50: none is behind"},
		{
			name:  "epochs only",
			ranks: []RankProgress{{Rank: "0", Pod: "p0", Node: "n0", Epoch: ptr.To(4.0)}, {Rank: "1", Pod: "p1", Epoch: ptr.To(3.0)}},
			want:  "ranks holding the run back: behind the others (rank 0 at epoch 4): rank 1 (pod p1 on node <none>) at epoch 3",
		},
		{name: "nothing reported", ranks: []RankProgress{{Rank: "0", Pod: "p0", Err: "timeout"}}, want: ""},
	} {
		if got := Stragglers(tc.ranks); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
