// Package checkpoint finds, validates and rotates training checkpoints in any store: a directory on a
// mounted volume (pvc, nfs), an S3 prefix or a GCS prefix. The rules live here once, as pure functions
// over the listed objects; the stores only list, read, write and delete.
//
// Layout: a checkpoint is the directory (or prefix) <root>/checkpoint-epoch-<N>/ where root is
// [<prefix>/]<namespace>/<trainingjob>/<runID>. It is complete only once its marker file _COMPLETE exists; the
// trainer writes the marker last (a small JSON manifest), so a checkpoint being written is never taken for
// a complete one.
package checkpoint

import (
	"context"
	"errors"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
)

// Marker is the file that makes a checkpoint complete.
const Marker = "_COMPLETE"

// ErrEndlessListing: a listing went on for more pages than its limit of objects could fill.
var ErrEndlessListing = errors.New("the listing goes on for more pages than its objects would fill")

// maxPages returns how many pages a listing of at most most objects may take: a store fills a page with up to
// 1,000 keys; ten per page on average is allowed.
func maxPages(most int) int { return most/10 + 10 }

// Object is one stored file. Key is relative to the store's root, with "/" separators.
type Object struct {
	Key      string
	Size     int64
	Modified time.Time
	// ETag is the store's fingerprint of the content where it gives one (S3's ETag, GCS's MD5 or
	// CRC32C), "" on a file system.
	ETag string
}

// Opener streams an object instead of reading it whole (the S3, GCS and file system stores): inputs of
// many GiB are copied to disk through it.
type Opener interface {
	Open(ctx context.Context, key string) (io.ReadCloser, error)
}

// Store is where checkpoints are kept. Keys use "/" separators; List returns every object whose key
// starts with prefix, in no particular order; Delete of a missing key is not an error.
type Store interface {
	List(ctx context.Context, prefix string) ([]Object, error)
	Get(ctx context.Context, key string) ([]byte, error)
	Put(ctx context.Context, key string, data []byte) error
	Delete(ctx context.Context, keys []string) error
	// URI names a key for people and for RESUME_FROM: a path, s3://bucket/key or gs://bucket/key.
	URI(key string) string
}

// Checkpoint is one checkpoint-epoch-<N> directory.
type Checkpoint struct {
	// Name is the directory name, for example checkpoint-epoch-12; Dir is root/Name.
	Name, Dir string
	Epoch     int
	// Step is the global training step of a checkpoint written mid-epoch (checkpoint-epoch-<E>-step-<S>,
	// at preemption), 0 for one written at the end of epoch Epoch.
	Step     int64
	Complete bool
	// Size is the bytes of every object in it.
	Size int64
	// Time is when it completed (the marker's time), or its newest object's time when incomplete.
	Time time.Time
	// Keys are its objects.
	Keys []string
}

// Dir returns the name of the checkpoint directory of an epoch.
func Dir(epoch int) string { return "checkpoint-epoch-" + strconv.Itoa(epoch) }

// StepDir returns the name of a checkpoint written mid-epoch (at preemption): after epoch complete epochs, at
// global training step step.
func StepDir(epoch int, step int64) string {
	return Dir(epoch) + "-step-" + strconv.FormatInt(step, 10)
}

// Position returns where c stands in the run.
func (c Checkpoint) Position() agentapi.Position {
	return agentapi.Position{Epoch: c.Epoch, Step: c.Step}
}

// SortByPosition orders checkpoints oldest first.
func SortByPosition(cps []Checkpoint) {
	sort.Slice(cps, func(i, j int) bool { return cps[i].Position().Before(cps[j].Position()) })
}

// EpochOf returns the epoch of a checkpoint path or URI (…/checkpoint-epoch-<N>), and whether it names one.
func EpochOf(uri string) (int, bool) { return agentapi.EpochOf(uri) }

// Scan groups the objects under root into checkpoints, oldest epoch first. Objects outside a
// checkpoint-epoch-<N> directory (temporary directories, other files) are ignored.
func Scan(root string, objects []Object) []Checkpoint {
	root = strings.Trim(root, "/")
	byName := map[string]*Checkpoint{}
	for _, o := range objects {
		rest, ok := strings.CutPrefix(o.Key, root+"/")
		if root == "" {
			rest, ok = o.Key, true
		}
		name, file, found := strings.Cut(rest, "/")
		pos, isCheckpoint := agentapi.PositionOf(name)
		if !ok || !found || !isCheckpoint || file == "" {
			continue
		}
		c := byName[name]
		if c == nil {
			c = &Checkpoint{Name: name, Dir: path.Join(root, name), Epoch: pos.Epoch, Step: pos.Step}
			byName[name] = c
		}
		c.Keys = append(c.Keys, o.Key)
		c.Size += o.Size
		if file == Marker {
			c.Complete, c.Time = true, o.Modified
		} else if !c.Complete && o.Modified.After(c.Time) {
			c.Time = o.Modified
		}
	}
	out := make([]Checkpoint, 0, len(byName))
	for _, c := range byName {
		sort.Strings(c.Keys)
		out = append(out, *c)
	}
	SortByPosition(out)
	return out
}

// Latest returns the complete checkpoint with the highest epoch, and whether there is one.
func Latest(cps []Checkpoint) (Checkpoint, bool) {
	for i := len(cps) - 1; i >= 0; i-- {
		if cps[i].Complete {
			return cps[i], true
		}
	}
	return Checkpoint{}, false
}

// Policy says which checkpoints rotation may delete.
type Policy struct {
	// Retention is how many of the newest complete checkpoints to keep (at least 1).
	Retention int
	// Protect are checkpoint directories (or URIs ending in one) never to delete: resumeFrom, and what
	// workers may be told to resume from. One among the newest Retention counts as one of them; an older
	// one is kept besides them.
	Protect []string
	// AbandonedAfter is how long an incomplete checkpoint older than the newest complete one must have
	// been untouched before it counts as abandoned and may go; an incomplete checkpoint newer than the
	// newest complete one may still be being written and is never deleted.
	AbandonedAfter time.Duration
}

// Plan splits checkpoints into those rotation keeps and those it deletes. It never deletes the newest
// complete checkpoint, a protected one, an incomplete one that may still be written, or an incomplete one
// touched within AbandonedAfter. Order is by epoch, never by time, so equal timestamps cannot reorder.
func Plan(cps []Checkpoint, p Policy, now time.Time) (keep, remove []Checkpoint) {
	retention := max(p.Retention, 1)
	latest, hasLatest := Latest(cps)
	kept := 0
	for i := len(cps) - 1; i >= 0; i-- {
		c := cps[i]
		switch {
		case c.Complete && kept < retention:
			kept++
			keep = append(keep, c)
		case isProtected(c, p.Protect):
			keep = append(keep, c) // kept beyond retention
		case c.Complete:
			remove = append(remove, c)
		case !hasLatest || latest.Position().Before(c.Position()) || now.Sub(c.Time) < p.AbandonedAfter:
			keep = append(keep, c) // may still be written
		default:
			remove = append(remove, c) // an abandoned partial write older than a complete checkpoint
		}
	}
	reverse(keep)
	reverse(remove)
	return keep, remove
}

func isProtected(c Checkpoint, protect []string) bool {
	for _, p := range protect {
		p = strings.Trim(p, "/")
		if p == c.Dir || strings.HasSuffix(p, "/"+c.Dir) {
			return true
		}
	}
	return false
}

func reverse(cs []Checkpoint) {
	for i, j := 0, len(cs)-1; i < j; i, j = i+1, j-1 {
		cs[i], cs[j] = cs[j], cs[i]
	}
}
