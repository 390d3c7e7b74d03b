package checkpoint

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// flaky is a store whose deletes of one checkpoint fail.
type flaky struct {
	DirStore
	failing string
}

func (f flaky) Delete(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if Scan("r", []Object{{Key: k}})[0].Name == f.failing {
			return errors.New("permission denied")
		}
	}
	return f.DirStore.Delete(ctx, keys)
}

func TestSyncRotatesAndReportsFailedDeletes(t *testing.T) {
	ctx := context.Background()
	s := flaky{DirStore: DirStore{Root: t.TempDir()}, failing: "checkpoint-epoch-2"}
	for _, e := range []int{1, 2, 3, 4} {
		for _, f := range []string{"model.bin", Marker} {
			if err := s.Put(ctx, "r/"+Dir(e)+"/"+f, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	r, err := Sync(ctx, s, "r", Policy{Retention: 2}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"checkpoint-epoch-1"}, r.Deleted); diff != "" {
		t.Errorf("deleted (-want +got):\n%s", diff)
	}
	if r.DeleteError == nil || r.Latest == nil || r.Latest.Epoch != 4 || r.Count() != 3 {
		t.Errorf("report: deleteError %v latest %+v count %d", r.DeleteError, r.Latest, r.Count())
	}
	if diff := cmp.Diff([]string{"checkpoint-epoch-2", "checkpoint-epoch-3", "checkpoint-epoch-4"}, names(r.Checkpoints)); diff != "" {
		t.Errorf("left (-want +got):\n%s", diff)
	}
	s.failing = ""
	if r, err = Sync(ctx, s, "r", Policy{Retention: 2}, t0); err != nil || r.DeleteError != nil || r.Count() != 2 {
		t.Errorf("retry: %v %v count %d", err, r.DeleteError, r.Count())
	}
}
