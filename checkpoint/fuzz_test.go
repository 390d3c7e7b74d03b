package checkpoint

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
)

// FuzzDirStoreKey: no key, however written ("../", absolute, encoded), reaches outside the store's root.
func FuzzDirStoreKey(f *testing.F) {
	for _, k := range []string{
		"ml/a/checkpoint-epoch-1/model.bin", "../etc/passwd", "/abs/path", "a/../../b", "..", "./.", "a//b", "%2e%2e/x", "",
	} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		root := "/data/claim"
		p, err := DirStore{Root: root}.path(key)
		if err == nil && p != root && !strings.HasPrefix(p, root+"/") {
			t.Fatalf("key %q maps to %q, outside %s", key, p, root)
		}
	})
}

// FuzzScan: any listing (keys one per line) is grouped without a panic, and every checkpoint found is a
// checkpoint-epoch-<N> directory directly under the root.
func FuzzScan(f *testing.F) {
	f.Add("ml/a", "ml/a/checkpoint-epoch-1/model.bin\nml/a/checkpoint-epoch-1/_COMPLETE\nml/a/checkpoint-epoch-2/x")
	f.Add("", "checkpoint-epoch-3/_COMPLETE\ncheckpoint-epoch-/x\ncheckpoint-epoch-99999999999/x")
	f.Add("ml/a", "ml/a/../b/checkpoint-epoch-1/_COMPLETE\nml/ab/checkpoint-epoch-1/_COMPLETE")
	f.Fuzz(func(t *testing.T, root, keys string) {
		var objs []Object
		for _, k := range strings.Split(keys, "\n") {
			objs = append(objs, Object{Key: k, Size: 1, Modified: time.Unix(1, 0)})
		}
		for _, c := range Scan(root, objs) {
			want := strings.Trim(root, "/")
			if dir := strings.TrimSuffix(c.Dir, "/"+c.Name); dir != want && (want != "" || dir != c.Name) {
				t.Fatalf("checkpoint %q found outside root %q", c.Dir, root)
			}
			if e, ok := EpochOf(c.Name); !ok || e != c.Epoch {
				t.Fatalf("checkpoint %q has epoch %d", c.Name, c.Epoch)
			}
		}
	})
}

// FuzzAgentResumeFrom: whatever PUT /resume-from names, the agent answers, and its next rotation keeps the
// newest complete checkpoint and deletes nothing outside the job's root.
func FuzzAgentResumeFrom(f *testing.F) {
	for _, u := range []string{"", "/checkpoints/ml/a/checkpoint-epoch-2", "s3://b/../../x", "checkpoint-epoch-999", "%00", "../../../"} {
		f.Add(u)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		dir := t.TempDir()
		store := DirStore{Root: dir}
		ctx := context.Background()
		for _, k := range []string{
			"other/keep.txt", "ml/a/checkpoint-epoch-1/_COMPLETE", "ml/a/checkpoint-epoch-2/_COMPLETE", "ml/a/checkpoint-epoch-3/_COMPLETE",
		} {
			if err := store.Put(ctx, k, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		a := &Agent{Store: store, Root: "ml/a", Policy: Policy{Retention: 1}, Log: logr.Discard()}
		mux := http.NewServeMux()
		agentapi.Handle(mux, a.Serve, a.Acknowledge)
		rec := httptest.NewRecorder()
		query := url.Values{agentapi.ResumeFromParam: {uri}}.Encode()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, agentapi.ResumeFromPath+"?"+query, nil))
		if rec.Code != http.StatusNoContent {
			t.Fatalf("PUT %q: %d", uri, rec.Code)
		}
		a.SyncOnce(ctx)
		for _, keep := range []string{"other/keep.txt", "ml/a/checkpoint-epoch-3/_COMPLETE"} {
			if _, err := os.Stat(filepath.Join(dir, keep)); err != nil {
				t.Fatalf("after PUT %q the rotation removed %s", uri, keep)
			}
		}
	})
}
