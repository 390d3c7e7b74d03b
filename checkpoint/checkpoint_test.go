package checkpoint

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// objs builds a store listing: "c3" is a complete checkpoint-epoch-3 (model + marker), "i5" an
// incomplete checkpoint-epoch-5, each at t0 + epoch minutes.
func objs(root string, specs ...string) []Object {
	var out []Object
	for _, s := range specs {
		var epoch int
		fmt.Sscanf(s[1:], "%d", &epoch)
		at := t0.Add(time.Duration(epoch) * time.Minute)
		dir := root + "/" + Dir(epoch)
		out = append(out, Object{Key: dir + "/model.bin", Size: 100, Modified: at})
		if s[0] == 'c' {
			out = append(out, Object{Key: dir + "/" + Marker, Size: 10, Modified: at})
		}
	}
	return out
}

func names(cs []Checkpoint) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func TestScan(t *testing.T) {
	list := append(objs("ml/job", "c3", "i12", "c10"),
		Object{Key: "ml/job/.checkpoint-epoch-13.tmp/model.bin"}, Object{Key: "ml/job/notes.txt"},
		Object{Key: "ml/job/checkpoint-epoch-x/model.bin"}, Object{Key: "ml/other/checkpoint-epoch-1/_COMPLETE"},
		Object{Key: "ml/job/checkpoint-epoch-4"}, // a file, not a directory
	)
	got := Scan("ml/job/", list)
	want := []Checkpoint{
		{Name: "checkpoint-epoch-3", Dir: "ml/job/checkpoint-epoch-3", Epoch: 3, Complete: true, Size: 110,
			Time: t0.Add(3 * time.Minute),
			Keys: []string{"ml/job/checkpoint-epoch-3/_COMPLETE", "ml/job/checkpoint-epoch-3/model.bin"}},
		{Name: "checkpoint-epoch-10", Dir: "ml/job/checkpoint-epoch-10", Epoch: 10, Complete: true, Size: 110,
			Time: t0.Add(10 * time.Minute),
			Keys: []string{"ml/job/checkpoint-epoch-10/_COMPLETE", "ml/job/checkpoint-epoch-10/model.bin"}},
		{Name: "checkpoint-epoch-12", Dir: "ml/job/checkpoint-epoch-12", Epoch: 12, Size: 100, Time: t0.Add(12 * time.Minute),
			Keys: []string{"ml/job/checkpoint-epoch-12/model.bin"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if l, ok := Latest(got); !ok || l.Epoch != 10 {
		t.Errorf("Latest = %v, %v; want epoch 10 (12 is incomplete)", l.Name, ok)
	}
}

func TestPlan(t *testing.T) {
	now := t0.Add(24 * time.Hour)
	cases := []struct {
		name       string
		list       []Object
		policy     Policy
		now        time.Time
		keep, gone []string
	}{
		{name: "keep the newest 3", list: objs("r", "c1", "c2", "c3", "c4", "c5"), policy: Policy{Retention: 3}, now: now,
			keep: []string{"checkpoint-epoch-3", "checkpoint-epoch-4", "checkpoint-epoch-5"},
			gone: []string{"checkpoint-epoch-1", "checkpoint-epoch-2"}},
		{name: "retention 1", list: objs("r", "c1", "c2", "c3"), policy: Policy{Retention: 1}, now: now,
			keep: []string{"checkpoint-epoch-3"}, gone: []string{"checkpoint-epoch-1", "checkpoint-epoch-2"}},
		{name: "retention 0 still keeps the newest", list: objs("r", "c1", "c2"), policy: Policy{}, now: now,
			keep: []string{"checkpoint-epoch-2"}, gone: []string{"checkpoint-epoch-1"}},
		{name: "an incomplete newest one may still be written", list: objs("r", "c1", "c2", "i3"), policy: Policy{Retention: 1}, now: now,
			keep: []string{"checkpoint-epoch-2", "checkpoint-epoch-3"}, gone: []string{"checkpoint-epoch-1"}},
		{name: "only incomplete ones: nothing goes", list: objs("r", "i1", "i2"), policy: Policy{Retention: 1}, now: now,
			keep: []string{"checkpoint-epoch-1", "checkpoint-epoch-2"}, gone: nil},
		{name: "an abandoned partial write older than a complete one goes once stale", list: objs("r", "i1", "c2"),
			policy: Policy{Retention: 1, AbandonedAfter: time.Hour}, now: now,
			keep: []string{"checkpoint-epoch-2"}, gone: []string{"checkpoint-epoch-1"}},
		{name: "a partial write touched recently stays", list: objs("r", "i1", "c2"),
			policy: Policy{Retention: 1, AbandonedAfter: time.Hour}, now: t0.Add(30 * time.Minute),
			keep: []string{"checkpoint-epoch-1", "checkpoint-epoch-2"}, gone: nil},
		{name: "resumeFrom among the old ones is kept", list: objs("r", "c1", "c2", "c3", "c4"),
			policy: Policy{Retention: 2, Protect: []string{"s3://bucket/r/checkpoint-epoch-1/"}}, now: now,
			keep: []string{"checkpoint-epoch-1", "checkpoint-epoch-3", "checkpoint-epoch-4"}, gone: []string{"checkpoint-epoch-2"}},
		{name: "a protected one among the newest counts toward retention", list: objs("r", "c1", "c2", "c3", "c4"),
			policy: Policy{Retention: 2, Protect: []string{"/checkpoints/r/checkpoint-epoch-3"}}, now: now,
			keep: []string{"checkpoint-epoch-3", "checkpoint-epoch-4"}, gone: []string{"checkpoint-epoch-1", "checkpoint-epoch-2"}},
		{name: "a protect path that only shares a suffix does not protect", list: objs("r", "c1", "c2"),
			policy: Policy{Retention: 1, Protect: []string{"/x/checkpoint-epoch-11"}}, now: now,
			keep: []string{"checkpoint-epoch-2"}, gone: []string{"checkpoint-epoch-1"}},
		{name: "equal timestamps: epochs decide", list: equalTimes(objs("r", "c7", "c2", "c9")), policy: Policy{Retention: 2}, now: now,
			keep: []string{"checkpoint-epoch-7", "checkpoint-epoch-9"}, gone: []string{"checkpoint-epoch-2"}},
		{name: "epoch 10 sorts after epoch 9", list: objs("r", "c9", "c10"), policy: Policy{Retention: 1}, now: now,
			keep: []string{"checkpoint-epoch-10"}, gone: []string{"checkpoint-epoch-9"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			keep, gone := Plan(Scan("r", tc.list), tc.policy, tc.now)
			if diff := cmp.Diff(tc.keep, names(keep)); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.gone, names(gone)); diff != "" {
				t.Errorf("deleted (-want +got):\n%s", diff)
			}
		})
	}
}

func equalTimes(list []Object) []Object {
	for i := range list {
		list[i].Modified = t0
	}
	return list
}

func TestPlanThousands(t *testing.T) {
	var specs []string
	for e := 1; e <= 5000; e++ {
		specs = append(specs, fmt.Sprintf("c%d", e))
	}
	specs = append(specs, "i5001")
	keep, gone := Plan(Scan("r", objs("r", specs...)), Policy{Retention: 3, Protect: []string{"r/checkpoint-epoch-17"}}, t0)
	want := []string{
		"checkpoint-epoch-17", "checkpoint-epoch-4998", "checkpoint-epoch-4999", "checkpoint-epoch-5000", "checkpoint-epoch-5001",
	}
	if diff := cmp.Diff(want, names(keep)); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	if len(gone) != 4996 || gone[0].Epoch != 1 || gone[len(gone)-1].Epoch != 4997 {
		t.Errorf("deleted %d, from %d to %d", len(gone), gone[0].Epoch, gone[len(gone)-1].Epoch)
	}
}

func BenchmarkScanAndPlan10000(b *testing.B) {
	var specs []string
	for e := 1; e <= 10000; e++ {
		specs = append(specs, fmt.Sprintf("c%d", e))
	}
	list := objs("ml/job", specs...)
	b.ReportAllocs()
	for b.Loop() {
		Plan(Scan("ml/job", list), Policy{Retention: 3}, t0)
	}
}

// TestPreemptionCheckpoints: a checkpoint written at preemption (checkpoint-epoch-<E>-step-<S>) stands
// after epoch E's and before epoch E+1's: it is the newest until the next epoch ends, and rotation keeps
// the newest by position.
func TestPreemptionCheckpoints(t *testing.T) {
	at := func(name string, min int) []Object {
		d := "ml/job/" + name
		m := t0.Add(time.Duration(min) * time.Minute)
		return []Object{{Key: d + "/model.bin", Size: 100, Modified: m}, {Key: d + "/" + Marker, Size: 10, Modified: m}}
	}
	list := append(append(append(at(Dir(3), 3), at(StepDir(3, 3400), 4)...), at(Dir(2), 2)...), at(StepDir(3, 3050), 5)...)
	cps := Scan("ml/job", list)
	wantOrder := []string{"checkpoint-epoch-2", "checkpoint-epoch-3", "checkpoint-epoch-3-step-3050", "checkpoint-epoch-3-step-3400"}
	if diff := cmp.Diff(wantOrder, names(cps)); diff != "" {
		t.Errorf("Scan order (-want +got):\n%s", diff)
	}
	if l, _ := Latest(cps); l.Name != "checkpoint-epoch-3-step-3400" || l.Step != 3400 || l.Epoch != 3 {
		t.Errorf("Latest = %+v, want the one written at preemption", l)
	}
	keep, _ := Plan(cps, Policy{Retention: 2}, t0.Add(time.Hour))
	if diff := cmp.Diff([]string{"checkpoint-epoch-3-step-3050", "checkpoint-epoch-3-step-3400"}, names(keep)); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{a: "/c/checkpoint-epoch-3-step-3400", b: "/c/checkpoint-epoch-3", want: true},
		{a: "/c/checkpoint-epoch-4", b: "/c/checkpoint-epoch-3-step-3400", want: true},
		{a: "/c/checkpoint-epoch-3", b: "/c/checkpoint-epoch-3-step-1", want: false},
		{a: "s3://b/checkpoint-epoch-1", b: "", want: true},
		{a: "/c/checkpoint-epoch-3-step-x", b: "/c/checkpoint-epoch-1", want: false},
	} {
		if got := agentapi.Newer(c.a, c.b); got != c.want {
			t.Errorf("Newer(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
