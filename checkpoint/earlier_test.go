package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
)

func TestEarlierRuns(t *testing.T) {
	// A checkpoint is a directory under the name's root; its marker's time tells the runs apart.
	type ckpt struct {
		dir      string // under ml/same
		complete bool
		age      time.Duration
	}
	tests := []struct {
		name  string
		ckpts []ckpt
		want  []string // the runs' newest complete checkpoints, under ml/same
	}{
		{name: "none", want: []string{}},
		{name: "only its own", ckpts: []ckpt{{dir: "uid-new/checkpoint-epoch-2", complete: true}}, want: []string{}},
		{name: "a run before run IDs and one with an ID, newest first",
			ckpts: []ckpt{
				{dir: "checkpoint-epoch-4", complete: true, age: 3 * time.Hour},
				{dir: "checkpoint-epoch-6", complete: true, age: 2 * time.Hour},
				{dir: "uid-a/checkpoint-epoch-2", complete: true, age: time.Hour},
				{dir: "uid-a/checkpoint-epoch-3", age: time.Hour}, // incomplete
				{dir: "uid-new/checkpoint-epoch-9", complete: true},
			},
			want: []string{"uid-a/checkpoint-epoch-2", "checkpoint-epoch-6"}},
		{name: "a run without a complete checkpoint is left out",
			ckpts: []ckpt{{dir: "uid-a/checkpoint-epoch-1", age: time.Hour}, {dir: "tensorboard/checkpoint-epoch-1-not", complete: true}},
			want:  []string{}},
		{name: "at most three, the newest",
			ckpts: []ckpt{
				{dir: "r1/checkpoint-epoch-1", complete: true, age: 4 * time.Hour},
				{dir: "r2/checkpoint-epoch-1", complete: true, age: 3 * time.Hour},
				{dir: "r3/checkpoint-epoch-1", complete: true, age: 2 * time.Hour},
				{dir: "r4/checkpoint-epoch-1", complete: true, age: time.Hour},
			},
			want: []string{"r4/checkpoint-epoch-1", "r3/checkpoint-epoch-1", "r2/checkpoint-epoch-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			store := DirStore{Root: t.TempDir()}
			now := time.Now()
			for _, c := range tt.ckpts {
				files := []string{"model.json"}
				if c.complete {
					files = append(files, Marker)
				}
				for _, f := range files {
					key := "ml/same/" + c.dir + "/" + f
					if err := store.Put(ctx, key, []byte("{}")); err != nil {
						t.Fatal(err)
					}
					if err := os.Chtimes(filepath.Join(store.Root, key), now.Add(-c.age), now.Add(-c.age)); err != nil {
						t.Fatal(err)
					}
				}
			}
			// Another name's checkpoints, never one of this name's runs.
			if err := store.Put(ctx, "ml/same-other/checkpoint-epoch-1/"+Marker, []byte("{}")); err != nil {
				t.Fatal(err)
			}
			runs, err := EarlierRuns(ctx, store, "ml/same", "uid-new")
			if err != nil {
				t.Fatal(err)
			}
			got := []string{}
			for _, r := range runs {
				got = append(got, r.Latest)
			}
			want := []string{}
			for _, w := range tt.want {
				want = append(want, store.URI("ml/same/"+w))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("earlier runs (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAgentReportsEarlierRuns: the agent names the earlier runs once it runs, and its final report (a
// termination message, of which the kubelet keeps 4 KiB) stays whole however long their names are.
func TestAgentReportsEarlierRuns(t *testing.T) {
	ctx := context.Background()
	store := DirStore{Root: t.TempDir()}
	for _, key := range []string{"ml/same/checkpoint-epoch-6/" + Marker, "ml/same/uid-new/checkpoint-epoch-1/" + Marker} {
		if err := store.Put(ctx, key, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	a := &Agent{Store: store, Root: "ml/same/uid-new", NameRoot: "ml/same", Policy: Policy{Retention: 1}}
	a.findEarlierRuns(ctx)
	st := a.SyncOnce(ctx)
	want := []agentapi.EarlierRun{{Latest: store.URI("ml/same/checkpoint-epoch-6"), LatestEpoch: 6}}
	if diff := cmp.Diff(want, st.EarlierRuns, cmpopts.IgnoreFields(agentapi.EarlierRun{}, "LastTime")); diff != "" {
		t.Errorf("earlier runs (-want +got):\n%s", diff)
	}
	if st.Latest != store.URI("ml/same/uid-new/checkpoint-epoch-1") {
		t.Errorf("latest %q, want its own run's", st.Latest)
	}

	long := make([]agentapi.EarlierRun, 3)
	for i := range long {
		long[i].Latest = "/checkpoints/" + string(make([]byte, 1500)) + "/checkpoint-epoch-1"
	}
	st.EarlierRuns = long
	a.TerminationLog = filepath.Join(t.TempDir(), "termination-log")
	if err := a.writeTerminationLog(st); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(a.TerminationLog)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > maxTerminationMessage {
		t.Errorf("the final report is %d bytes, over the kubelet's %d", len(data), maxTerminationMessage)
	}
}
