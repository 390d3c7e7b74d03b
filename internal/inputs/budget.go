package inputs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/resource"
)

// DefaultMaxFiles is how many files and directories a job's inputs may create when the budget does not
// say.
const DefaultMaxFiles = 500_000

// inodeBytes is what the budget is charged for each file and directory besides its bytes: a block, which
// even an empty one takes on disk.
const inodeBytes = 4096

// Budget bounds what the fetches of one job's inputs write into its cache, the model and the dataset
// together: MaxBytes in all (the cache's size), each file and directory counted as a block at least, and
// MaxFiles files and directories. The zero Budget allows any number of bytes and DefaultMaxFiles files.
// One Budget serves a job's fetches, one after the other (it is not safe for concurrent use).
type Budget struct {
	// MaxBytes is the most bytes the inputs may occupy; 0: no limit.
	MaxBytes int64
	// MaxFiles is the most files and directories the inputs may have; 0: DefaultMaxFiles.
	MaxFiles int
	// Limit names the limit in errors, for example "inputs.cacheSize 50Gi".
	Limit  string
	used   atomic.Int64 // read by a progress endpoint
	inodes int
	dirs   map[string]bool // the directories charged, by their root's name and path
}

// ErrBudget is what a fetch past its budget fails with (wrapped with the limit's name).
var ErrBudget = errors.New("over the input cache's budget")

func (b *Budget) maxFiles() int {
	if b.MaxFiles > 0 {
		return b.MaxFiles
	}
	return DefaultMaxFiles
}

func (b *Budget) exceeded() error {
	limit := b.Limit
	if limit == "" {
		limit = resource.NewQuantity(b.MaxBytes, resource.BinarySI).String() + " bytes"
	}
	return &Error{Err: fmt.Errorf("%w: the inputs would take more than %s", ErrBudget, limit)}
}

// charge takes n bytes of the budget, or fails naming the limit when they are not left.
func (b *Budget) charge(n int64) error {
	if used := b.used.Add(n); b.MaxBytes > 0 && used > b.MaxBytes {
		return b.exceeded()
	}
	return nil
}

// chargeInode takes one file or directory of the budget: one of MaxFiles, and a block of bytes.
func (b *Budget) chargeInode() error {
	if b.inodes++; b.inodes > b.maxFiles() {
		return &Error{Err: fmt.Errorf("%w: the inputs would have more than %d files and directories", ErrBudget, b.maxFiles())}
	}
	return b.charge(inodeBytes)
}

// refundFile gives back a file a failed try wrote (n bytes) and removed.
func (b *Budget) refundFile(n int64) { b.refundFiles(1, n) }

// refundFiles gives back k files of n bytes in all.
func (b *Budget) refundFiles(k int, n int64) {
	b.inodes -= k
	b.used.Add(-n - int64(k)*inodeBytes)
}

// ensureDir charges each directory of dir (a path in root, "." for root itself) that is not charged yet,
// then makes them.
func (b *Budget) ensureDir(root *os.Root, dir string) error {
	if dir == "." || dir == "" {
		return nil
	}
	if b.dirs == nil {
		b.dirs = map[string]bool{}
	}
	for i := range len(dir) + 1 {
		if i < len(dir) && dir[i] != '/' {
			continue
		}
		if key := root.Name() + "\x00" + dir[:i]; !b.dirs[key] {
			if err := b.chargeInode(); err != nil {
				return err
			}
			b.dirs[key] = true
		}
	}
	return classifyFS(root.MkdirAll(dir, 0o755))
}

// chargeKept charges a file the cache already holds (rel, as the manifest says it), and its directories;
// an archive's files are charged with their bytes.
func (b *Budget) chargeKept(root *os.Root, rel string, e fileEntry) error {
	names, size := []string{rel}, e.Size
	if e.Archive {
		names, size = e.Entries, e.Unpacked
	}
	for _, name := range names {
		if err := b.ensureDir(root, path.Dir(name)); err != nil {
			return err
		}
		if err := b.chargeInode(); err != nil {
			return err
		}
	}
	return b.charge(size)
}

// checkListing refuses, before anything is read, a listing with names that are not local, with more files
// than are left, or whose listed sizes alone are over the bytes left.
func (b *Budget) checkListing(src Source, files []remote) error {
	if left := b.maxFiles() - b.inodes; len(files) > left {
		return &Error{Err: fmt.Errorf("%s lists more than %d files: %w: the inputs may have at most %d files and directories",
			src.URI, left, ErrBudget, b.maxFiles())}
	}
	var listed int64
	for _, f := range files {
		if err := LocalName(f.Rel); err != nil {
			return permanentf("%s names %q: %v", src.URI, f.Rel, err)
		}
		listed += max(f.Size, 0)
	}
	if b.MaxBytes > 0 && b.used.Load()+listed > b.MaxBytes {
		return fmt.Errorf("%s lists %s: %w", src.URI, resource.NewQuantity(listed, resource.BinarySI), b.exceeded())
	}
	return nil
}

// budgetReader charges every byte read to b and stops at the first byte over it.
type budgetReader struct {
	r io.Reader
	b *Budget
}

func (br *budgetReader) Read(p []byte) (int, error) {
	n, err := br.r.Read(p)
	if cerr := br.b.charge(int64(n)); cerr != nil {
		return n, cerr
	}
	return n, err
}

// Bounds of a name LocalName accepts: its length, its segments' and their number.
const (
	maxNameBytes    = 1024
	maxSegmentBytes = 255
	maxSegments     = 64
)

// LocalName refuses a name a source gives for a file (an object key below its prefix, a hub file, an
// archive entry, a URL's last segment) that could leave the input's directory or replace the fetcher's own
// files: empty, absolute, with a "..", "." or empty segment, a backslash or a NUL, the manifest's name, or
// longer or deeper than a file system takes (1,024 bytes, 64 directories, 255 bytes a segment).
func LocalName(name string) error {
	switch {
	case name == "":
		return errors.New("an empty name")
	case strings.ContainsAny(name, "\\\x00"):
		return errors.New("a backslash or NUL in the name")
	case path.IsAbs(name) || !filepath.IsLocal(name) || path.Clean(name) != name:
		return errors.New("not a relative path below the input's directory (absolute, '..', '.' or an empty segment)")
	case path.Base(name) == ManifestFile || strings.HasPrefix(path.Base(name), ".fetch-"):
		return errors.New("the name of the fetcher's own files")
	case len(name) > maxNameBytes || strings.Count(name, "/") >= maxSegments:
		return fmt.Errorf("longer than %d bytes or deeper than %d directories", maxNameBytes, maxSegments)
	}
	for seg := range strings.SplitSeq(name, "/") {
		if len(seg) > maxSegmentBytes {
			return fmt.Errorf("a segment longer than %d bytes", maxSegmentBytes)
		}
	}
	return nil
}
