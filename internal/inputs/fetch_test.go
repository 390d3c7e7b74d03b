package inputs

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
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

func init() { firstBackoff = 10 * time.Millisecond } // 10 ms: the retry tests need no real backoff

// files reads every file under dir (the manifest left out) as path -> content, and checks that every
// user may read it: the trainers may run as another user than the fetcher.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || info.Name() == ManifestFile {
			return err
		}
		if perm := info.Mode().Perm(); perm&0o044 != 0o044 {
			t.Errorf("%s has mode %v: not readable by the trainers' user", p, perm)
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFetchS3: a prefix of a real S3 server (versitygw) is copied once; a second fetch reads nothing, a
// changed object is read again and a removed one removed; a missing bucket and a wrong key fail for good.
func TestFetchS3(t *testing.T) {
	endpoint := storetest.StartVersityGW(t, "in-access", "in-secret-key")
	t.Setenv("AWS_ACCESS_KEY_ID", "in-access")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "in-secret-key")
	ctx := context.Background()
	store, err := checkpoint.NewS3Store(ctx,
		checkpoint.S3Options{Bucket: "datasets", Endpoint: endpoint, AccessKey: "in-access", SecretKey: "in-secret-key"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("datasets")}); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"squad/train.json": strings.Repeat("q", 3000), "squad/dev/dev.json": "dev", "squadx/other": "not ours",
	} {
		if err := store.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	env := Env{S3Endpoint: endpoint}
	src, _ := Parse("s3://datasets/squad")
	dir := t.TempDir()
	rep, err := Fetch(ctx, "dataset", src, dir, env, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"train.json": strings.Repeat("q", 3000), "dev/dev.json": "dev"}
	if diff := cmp.Diff(want, files(t, dir)); diff != "" {
		t.Errorf("fetched (-want +got):\n%s", diff)
	}
	if rep.Bytes != 3003 || rep.Fetched != 3003 || rep.Files != 2 {
		t.Errorf("first fetch: %+v, want 3003 bytes in 2 files, all read", rep)
	}
	if rep, err = Fetch(ctx, "dataset", src, dir, env, nil, nil); err != nil || rep.Fetched != 0 || rep.Bytes != 3003 {
		t.Errorf("second fetch: %+v, %v; want nothing read", rep, err)
	}
	_ = store.Put(ctx, "squad/dev/dev.json", []byte("dev v2"))
	_ = store.Delete(ctx, []string{"squad/train.json"})
	if rep, err = Fetch(ctx, "dataset", src, dir, env, nil, nil); err != nil || rep.Fetched != 6 {
		t.Errorf("after a change: %+v, %v; want the changed object alone read (6 bytes)", rep, err)
	}
	if diff := cmp.Diff(map[string]string{"dev/dev.json": "dev v2"}, files(t, dir)); diff != "" {
		t.Errorf("after a change (-want +got):\n%s", diff)
	}
	for uri, want := range map[string]string{"s3://no-such-bucket/x": "NoSuchBucket", "s3://datasets/empty": "has no files"} {
		src, _ := Parse(uri)
		_, err := Fetch(ctx, "dataset", src, t.TempDir(), env, nil, nil)
		if err == nil || IsTransient(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a permanent error containing %q", uri, err, want)
		}
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	if _, err := Fetch(ctx, "dataset", src, t.TempDir(), env, nil, nil); err == nil || IsTransient(err) ||
		!strings.Contains(err.Error(), "403") {
		t.Errorf("a wrong key: %v, want a permanent 403", err)
	}
}

// TestFetchGCS: a prefix of the GCS emulator, reached the way the init container does
// (STORAGE_EMULATOR_HOST), fetched once.
func TestFetchGCS(t *testing.T) {
	srv, err := fakestorage.NewServerWithOptions(
		fakestorage.Options{Scheme: "http", Host: "127.0.0.1", Port: 0, PublicHost: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	srv.CreateObject(fakestorage.Object{
		ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "models", Name: "resnet/weights.pt"}, Content: []byte("weights"),
	})
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(srv.URL(), "http://"))
	src, _ := Parse("gs://models/resnet")
	dir := t.TempDir()
	ctx := context.Background()
	rep, err := Fetch(ctx, "model", src, dir, Env{}, nil, nil)
	if err != nil || rep.Fetched != 7 || files(t, dir)["weights.pt"] != "weights" {
		t.Fatalf("first fetch: %+v, %v, files %v", rep, err, files(t, dir))
	}
	if rep, err := Fetch(ctx, "model", src, dir, Env{}, nil, nil); err != nil || rep.Fetched != 0 {
		t.Errorf("second fetch: %+v, %v; want nothing read", rep, err)
	}
	missing, _ := Parse("gs://no-such-bucket/x")
	if _, err := Fetch(ctx, "model", missing, t.TempDir(), Env{}, nil, nil); err == nil || IsTransient(err) {
		t.Errorf("a missing bucket: %v, want a permanent error", err)
	}
}

// TestFetchHub: a model and a dataset repository from the hub's file API, with a token; a busy hub is
// tried again; a repository that does not exist fails for good naming it.
func TestFetchHub(t *testing.T) {
	h := &hubtest.Hub{Token: "hf_secret", Repos: map[string]map[string]string{
		"models/google-bert/bert-base-uncased": {"config.json": "{}", "model.safetensors": "tensors"},
		"datasets/rajpurkar/squad":             {"plain_text/train.parquet": "rows"},
	}}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	env := Env{HubEndpoint: srv.URL, HubToken: "hf_secret", Client: srv.Client()}
	ctx := context.Background()
	model, _ := Parse("hf://google-bert/bert-base-uncased")
	dir := t.TempDir()
	h.Fail.Store(2)
	rep, err := Fetch(ctx, "model", model, dir, env, nil, nil)
	if err != nil || rep.Fetched != 9 || rep.Files != 2 {
		t.Fatalf("model: %+v, %v", rep, err)
	}
	if rep, err := Fetch(ctx, "model", model, dir, env, nil, nil); err != nil || rep.Fetched != 0 || h.Served.Load() != 9 {
		t.Errorf("model again: %+v, %v, hub served %d bytes; want 9 in all", rep, err, h.Served.Load())
	}
	data, _ := Parse("hf://rajpurkar/squad")
	ddir := t.TempDir()
	if _, err := Fetch(ctx, "dataset", data, ddir, env, nil, nil); err != nil || files(t, ddir)["plain_text/train.parquet"] != "rows" {
		t.Errorf("dataset: %v, files %v", err, files(t, ddir))
	}
	missing, _ := Parse("hf://org/missing")
	if _, err := Fetch(ctx, "model", missing, t.TempDir(), env, nil, nil); err == nil || IsTransient(err) ||
		!strings.Contains(err.Error(), "404") {
		t.Errorf("a missing repository: %v, want a permanent 404", err)
	}
	env.HubToken = ""
	if _, err := Fetch(ctx, "model", model, t.TempDir(), env, nil, nil); err == nil || IsTransient(err) ||
		!strings.Contains(err.Error(), "spec.inputs.secretRef") {
		t.Errorf("no token: %v, want a permanent 401 naming the secret", err)
	}
	h.Fail.Store(100)
	if _, err := Fetch(ctx, "model", model, t.TempDir(), env, nil, nil); err == nil ||
		!strings.Contains(err.Error(), fmt.Sprintf("tried %d times", Tries)) {
		t.Errorf("a hub that stays busy: %v, want it tried %d times", err, Tries)
	}
}

// TestFetchArchive: an https .tar.gz is unpacked, not fetched again while its ETag holds, and an entry
// that would leave the directory is refused.
func TestFetchArchive(t *testing.T) {
	archive := func(entries map[string]string) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		for name, c := range entries {
			_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(c)), Typeflag: tar.TypeReg})
			_, _ = tw.Write([]byte(c))
		}
		_ = tw.Close()
		_ = zw.Close()
		return buf.Bytes()
	}
	var gets atomic.Int32
	good, evil := archive(map[string]string{"cifar/a.bin": "aa", "./cifar/b.bin": "b"}), archive(map[string]string{"../escape": "x"})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := good
		if strings.Contains(r.URL.Path, "evil") {
			body = evil
		}
		w.Header().Set("ETag", `"v1"`)
		if r.Method == http.MethodGet {
			gets.Add(1)
		}
		http.ServeContent(w, r, "x", time0, bytes.NewReader(body))
	}))
	t.Cleanup(srv.Close)
	env := Env{Client: srv.Client()}
	ctx := context.Background()
	src, _ := Parse(srv.URL + "/data/cifar.tar.gz")
	src.Kind = HTTP
	dir := t.TempDir()
	if _, err := Fetch(ctx, "dataset", src, dir, env, nil, nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"cifar/a.bin": "aa", "cifar/b.bin": "b"}, files(t, dir)); diff != "" {
		t.Errorf("unpacked (-want +got):\n%s", diff)
	}
	if rep, err := Fetch(ctx, "dataset", src, dir, env, nil, nil); err != nil || rep.Fetched != 0 || gets.Load() != 1 {
		t.Errorf("again: %+v, %v, %d GETs; want the archive read once", rep, err, gets.Load())
	}
	bad, _ := Parse(srv.URL + "/evil.tar.gz")
	if _, err := Fetch(ctx, "dataset", bad, t.TempDir(), env, nil, nil); err == nil || IsTransient(err) ||
		!strings.Contains(err.Error(), `archive entry "../escape"`) {
		t.Errorf("an escaping entry: %v", err)
	}
}

var time0 = time.Unix(0, 0)

// TestFetchFullVolume: a cache volume that fills up fails the fetch for good, naming the volume (a real
// tmpfs of 64 KiB, mounted here: make test runs as root).
func TestFetchFullVolume(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts a tmpfs (root): make test runs it, make unit (go test -short) does not")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mounting a tmpfs of 64 KiB at %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, 0) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "x", time0, bytes.NewReader(make([]byte, 256<<10)))
	}))
	t.Cleanup(srv.Close)
	src, _ := Parse(srv.URL + "/weights.bin")
	_, err := Fetch(context.Background(), "model", src, filepath.Join(dir, "model"), Env{Client: srv.Client()}, nil, nil)
	if err == nil || IsTransient(err) || !strings.Contains(err.Error(), "the input cache volume is full") {
		t.Errorf("a 256 KiB file into 64 KiB: %v, want a permanent error naming the full volume", err)
	}
}
