package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Report is what one Sync found and did.
type Report struct {
	// Checkpoints are those left after rotation, oldest epoch first.
	Checkpoints []Checkpoint
	// Latest is the newest complete checkpoint, nil when there is none.
	Latest *Checkpoint
	// Deleted are the checkpoints rotation removed.
	Deleted []string
	// DeleteError is why some deletions failed; they are retried by the next Sync. It is never fatal.
	DeleteError error
}

// Count returns the number of complete checkpoints.
func (r Report) Count() int {
	n := 0
	for _, c := range r.Checkpoints {
		if c.Complete {
			n++
		}
	}
	return n
}

// Sync lists the checkpoints under root, deletes what the policy rotates out, and reports what is left.
// It is the one code path every store goes through. Only a failed listing is an error: a failed delete
// is reported in the Report and retried next time, and the checkpoints it could not delete stay listed.
func Sync(ctx context.Context, s Store, root string, p Policy, now time.Time) (Report, error) {
	objs, err := s.List(ctx, root+"/")
	if err != nil {
		return Report{}, err
	}
	keep, remove := Plan(Scan(root, objs), p, now)
	r := Report{Checkpoints: keep}
	var errs []error
	for _, c := range remove {
		if err := s.Delete(ctx, c.Keys); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.Name, err))
			r.Checkpoints = append(r.Checkpoints, c)
			continue
		}
		r.Deleted = append(r.Deleted, c.Name)
	}
	r.DeleteError = errors.Join(errs...)
	SortByPosition(r.Checkpoints)
	if l, ok := Latest(r.Checkpoints); ok {
		r.Latest = &l
	}
	return r, nil
}
