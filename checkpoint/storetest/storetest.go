// Package storetest is the conformance suite every checkpoint store passes: the same behaviour on a
// directory, S3 and GCS, against real servers.
package storetest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
)

// Run runs the suite; newStore gives an empty store for each subtest.
func Run(t *testing.T, newStore func(t *testing.T) checkpoint.Store) {
	ctx := context.Background()
	t.Run("put, get, list under a prefix, delete", func(t *testing.T) {
		s := newStore(t)
		put(t, s, "ml/a/checkpoint-epoch-1/model.bin", "weights")
		put(t, s, "ml/a/checkpoint-epoch-1/_COMPLETE", "{}")
		put(t, s, "ml/ab/checkpoint-epoch-1/model.bin", "other job")
		got, err := s.Get(ctx, "ml/a/checkpoint-epoch-1/model.bin")
		if err != nil || string(got) != "weights" {
			t.Fatalf("Get = %q, %v", got, err)
		}
		if diff := cmp.Diff([]string{"ml/a/checkpoint-epoch-1/_COMPLETE", "ml/a/checkpoint-epoch-1/model.bin"}, keys(t, s, "ml/a/")); diff != "" {
			t.Errorf("List(ml/a/) (-want +got):\n%s", diff)
		}
		objs, _ := s.List(ctx, "ml/a/")
		for _, o := range objs {
			if o.Modified.IsZero() || time.Since(o.Modified) > time.Hour || o.Size == 0 {
				t.Errorf("object %+v lacks size or time", o)
			}
		}
		if err := s.Delete(ctx, []string{
			"ml/a/checkpoint-epoch-1/model.bin", "ml/a/checkpoint-epoch-1/_COMPLETE", "ml/a/never-there",
		}); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if got := keys(t, s, "ml/a/"); len(got) != 0 {
			t.Errorf("after Delete: %v", got)
		}
		if got := keys(t, s, "ml/ab/"); len(got) != 1 {
			t.Errorf("a neighbour prefix was touched: %v", got)
		}
		if _, err := s.Get(ctx, "ml/a/checkpoint-epoch-1/model.bin"); err == nil {
			t.Errorf("Get of a deleted key succeeded")
		}
	})
	t.Run("an empty prefix lists nothing", func(t *testing.T) {
		if got := keys(t, newStore(t), "nothing/here/"); len(got) != 0 {
			t.Errorf("List = %v", got)
		}
	})
	t.Run("rotation keeps the newest complete, the incomplete newest and resumeFrom", func(t *testing.T) {
		s := newStore(t)
		root := "runs/ml/job"
		for e := 1; e <= 5; e++ {
			dir := root + "/" + checkpoint.Dir(e)
			put(t, s, dir+"/model.bin", strings.Repeat("w", 10*e))
			put(t, s, dir+"/optimizer.bin", "o")
			if e != 5 {
				put(t, s, dir+"/"+checkpoint.Marker, fmt.Sprintf(`{"epoch":%d}`, e))
			}
		}
		list, err := s.List(ctx, root+"/")
		if err != nil {
			t.Fatal(err)
		}
		cps := checkpoint.Scan(root, list)
		latest, ok := checkpoint.Latest(cps)
		if !ok || latest.Epoch != 4 || latest.Size != int64(40+1+len(`{"epoch":4}`)) {
			t.Fatalf("latest = %+v", latest)
		}
		_, remove := checkpoint.Plan(cps, checkpoint.Policy{Retention: 2, Protect: []string{s.URI(root + "/" + checkpoint.Dir(1))}}, time.Now())
		var gone []string
		for _, c := range remove {
			gone = append(gone, c.Keys...)
		}
		if err := s.Delete(ctx, gone); err != nil {
			t.Fatal(err)
		}
		left := checkpoint.Scan(root, listAll(t, s, root+"/"))
		var names []string
		for _, c := range left {
			names = append(names, c.Name)
		}
		if diff := cmp.Diff([]string{"checkpoint-epoch-1", "checkpoint-epoch-3", "checkpoint-epoch-4", "checkpoint-epoch-5"}, names); diff != "" {
			t.Errorf("after rotation (-want +got):\n%s", diff)
		}
	})
	t.Run("listing more than a page", func(t *testing.T) {
		s := newStore(t)
		const n = 1100 // S3 and GCS pages hold 1,000
		for i := 0; i < n; i++ {
			put(t, s, fmt.Sprintf("big/checkpoint-epoch-%d/_COMPLETE", i), "{}")
		}
		if got := len(keys(t, s, "big/")); got != n {
			t.Errorf("listed %d of %d", got, n)
		}
		all := keys(t, s, "big/")
		if err := s.Delete(ctx, all); err != nil {
			t.Fatal(err)
		}
		if got := len(keys(t, s, "big/")); got != 0 {
			t.Errorf("%d left after deleting %d at once", got, n)
		}
	})
}

func put(t *testing.T, s checkpoint.Store, key, data string) {
	t.Helper()
	if err := s.Put(context.Background(), key, []byte(data)); err != nil {
		t.Fatalf("Put %s: %v", key, err)
	}
}

func listAll(t *testing.T, s checkpoint.Store, prefix string) []checkpoint.Object {
	t.Helper()
	objs, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatalf("List %s: %v", prefix, err)
	}
	return objs
}

func keys(t *testing.T, s checkpoint.Store, prefix string) []string {
	t.Helper()
	var out []string
	for _, o := range listAll(t, s, prefix) {
		out = append(out, o.Key)
	}
	sort.Strings(out)
	return out
}
