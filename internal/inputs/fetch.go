package inputs

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
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
// and renamed; files the source no longer has are removed. An archive source (https) is unpacked.
func Fetch(ctx context.Context, name string, src Source, dir string, env Env, p *Progress) (Report, error) {
	start := time.Now()
	rep := Report{Name: name, Source: src.URI}
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
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return rep, classifyFS(err)
	}
	old := readManifest(dir, src.URI)
	next := manifest{Source: src.URI, Files: map[string]fileEntry{}}
	for _, f := range files {
		rep.Bytes += max(f.Size, 0)
	}
	if p != nil {
		p.Total.Store(rep.Bytes)
	}
	for _, f := range files {
		entry := fileEntry{Size: f.Size, ETag: f.ETag}
		if !have(dir, old, f) {
			n, err := download(ctx, dir, f, src, p)
			rep.Fetched += n
			if err != nil {
				return rep, err
			}
			entry.Size = n
		} else if p != nil {
			p.Done.Add(f.Size)
		}
		next.Files[f.Rel] = entry
	}
	removeStale(dir, old, next)
	if err := writeManifest(dir, next); err != nil {
		return rep, classifyFS(err)
	}
	rep.Files, rep.Seconds = countFiles(dir), time.Since(start).Seconds()
	return rep, nil
}

// have: the cache holds f as the source has it (the manifest's size and fingerprint, and the file's size).
func have(dir string, m manifest, f remote) bool {
	e, ok := m.Files[f.Rel]
	if !ok || e.ETag != f.ETag || f.Size >= 0 && e.Size != f.Size {
		return false
	}
	if isArchive(f.Rel) {
		return true // unpacked: its files are checked as a whole by the manifest
	}
	info, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f.Rel)))
	return err == nil && info.Size() == e.Size
}

// download copies one file (or unpacks one archive) into dir and returns the bytes read from the source.
func download(ctx context.Context, dir string, f remote, src Source, p *Progress) (int64, error) {
	var n int64
	_, err := retry(ctx, func() (struct{}, error) {
		var err error
		n, err = copyOnce(ctx, dir, f, p)
		return struct{}{}, err
	})
	if err != nil {
		return n, fmt.Errorf("%s: %w", joinURI(src, f.Rel), err)
	}
	return n, nil
}

func copyOnce(ctx context.Context, dir string, f remote, p *Progress) (int64, error) {
	r, err := f.open(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = r.Close() }()
	counted := &countingReader{r: r, p: p}
	if isArchive(f.Rel) {
		err = unpack(counted, dir, strings.HasSuffix(f.Rel, ".gz") || strings.HasSuffix(f.Rel, ".tgz"))
		return counted.n, err
	}
	dst := filepath.Join(dir, filepath.FromSlash(f.Rel))
	if err := writeFile(dst, counted); err != nil {
		return counted.n, err
	}
	if f.Size >= 0 && counted.n != f.Size {
		_ = os.Remove(dst)
		return counted.n, transientf("read %d bytes of %d", counted.n, f.Size)
	}
	return counted.n, nil
}

// writeFile writes r to dst through a temporary file beside it, readable by every user: the fetcher may
// run as root or as another user than the trainers that read the cache.
func writeFile(dst string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return classifyFS(err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".fetch-*") // mode 0600
	if err != nil {
		return classifyFS(err)
	}
	err = tmp.Chmod(0o644)
	if err == nil {
		_, err = io.Copy(tmp, r)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return classifyFS(err)
	}
	return nil
}

func isArchive(rel string) bool {
	return strings.HasSuffix(rel, ".tar") || strings.HasSuffix(rel, ".tar.gz") || strings.HasSuffix(rel, ".tgz")
}

// unpack writes a tar stream's regular files and directories under dir; other entries (links, devices)
// and paths leaving dir are refused.
func unpack(r io.Reader, dir string, gz bool) error {
	if gz {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return permanentf("not a gzip archive: %v", err)
		}
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return transientf("reading the archive: %v", err)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." || name == ManifestFile {
			continue
		}
		if strings.HasPrefix(name, "../") || name == ".." || path.IsAbs(name) {
			return permanentf("archive entry %q leaves the directory", h.Name)
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(dst, 0o755)
		case tar.TypeReg:
			err = writeFile(dst, tr)
		default:
			return permanentf("archive entry %q is not a file or a directory", h.Name)
		}
		if err != nil {
			return classifyFS(err)
		}
	}
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

func readManifest(dir, uri string) manifest {
	var m manifest
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil || json.Unmarshal(data, &m) != nil || m.Source != uri {
		return manifest{}
	}
	return m
}

func writeManifest(dir string, m manifest) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, ManifestFile), strings.NewReader(string(data)))
}

// removeStale removes the files an earlier fetch of the same source wrote that the source no longer has.
func removeStale(dir string, old, next manifest) {
	for rel := range old.Files {
		if _, ok := next.Files[rel]; !ok && !isArchive(rel) {
			_ = os.Remove(filepath.Join(dir, filepath.FromSlash(rel)))
		}
	}
}

// countFiles counts the regular files under dir, the manifest left out.
func countFiles(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() && e.Name() != ManifestFile {
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
