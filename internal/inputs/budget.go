package inputs

import (
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/resource"
)

// DefaultMaxFiles is how many files (listed, or entries of an archive) one input may have when the
// budget does not say.
const DefaultMaxFiles = 100_000

// Budget bounds what the fetches of one job's inputs write into its cache: MaxBytes in all (the model and
// the dataset together: the cache's size), MaxFiles per input. The zero Budget allows any number of bytes
// and DefaultMaxFiles files. A Budget is shared by the job's fetches, one after the other.
type Budget struct {
	// MaxBytes is the most bytes the inputs may occupy; 0: no limit.
	MaxBytes int64
	// MaxFiles is the most files one input may list or one archive may hold; 0: DefaultMaxFiles.
	MaxFiles int
	// Limit names the limit in errors, for example "inputs.cacheSize 50Gi".
	Limit string
	used  atomic.Int64
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

// refund gives back n bytes a failed try wrote and removed.
func (b *Budget) refund(n int64) { b.used.Add(-n) }

// checkListing refuses, before anything is read, a listing with names that are not local, with more files
// than allowed, or whose listed sizes alone are over the bytes left.
func (b *Budget) checkListing(src Source, files []remote) error {
	if len(files) > b.maxFiles() {
		return permanentf("%s lists %d files, more than the %d an input may have", src.URI, len(files), b.maxFiles())
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

// LocalName refuses a name a source gives for a file (an object key below its prefix, a hub file, an
// archive entry, a URL's last segment) that could leave the input's directory or replace the fetcher's own
// files: empty, absolute, with a "..", "." or empty segment, a backslash or a NUL, or the manifest's name.
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
	}
	return nil
}
