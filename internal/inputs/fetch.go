package inputs

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// ManifestFile records, in a fetched input's directory, what was copied there: each file's size and the
// store's fingerprint of it. A later fetch copies only what the source changed.
const ManifestFile = ".trainingjob-inputs.json"

// Report is what one fetch did: the source's bytes and files, and how many bytes it read this time (0
// when the cache already held everything).
type Report struct {
	// Name is model or dataset.
	Name   string `json:"name"`
	Source string `json:"source"`
	Bytes  int64  `json:"bytes"`
	Files  int    `json:"files"`
	// Fetched is the bytes read from the source by this fetch.
	Fetched int64 `json:"fetched"`
	// Seconds is how long the fetch took.
	Seconds float64 `json:"seconds"`
}

// remote is one file of a source.
type remote struct {
	// Rel is its path under the input's directory.
	Rel  string
	Size int64 // -1 when the source does not say
	ETag string
	open func(ctx context.Context) (io.ReadCloser, error)
}

// lister lists a source's files.
type lister interface {
	list(ctx context.Context) ([]remote, error)
}

type manifest struct {
	Source string               `json:"source"`
	Files  map[string]fileEntry `json:"files"`
}

type fileEntry struct {
	Size int64  `json:"size"`
	ETag string `json:"etag,omitempty"`
	// Unpacked is what an archive's entries took when unpacked, charged to the budget when it is kept.
	Unpacked int64 `json:"unpacked,omitempty"`
}

// Progress counts the bytes copied so far, for a status endpoint.
type Progress struct {
	Done, Total atomic.Int64
}

// Status is one source's progress as the fetcher serves it (GET /status, a JSON list) while it runs.
type Status struct {
	Name   string `json:"name"`
	Source string `json:"source"`
	// Done and Total are bytes: copied or found current so far, and the source's size (0 until listed).
	Done  int64 `json:"done"`
	Total int64 `json:"total"`
}

// Fetch copies src into dir (created when missing): the files the manifest does not already hold with the
// same size and fingerprint, each written to a temporary file, checked against the size the source gave
// and renamed; files the source no longer has are removed. An archive source (https) is unpacked. Every
// file operation goes through an os.Root of dir, every name a source gives must be local (LocalName), and
// what the source occupies in dir is charged to b (nil: no byte budget, DefaultMaxFiles files).
func Fetch(ctx context.Context, name string, src Source, dir string, env Env, p *Progress, b *Budget) (Report, error) {
	start := time.Now()
	rep := Report{Name: name, Source: src.URI}
	if b == nil {
		b = &Budget{}
	}
	l, err := newLister(ctx, name, src, env)
	if err != nil {
		return rep, err
	}
	files, err := retry(ctx, func() ([]remote, error) { return l.list(ctx) })
	if err != nil {
		return rep, err
	}
	if len(files) == 0 {
		return rep, permanentf("%s has no files", src.URI)
	}
	if err := b.checkListing(src, files); err != nil {
		return rep, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return rep, classifyFS(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return rep, classifyFS(err)
	}
	defer func() { _ = root.Close() }()
	rep, err = fetchInto(ctx, root, src, files, p, b, rep)
	rep.Seconds = time.Since(start).Seconds()
	return rep, err
}

// fetchInto copies files into root, then removes what the last fetch of src wrote that it no longer has.
func fetchInto(ctx context.Context, root *os.Root, src Source, files []remote, p *Progress, b *Budget, rep Report) (Report, error) {
	old := readManifest(root, src.URI)
	next := manifest{Source: src.URI, Files: map[string]fileEntry{}}
	for _, f := range files {
		rep.Bytes += max(f.Size, 0)
	}
	if p != nil {
		p.Total.Store(rep.Bytes)
	}
	for _, f := range files {
		entry := fileEntry{Size: f.Size, ETag: f.ETag}
		if size, ok := have(root, old, f); ok {
			if err := b.charge(size); err != nil {
				return rep, fmt.Errorf("%s: %w", joinURI(src, f.Rel), err)
			}
			if p != nil {
				p.Done.Add(size)
			}
		} else {
			n, unpacked, err := download(ctx, root, f, src, p, b)
			rep.Fetched += n
			if err != nil {
				return rep, err
			}
			entry.Size, entry.Unpacked = n, unpacked
		}
		next.Files[f.Rel] = entry
	}
	removeStale(root, old, next)
	if err := writeManifest(root, next); err != nil {
		return rep, classifyFS(err)
	}
	rep.Files = countFiles(root)
	return rep, nil
}

// have: the cache holds f as the source has it (the manifest's size and fingerprint, and the file's
// size), and the bytes it occupies (an unpacked archive's as the manifest recorded them).
func have(root *os.Root, m manifest, f remote) (int64, bool) {
	e, ok := m.Files[f.Rel]
	if !ok || e.ETag != f.ETag || f.Size >= 0 && e.Size != f.Size {
		return 0, false
	}
	if isArchive(f.Rel) {
		return max(e.Unpacked, 0), true // unpacked: its files are checked as a whole by the manifest
	}
	info, err := root.Lstat(f.Rel)
	return e.Size, err == nil && info.Mode().IsRegular() && info.Size() == e.Size
}

// download copies one file (or unpacks one archive) into root and returns the bytes read from the source
// and, for an archive, the bytes its entries took.
func download(ctx context.Context, root *os.Root, f remote, src Source, p *Progress, b *Budget) (read, unpacked int64, err error) {
	_, err = retry(ctx, func() (struct{}, error) {
		var err error
		read, unpacked, err = copyOnce(ctx, root, f, p, b)
		return struct{}{}, err
	})
	if err != nil {
		return read, unpacked, fmt.Errorf("%s: %w", joinURI(src, f.Rel), err)
	}
	return read, unpacked, nil
}

// copyOnce reads f once: a file at most its listed size (one byte more tells a lying source), an archive
// unpacked entry by entry; what it writes is charged to b, and given back when the try fails.
func copyOnce(ctx context.Context, root *os.Root, f remote, p *Progress, b *Budget) (read, unpacked int64, err error) {
	r, err := f.open(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = r.Close() }()
	counted := &countingReader{r: r, p: p}
	if isArchive(f.Rel) {
		written, err := unpack(counted, root, strings.HasSuffix(f.Rel, ".gz") || strings.HasSuffix(f.Rel, ".tgz"), b)
		if err != nil {
			b.refund(written)
		}
		return counted.n, written, err
	}
	var body io.Reader = counted
	if f.Size >= 0 {
		body = io.LimitReader(counted, f.Size+1)
	}
	n, err := writeFile(root, f.Rel, body, b)
	if err == nil && f.Size >= 0 && n != f.Size {
		_ = root.Remove(f.Rel)
		err = transientf("read %d bytes of %d", n, f.Size)
	}
	if err != nil {
		b.refund(n)
	}
	return counted.n, 0, err
}

// writeFile writes r to name in root through a temporary file beside it, readable by every user (the
// fetcher may run as root or as another user than the trainers that read the cache), charging b for
// every byte; it returns the bytes written.
func writeFile(root *os.Root, name string, r io.Reader, b *Budget) (int64, error) {
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return 0, classifyFS(err)
		}
	}
	tmp := path.Join(path.Dir(name), ".fetch-"+randomSuffix())
	f, err := root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, classifyFS(err)
	}
	err = f.Chmod(0o644)
	var n int64
	if err == nil {
		n, err = io.Copy(f, &budgetReader{r: r, b: b})
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return n, classifyFS(err)
	}
	return n, nil
}

func randomSuffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	return hex.EncodeToString(b[:])
}

func isArchive(rel string) bool {
	return strings.HasSuffix(rel, ".tar") || strings.HasSuffix(rel, ".tar.gz") || strings.HasSuffix(rel, ".tgz")
}

// unpack writes a tar stream's regular files and directories into root, each entry's name checked by
// LocalName (and by root itself); other entries (links, devices) are refused, as are more entries than b
// allows. It returns the bytes written.
func unpack(r io.Reader, root *os.Root, gz bool, b *Budget) (int64, error) {
	if gz {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return 0, permanentf("not a gzip archive: %v", err)
		}
		r = zr
	}
	tr := tar.NewReader(r)
	var written int64
	for entries := 0; ; entries++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return written, nil
		}
		if err != nil {
			return written, transientf("reading the archive: %v", err)
		}
		if entries >= b.maxFiles() {
			return written, permanentf("the archive has more than %d entries: the limit of files an input may have", b.maxFiles())
		}
		n, err := unpackEntry(root, h, tr, b)
		written += n
		if err != nil {
			return written, err
		}
	}
}

func unpackEntry(root *os.Root, h *tar.Header, r io.Reader, b *Budget) (int64, error) {
	name := strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
	if name == "." || name == "" && h.Typeflag == tar.TypeDir || h.Typeflag == tar.TypeXGlobalHeader {
		return 0, nil // the archive's root, or a pax header for the whole archive (git archive writes one)
	}
	if err := LocalName(name); err != nil {
		return 0, permanentf("archive entry %q: %v", h.Name, err)
	}
	switch h.Typeflag {
	case tar.TypeDir:
		return 0, classifyFS(root.MkdirAll(name, 0o755))
	case tar.TypeReg:
		return writeFile(root, name, r, b)
	}
	return 0, permanentf("archive entry %q is not a file or a directory", h.Name)
}

type countingReader struct {
	r io.Reader
	n int64
	p *Progress
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	if c.p != nil {
		c.p.Done.Add(int64(n))
	}
	return n, err
}

// readManifest reads the manifest an earlier fetch of uri wrote; entries whose names are not local (a
// manifest someone else wrote) are dropped: nothing is kept, compared or removed by them.
func readManifest(root *os.Root, uri string) manifest {
	var m manifest
	f, err := root.Open(ManifestFile)
	if err != nil {
		return manifest{}
	}
	defer func() { _ = f.Close() }()
	if json.NewDecoder(io.LimitReader(f, maxManifestBytes)).Decode(&m) != nil || m.Source != uri {
		return manifest{}
	}
	for rel := range m.Files {
		if LocalName(rel) != nil {
			delete(m.Files, rel)
		}
	}
	return m
}

// maxManifestBytes bounds the manifest read back: DefaultMaxFiles entries of long names.
const maxManifestBytes = 64 << 20

func writeManifest(root *os.Root, m manifest) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = writeFile(root, ManifestFile, strings.NewReader(string(data)), &Budget{})
	return err
}

// removeStale removes the files an earlier fetch of the same source wrote that the source no longer has.
func removeStale(root *os.Root, old, next manifest) {
	for rel := range old.Files {
		if _, ok := next.Files[rel]; !ok && !isArchive(rel) {
			_ = root.Remove(rel)
		}
	}
}

// countFiles counts the regular files under root, the manifest left out.
func countFiles(root *os.Root) int {
	n := 0
	_ = fs.WalkDir(root.FS(), ".", func(name string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() && name != ManifestFile {
			n++
		}
		return nil
	})
	return n
}

func joinURI(src Source, rel string) string {
	if src.Kind == HTTP || src.Kind == HTTPS {
		return src.URI
	}
	return strings.TrimSuffix(src.URI, "/") + "/" + rel
}

// sortRemotes orders files by path, so that fetches and their reports are the same each time.
func sortRemotes(files []remote) []remote {
	slices.SortFunc(files, func(a, b remote) int { return strings.Compare(a.Rel, b.Rel) })
	return files
}
