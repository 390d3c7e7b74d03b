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
	// Unpack: an archive of an https source, unpacked into the directory (an object store's or a hub's
	// .tar is a file like any other).
	Unpack bool
	open   func(ctx context.Context) (io.ReadCloser, error)
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
	// Archive: the file was unpacked; Entries are the files it unpacked to, Unpacked their bytes: what the
	// budget is charged when it is kept, and what is removed when it changes or goes.
	Archive  bool     `json:"archive,omitempty"`
	Entries  []string `json:"entries,omitempty"`
	Unpacked int64    `json:"unpacked,omitempty"`
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
	l, err := newLister(ctx, name, src, env, b.maxFiles())
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
		entry, kept := have(root, old, f)
		if kept {
			if err := b.chargeKept(root, f.Rel, entry); err != nil {
				return rep, fileError(src, f.Rel, err)
			}
			if p != nil {
				p.Done.Add(max(f.Size, 0))
			}
		} else {
			removeEntries(root, old.Files[f.Rel]) // an archive that changed: its old files go first
			c, err := download(ctx, root, f, src, p, b)
			rep.Fetched += c.read
			if err != nil {
				return rep, err
			}
			entry = fileEntry{Size: c.read, ETag: f.ETag, Archive: f.Unpack, Entries: c.entries, Unpacked: c.unpacked}
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
// size; an unpacked archive as a whole, by the manifest), and what the manifest says of it.
func have(root *os.Root, m manifest, f remote) (fileEntry, bool) {
	e, ok := m.Files[f.Rel]
	if !ok || e.ETag != f.ETag || f.Size >= 0 && e.Size != f.Size || e.Archive != f.Unpack {
		return fileEntry{}, false
	}
	if e.Archive {
		return e, true
	}
	info, err := root.Lstat(f.Rel)
	return e, err == nil && info.Mode().IsRegular() && info.Size() == e.Size
}

// copied is what one try of a file read and wrote.
type copied struct {
	read, unpacked int64
	entries        []string // an archive's files
}

// download copies one file (or unpacks one archive) into root, tried again on a transient error.
func download(ctx context.Context, root *os.Root, f remote, src Source, p *Progress, b *Budget) (copied, error) {
	c, err := retry(ctx, func() (copied, error) { return copyOnce(ctx, root, f, p, b) })
	if err != nil {
		return c, fileError(src, f.Rel, err)
	}
	return c, nil
}

// IdleTimeout is how long a source may send nothing before the read is given up (and tried again).
var IdleTimeout = 2 * time.Minute

var errIdle = errors.New("no byte arrived")

// copyOnce reads f once: a file at most its listed size (one byte more tells a lying source), an archive
// unpacked entry by entry; what it writes is charged to b. A read that stalls for IdleTimeout is given up.
// A failed try leaves nothing behind and gives its charges back.
func copyOnce(ctx context.Context, root *os.Root, f remote, p *Progress, b *Budget) (copied, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := time.AfterFunc(IdleTimeout, func() { cancel(errIdle) })
	defer idle.Stop()
	r, err := f.open(ctx)
	if err != nil {
		return copied{}, idleError(ctx, err)
	}
	defer func() { _ = r.Close() }()
	counted := &countingReader{r: r, p: p, idle: idle}
	if f.Unpack {
		c, err := unpack(counted, root, strings.HasSuffix(f.Rel, ".gz") || strings.HasSuffix(f.Rel, ".tgz"), b)
		c.read = counted.n
		return c, idleError(ctx, err)
	}
	var body io.Reader = counted
	if f.Size >= 0 {
		body = io.LimitReader(counted, f.Size+1)
	}
	n, err := writeFile(root, f.Rel, body, b)
	if err == nil && f.Size >= 0 && n != f.Size {
		_ = root.Remove(f.Rel)
		b.refundFile(n)
		err = transientf("read %d bytes of %d", n, f.Size)
	}
	return copied{read: counted.n}, idleError(ctx, err)
}

// idleError names a read given up for IdleTimeout (transient: tried again).
func idleError(ctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(ctx), errIdle) {
		return transientf("the source sent nothing for %s", IdleTimeout)
	}
	return err
}

// writeFile writes r to name in root through a temporary file beside it, readable by every user (the
// fetcher may run as root or as another user than the trainers that read the cache), charging b for its
// directories, itself and every byte; it returns the bytes written. A failure removes the temporary file
// and gives its charges back.
func writeFile(root *os.Root, name string, r io.Reader, b *Budget) (int64, error) {
	if err := b.ensureDir(root, path.Dir(name)); err != nil {
		return 0, err
	}
	if err := b.chargeInode(); err != nil {
		return 0, err
	}
	tmp := path.Join(path.Dir(name), ".fetch-"+randomSuffix())
	f, err := root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		b.refundFile(0)
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
		b.refundFile(n)
		return 0, classifyFS(err)
	}
	return n, nil
}

func randomSuffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	return hex.EncodeToString(b[:])
}

// isArchive reports whether an https source's file is unpacked by its name.
func isArchive(rel string) bool {
	return strings.HasSuffix(rel, ".tar") || strings.HasSuffix(rel, ".tar.gz") || strings.HasSuffix(rel, ".tgz")
}

// unpack writes a tar stream's regular files and directories into root, each entry's name checked by
// LocalName (and by root itself), each file and directory charged to b; other entries (links, devices)
// are refused. It returns what it wrote; when it fails, what it wrote is removed and given back.
func unpack(r io.Reader, root *os.Root, gz bool, b *Budget) (c copied, err error) {
	defer func() {
		if err != nil {
			for _, e := range c.entries {
				_ = root.Remove(e)
			}
			b.refundFiles(len(c.entries), c.unpacked)
			c.entries, c.unpacked = nil, 0
		}
	}()
	if gz {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return c, permanentf("not a gzip archive: %v", err)
		}
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return c, nil
		}
		if err != nil {
			return c, transientf("reading the archive: %v", err)
		}
		name, n, err := unpackEntry(root, h, tr, b)
		if name != "" {
			c.entries, c.unpacked = append(c.entries, name), c.unpacked+n
		}
		if err != nil {
			return c, err
		}
	}
}

// unpackEntry writes one entry; it returns the name of the file it wrote ("" for none) and its bytes.
func unpackEntry(root *os.Root, h *tar.Header, r io.Reader, b *Budget) (string, int64, error) {
	name := strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
	if name == "." || name == "" && h.Typeflag == tar.TypeDir || h.Typeflag == tar.TypeXGlobalHeader {
		return "", 0, nil // the archive's root, or a pax header for the whole archive (git archive writes one)
	}
	if err := LocalName(name); err != nil {
		return "", 0, permanentf("archive entry %q: %v", h.Name, err)
	}
	switch h.Typeflag {
	case tar.TypeDir:
		return "", 0, b.ensureDir(root, name)
	case tar.TypeReg:
		n, err := writeFile(root, name, r, b)
		if err != nil {
			return "", 0, err
		}
		return name, n, nil
	}
	return "", 0, permanentf("archive entry %q is not a file or a directory", h.Name)
}

// countingReader counts what it reads, into the progress too, and puts off the idle timer with each byte.
type countingReader struct {
	r    io.Reader
	n    int64
	p    *Progress
	idle *time.Timer
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	if n > 0 {
		c.idle.Reset(IdleTimeout)
	}
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
	for rel, e := range m.Files {
		if LocalName(rel) != nil {
			delete(m.Files, rel)
			continue
		}
		e.Entries = slices.DeleteFunc(e.Entries, func(name string) bool { return LocalName(name) != nil })
		m.Files[rel] = e
	}
	return m
}

// maxManifestBytes bounds the manifest read back: DefaultMaxFiles entries of long names.
const maxManifestBytes = 256 << 20

func writeManifest(root *os.Root, m manifest) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = writeFile(root, ManifestFile, strings.NewReader(string(data)), &Budget{})
	return err
}

// removeStale removes the files an earlier fetch of the same source wrote that the source no longer has
// (an archive's: the files it unpacked to).
func removeStale(root *os.Root, old, next manifest) {
	for rel, e := range old.Files {
		if _, ok := next.Files[rel]; !ok {
			if e.Archive {
				removeEntries(root, e)
			} else {
				_ = root.Remove(rel)
			}
		}
	}
}

// removeEntries removes the files an archive unpacked to.
func removeEntries(root *os.Root, e fileEntry) {
	for _, name := range e.Entries {
		_ = root.Remove(name)
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

// fileError names the file of src that err is about; an http(s) source is one file, which the caller's
// message already names.
func fileError(src Source, rel string, err error) error {
	if src.Kind == HTTP || src.Kind == HTTPS {
		return err
	}
	return fmt.Errorf("%s/%s: %w", strings.TrimSuffix(src.URI, "/"), rel, err)
}

// sortRemotes orders files by path, so that fetches and their reports are the same each time.
func sortRemotes(files []remote) []remote {
	slices.SortFunc(files, func(a, b remote) int { return strings.Compare(a.Rel, b.Rel) })
	return files
}
