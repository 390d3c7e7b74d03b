package inputs

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/google/go-cmp/cmp"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/storetest"
	"github.com/trainingjob-operator/trainingjob-operator/internal/inputs/hubtest"
)

// tarEntry is one entry of a test archive.
type tarEntry struct {
	name, content, link string
	size                int64 // a zero file of this size instead of content
	kind                byte
}

func tarGz(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: e.kind, Linkname: e.link, Size: int64(len(e.content))}
		if e.kind == 0 {
			h.Typeflag = tar.TypeReg
		}
		if e.size > 0 {
			h.Size = e.size
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		var body io.Reader = strings.NewReader(e.content)
		if e.size > 0 {
			body = io.LimitReader(zeros{}, e.size)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, body); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = tw.Close()
	_ = zw.Close()
	return buf.Bytes()
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }

// fakeS3 is a tenant's own S3-compatible endpoint (inputs.endpoint may name any): it lists whatever keys it
// is given and serves each; it checks no signature.
type fakeS3 map[string]string

func (f fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if r.URL.Query().Get("list-type") == "2" {
		type content struct {
			Key  string
			Size int
			ETag string
		}
		res := struct {
			XMLName     xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListBucketResult"`
			Name        string
			KeyCount    int
			IsTruncated bool
			Contents    []content
		}{Name: "bkt", KeyCount: len(f)}
		for k, v := range f {
			sum := sha256.Sum256([]byte(v))
			res.Contents = append(res.Contents, content{Key: k, Size: len(v), ETag: `"` + hex.EncodeToString(sum[:8]) + `"`})
		}
		w.Header().Set("Content-Type", "application/xml")
		_ = xml.NewEncoder(w).Encode(res)
		return
	}
	if v, ok := f[key]; ok {
		_, _ = io.WriteString(w, v)
		return
	}
	http.Error(w, "<Error><Code>NoSuchKey</Code></Error>", http.StatusNotFound)
}

// tree returns every entry under root with its content's hash (directories and links marked), to compare
// before and after a fetch.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "link " + target
		case e.IsDir():
			out[rel] = "dir"
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			out[rel] = fmt.Sprintf("%d %x", len(data), sum[:6])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// outside returns the part of a tree that is not under the job's directory.
func outside(all map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range all {
		if k != "job" && !strings.HasPrefix(k, "job/") {
			out[k] = v
		}
	}
	return out
}

// TestFetchHostileSources: every name a source gives (object keys, hub files, archive entries, a URL's
// last segment, a manifest's entries) stays in the job's directory, and every fetch is bounded (bytes,
// files, a listed size checked before reading). The cache root holds another job's directory ("victim");
// after each row nothing outside the fetching job's directory has changed.
func TestFetchHostileSources(t *testing.T) {
	hub := &hubtest.Hub{Repos: map[string]map[string]string{
		"datasets/evil/up":    {"../../victim/model.pt": "pwned"},
		"datasets/evil/dot":   {"a/./b": "x"},
		"datasets/evil/abs":   {"/etc/x": "x"},
		"datasets/evil/large": {"big.bin": "small"},
	}}
	hubSrv := httptest.NewServer(hub)
	t.Cleanup(hubSrv.Close)
	s3Srv := httptest.NewServer(fakeS3{"m/../../victim/model.pt": "pwned", "m/ok.bin": "ok"})
	t.Cleanup(s3Srv.Close)
	absS3 := httptest.NewServer(fakeS3{"m//etc/x": "pwned"})
	t.Cleanup(absS3.Close)
	okS3 := httptest.NewServer(fakeS3{"m/ok.bin": "ok"})
	t.Cleanup(okS3.Close)
	manS3 := httptest.NewServer(fakeS3{"m/" + ManifestFile: `{"source":"x","files":{}}`})
	t.Cleanup(manS3.Close)
	gcs, err := fakestorage.NewServerWithOptions(fakestorage.Options{Scheme: "http", Host: "127.0.0.1", PublicHost: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gcs.Stop)
	gcs.CreateObject(fakestorage.Object{
		ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "evil", Name: "m/../victim/model.pt"}, Content: []byte("pwned"),
	})
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(gcs.URL(), "http://"))
	t.Setenv("AWS_ACCESS_KEY_ID", "tenant")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "tenant-secret")

	archives := map[string][]byte{
		"up.tar.gz":   tarGz(t, tarEntry{name: "../victim/model.pt", content: "pwned"}),
		"deep.tar.gz": tarGz(t, tarEntry{name: "a/../../victim/model.pt", content: "pwned"}),
		"abs.tar.gz":  tarGz(t, tarEntry{name: "/tmp/x", content: "pwned"}),
		"symlink.tar.gz": tarGz(t,
			tarEntry{name: "l", kind: tar.TypeSymlink, link: "../victim"}, tarEntry{name: "l/model.pt", content: "pwned"}),
		"hard.tar.gz": tarGz(t, tarEntry{name: "h", kind: tar.TypeLink, link: "../victim/model.pt"}),
		"bomb.tar.gz": tarGz(t, tarEntry{name: "zeros", size: 64 << 20}),
		"many.tar.gz": tarGz(t, func() []tarEntry {
			var e []tarEntry
			for i := range 50 {
				e = append(e, tarEntry{name: fmt.Sprintf("f%d", i), content: "x"})
			}
			return e
		}()...),
		"manifest.tar.gz": tarGz(t, tarEntry{name: ManifestFile, content: `{"files":{"../victim/model.pt":{"size":5}}}`}),
	}
	var endlessRead atomic.Int64
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := filepath.Base(r.URL.Path)
		if a, ok := archives[name]; ok {
			_, _ = w.Write(a)
			return
		}
		switch name {
		case "endless.bin": // no Content-Length, never ends
			if r.Method == http.MethodHead {
				return
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			buf := make([]byte, 32<<10)
			for {
				n, err := w.Write(buf)
				endlessRead.Add(int64(n))
				if err != nil {
					return
				}
				if f, ok := w.(http.Flusher); ok {
					f.Flush()
				}
			}
		case "liar.bin": // says 10 bytes, sends 1 MiB
			w.Header().Set("Content-Length", "10")
			if r.Method == http.MethodGet {
				_, _ = w.Write(make([]byte, 10))
			}
		}
	}))
	t.Cleanup(web.Close)
	webSrc := func(name string) Source { s, _ := Parse(web.URL + "/d/" + name); s.Kind = HTTP; return s }
	mib := &Budget{MaxBytes: 1 << 20, Limit: "inputs.cacheSize 1Mi"}
	for _, tc := range []struct {
		name    string
		src     Source
		env     Env
		budget  *Budget
		prepare func(t *testing.T, dir string) // the job's input directory, before the fetch
		wantErr string
	}{
		{name: "s3 key with ../", src: mustParse(t, "s3://bkt/m"), env: Env{S3Endpoint: s3Srv.URL},
			wantErr: `"../../victim/model.pt"`},
		{name: "s3 absolute key below the prefix", src: mustParse(t, "s3://bkt/m"), env: Env{S3Endpoint: absS3.URL},
			wantErr: `"/etc/x"`},
		{name: "s3 key naming the manifest", src: mustParse(t, "s3://bkt/m"), env: Env{S3Endpoint: manS3.URL},
			wantErr: ManifestFile},
		{name: "gcs object with ../", src: mustParse(t, "gs://evil/m"), wantErr: `"../victim/model.pt"`},
		{name: "hub file with ../", src: mustParse(t, "hf://evil/up"), env: Env{HubEndpoint: hubSrv.URL, Client: hubSrv.Client()},
			wantErr: `"../../victim/model.pt"`},
		{name: "hub file with a . segment", src: mustParse(t, "hf://evil/dot"), env: Env{HubEndpoint: hubSrv.URL, Client: hubSrv.Client()},
			wantErr: `"a/./b"`},
		{name: "hub absolute file", src: mustParse(t, "hf://evil/abs"), env: Env{HubEndpoint: hubSrv.URL, Client: hubSrv.Client()},
			wantErr: `"/etc/x"`},
		{name: "url whose last segment is ..", src: Source{Kind: HTTP, URI: web.URL + "/x/%2e%2e", Host: "h", Path: "x/.."},
			env: Env{Client: web.Client()}, wantErr: `".."`},
		{name: "archive entry ../", src: webSrc("up.tar.gz"), env: Env{Client: web.Client()},
			wantErr: `archive entry "../victim/model.pt"`},
		{name: "archive entry a/../../", src: webSrc("deep.tar.gz"), env: Env{Client: web.Client()},
			wantErr: `archive entry "a/../../victim/model.pt"`},
		{name: "archive entry absolute", src: webSrc("abs.tar.gz"), env: Env{Client: web.Client()},
			wantErr: `archive entry "/tmp/x"`},
		{name: "archive symlink", src: webSrc("symlink.tar.gz"), env: Env{Client: web.Client()},
			wantErr: "not a file or a directory"},
		{name: "archive hard link", src: webSrc("hard.tar.gz"), env: Env{Client: web.Client()},
			wantErr: "not a file or a directory"},
		{name: "archive entry naming the manifest", src: webSrc("manifest.tar.gz"), env: Env{Client: web.Client()},
			wantErr: ManifestFile},
		{name: "decompression bomb", src: webSrc("bomb.tar.gz"), env: Env{Client: web.Client()}, budget: mib,
			wantErr: "inputs.cacheSize 1Mi"},
		{name: "archive over the entry limit", src: webSrc("many.tar.gz"), env: Env{Client: web.Client()}, budget: &Budget{MaxFiles: 10},
			wantErr: "more than 10 files and directories"},
		{name: "endless body", src: webSrc("endless.bin"), env: Env{Client: web.Client()}, budget: mib,
			wantErr: "inputs.cacheSize 1Mi"},
		{name: "listed size over the budget", src: mustParse(t, "hf://evil/large"), env: Env{HubEndpoint: hubSrv.URL, Client: hubSrv.Client()},
			budget: &Budget{MaxBytes: 4, Limit: "inputs.cacheSize 4"}, wantErr: "lists 5"},
		{name: "a symlink planted in the cache", src: mustParse(t, "s3://bkt"), env: Env{S3Endpoint: okS3.URL},
			prepare: func(t *testing.T, dir string) { mustSymlink(t, "../../victim/dataset", filepath.Join(dir, "m")) },
			wantErr: "path escapes"},
		{name: "a manifest that lies", src: webSrc("up.tar.gz"), env: Env{Client: web.Client()},
			prepare: func(t *testing.T, dir string) {
				writeTestFile(t, filepath.Join(dir, ManifestFile),
					`{"source":"`+webSrc("up.tar.gz").URI+`","files":{"../../victim/model.pt":{"size":5}}}`)
			}, wantErr: `archive entry "../victim/model.pt"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeTestFile(t, filepath.Join(root, "victim", "model.pt"), "the victim's model")
			writeTestFile(t, filepath.Join(root, "victim", "dataset", "m", "model.pt"), "the victim's data")
			dir := filepath.Join(root, "job", "dataset")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.prepare != nil {
				tc.prepare(t, dir)
			}
			before := outside(tree(t, root))
			_, err := Fetch(context.Background(), "dataset", tc.src, dir, tc.env, nil, tc.budget)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Fetch: %v, want an error containing %q", err, tc.wantErr)
			}
			if IsTransient(err) {
				t.Errorf("Fetch: %v is transient: a hostile source is refused for good", err)
			}
			if diff := cmp.Diff(before, outside(tree(t, root))); diff != "" {
				t.Errorf("outside the job's directory (-before +after):\n%s", diff)
			}
		})
	}
	if n := endlessRead.Load(); n > 8<<20 {
		t.Errorf("the endless body was read for %d bytes, want about the 1 MiB budget", n)
	}
}

// TestFetchBudgetShared: the model and the dataset share one budget; a source that lists more than is
// left is refused before a byte is read (a real S3 server, versitygw), naming the limit.
func TestFetchBudgetShared(t *testing.T) {
	endpoint := storetest.StartVersityGW(t, "in-access", "in-secret-key")
	t.Setenv("AWS_ACCESS_KEY_ID", "in-access")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "in-secret-key")
	ctx := context.Background()
	store, err := checkpoint.NewS3Store(ctx,
		checkpoint.S3Options{Bucket: "data", Endpoint: endpoint, AccessKey: "in-access", SecretKey: "in-secret-key"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("data")}); err != nil {
		t.Fatal(err)
	}
	_ = store.Put(ctx, "model/w.bin", make([]byte, 600<<10))
	_ = store.Put(ctx, "set/d.bin", make([]byte, 600<<10))
	b := &Budget{MaxBytes: 1 << 20, Limit: "inputs.cacheSize 1Mi"}
	env, dir := Env{S3Endpoint: endpoint}, t.TempDir()
	if _, err := Fetch(ctx, "model", mustParse(t, "s3://data/model"), filepath.Join(dir, "model"), env, nil, b); err != nil {
		t.Fatalf("the model alone fits: %v", err)
	}
	rep, err := Fetch(ctx, "dataset", mustParse(t, "s3://data/set"), filepath.Join(dir, "dataset"), env, nil, b)
	if !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), "inputs.cacheSize 1Mi") || rep.Fetched != 0 {
		t.Errorf("the dataset after the model: %+v, %v; want ErrBudget naming inputs.cacheSize before anything is read", rep, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "dataset", "d.bin")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused dataset left a file: %v", err)
	}
}

func TestLocalName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{name: "model.safetensors", ok: true},
		{name: "a/b/c.json", ok: true},
		{name: "..hidden", ok: true},
		{name: ""}, {name: ".."}, {name: "../x"}, {name: "a/../../x"}, {name: "/etc/passwd"}, {name: "a//b"}, {name: "a/./b"},
		{name: "a/"}, {name: "./a"}, {name: `a\..\b`}, {name: "a\x00b"}, {name: ManifestFile}, {name: "d/" + ManifestFile}, {name: ".fetch-123"},
	} {
		if err := LocalName(tc.name); (err == nil) != tc.ok {
			t.Errorf("LocalName(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func mustParse(t *testing.T, s string) Source {
	t.Helper()
	src, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func writeTestFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// TestFetchChargesEveryFileAndDirectory: directories and empty files take space and inodes too: an archive
// of thousands of deep directories and empty files stops at the budget (each counted as a block).
func TestFetchChargesEveryFileAndDirectory(t *testing.T) {
	var entries []tarEntry
	for i := range 3000 {
		entries = append(entries, tarEntry{name: strings.Repeat(fmt.Sprintf("d%d/", i%7), 40) + fmt.Sprint(i), kind: tar.TypeDir})
	}
	for i := range 2000 {
		entries = append(entries, tarEntry{name: fmt.Sprintf("e/%d", i), content: ""})
	}
	archive := tarGz(t, entries...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(archive) }))
	t.Cleanup(srv.Close)
	src, _ := Parse(srv.URL + "/x.tar.gz")
	src.Kind = HTTP
	dir := t.TempDir()
	b := &Budget{MaxBytes: 1 << 20, Limit: "inputs.cacheSize 1Mi"}
	_, err := Fetch(context.Background(), "dataset", src, dir, Env{Client: srv.Client()}, nil, b)
	if !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), "inputs.cacheSize 1Mi") {
		t.Errorf("Fetch: %v, want ErrBudget naming inputs.cacheSize", err)
	}
	n := 0
	_ = filepath.WalkDir(dir, func(string, fs.DirEntry, error) error { n++; return nil })
	if n > (1<<20)/inodeBytes+1 {
		t.Errorf("%d files and directories left under a 1 MiB budget, want at most %d", n, (1<<20)/inodeBytes+1)
	}
}

// TestFetchArchiveChangesReplaceItsFiles: an archive that changes (a new ETag each attempt, new names in
// it) replaces the files the last one unpacked: the cache does not grow past the budget over restarts.
func TestFetchArchiveChangesReplaceItsFiles(t *testing.T) {
	var version atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := version.Load()
		w.Header().Set("ETag", fmt.Sprintf(`"v%d"`, v))
		if r.Method == http.MethodGet {
			_, _ = w.Write(tarGz(t, tarEntry{name: fmt.Sprintf("part-%d.bin", v), content: strings.Repeat("x", 700<<10)}))
		}
	}))
	t.Cleanup(srv.Close)
	src, _ := Parse(srv.URL + "/x.tar.gz")
	src.Kind = HTTP
	dir := t.TempDir()
	for v := range 4 {
		version.Store(int32(v))
		if _, err := Fetch(context.Background(), "dataset", src, dir, Env{Client: srv.Client()}, nil, &Budget{MaxBytes: 1 << 20}); err != nil {
			t.Fatalf("attempt %d: %v", v, err)
		}
	}
	if diff := cmp.Diff(map[string]string{"part-3.bin": strings.Repeat("x", 700<<10)}, files(t, dir)); diff != "" {
		t.Errorf("after 4 versions (-want +got):\n%s", diff)
	}
}

// TestFetchFailedArchiveLeavesNothing: an archive cut short (after a whole entry, each try a new name) is
// tried again; when it fails for good, what the tries unpacked is gone.
func TestFetchFailedArchiveLeavesNothing(t *testing.T) {
	var tries atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			return
		}
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		_ = tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("f%d", tries.Add(1)), Mode: 0o644, Size: 1000, Typeflag: tar.TypeReg})
		_, _ = tw.Write(make([]byte, 1000))
		_ = tw.Flush()
		_, _ = w.Write(buf.Bytes())
		_, _ = w.Write([]byte("cut in a header")) // no second header, no end
	}))
	t.Cleanup(srv.Close)
	src, _ := Parse(srv.URL + "/x.tar")
	src.Kind = HTTP
	dir := t.TempDir()
	b := &Budget{MaxBytes: 1 << 20}
	_, err := Fetch(context.Background(), "dataset", src, dir, Env{Client: srv.Client()}, nil, b)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("tried %d times", Tries)) {
		t.Errorf("Fetch: %v, want the cut archive tried %d times", err, Tries)
	}
	if got := files(t, dir); len(got) != 0 {
		t.Errorf("the failed tries left %v", slices.Collect(maps.Keys(got)))
	}
	if b.used.Load() > int64(inodeBytes) {
		t.Errorf("the budget still holds %d bytes of the failed tries", b.used.Load())
	}
}

// TestFetchObjectStoreTarsAreFiles: an object store's .tar objects (WebDataset shards) are copied as they
// are: only an https source's archive is unpacked.
func TestFetchObjectStoreTarsAreFiles(t *testing.T) {
	shard := func(s string) string { return string(tarGz(t, tarEntry{name: "000000.jpg", content: s})) }
	srv := httptest.NewServer(fakeS3{"shards/shard-000.tar.gz": shard("0"), "shards/shard-001.tar.gz": shard("1")})
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "tenant")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "tenant-secret")
	dir := t.TempDir()
	if _, err := Fetch(context.Background(), "dataset", mustParse(t, "s3://bkt/shards"), dir, Env{S3Endpoint: srv.URL}, nil, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"shard-000.tar.gz": shard("0"), "shard-001.tar.gz": shard("1")}
	if diff := cmp.Diff(want, files(t, dir)); diff != "" {
		t.Errorf("the shards (-want +got):\n%s", diff)
	}
}

// TestFetchEndlessListing: an S3 endpoint whose listing never ends (always truncated, new keys or none)
// is given up past the budget's files, in bounded memory and requests.
func TestFetchEndlessListing(t *testing.T) {
	for _, keys := range []int{1000, 0} {
		var pages atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := pages.Add(1)
			var b strings.Builder
			fmt.Fprintf(&b, `<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bkt</Name>`+
				`<IsTruncated>true</IsTruncated><NextContinuationToken>t%d</NextContinuationToken>`, n)
			for i := range keys {
				fmt.Fprintf(&b, "<Contents><Key>m/%d-%d</Key><Size>1</Size></Contents>", n, i)
			}
			b.WriteString("</ListBucketResult>")
			_, _ = io.WriteString(w, b.String())
		}))
		t.Setenv("AWS_ACCESS_KEY_ID", "tenant")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "tenant-secret")
		_, err := Fetch(context.Background(), "dataset", mustParse(t, "s3://bkt/m"), t.TempDir(),
			Env{S3Endpoint: srv.URL}, nil, &Budget{MaxFiles: 5000})
		srv.Close()
		if !errors.Is(err, ErrBudget) && !errors.Is(err, checkpoint.ErrEndlessListing) || IsTransient(err) {
			t.Errorf("%d keys a page: %v, want a permanent error naming the limit", keys, err)
		}
		if n := pages.Load(); n > 5000/10+10 {
			t.Errorf("%d keys a page: %d pages read, want at most %d", keys, n, 5000/10+10)
		}
	}
}

// TestFetchStalledSource: a server that stops sending is given up after IdleTimeout (and tried again), not
// waited for forever.
func TestFetchStalledSource(t *testing.T) {
	defer func(d time.Duration) { IdleTimeout = d }(IdleTimeout)
	IdleTimeout = 100 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			return
		}
		_, _ = w.Write([]byte("x"))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
	}))
	t.Cleanup(srv.Close)
	src, _ := Parse(srv.URL + "/slow.bin")
	start := time.Now()
	_, err := Fetch(context.Background(), "model", src, t.TempDir(), Env{Client: srv.Client()}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "sent nothing for 100ms") {
		t.Errorf("Fetch: %v, want the stalled source named", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("gave up after %s", d)
	}
}
