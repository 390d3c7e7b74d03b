package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/storage"
	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/storetest"
)

var gcsBuckets atomic.Int64

// TestGCSStoreConformance runs the suite against fake-gcs-server, the GCS emulator, served over HTTP on
// loopback with the client pointed at it the standard way (endpoint, no authentication).
func TestGCSStoreConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a GCS emulator: make test runs it, make unit (go test -short) does not")
	}
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{Scheme: "http", Host: "127.0.0.1", Port: 0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	storetest.Run(t, func(t *testing.T) checkpoint.Store {
		bucket := fmt.Sprintf("checkpoints-%d", gcsBuckets.Add(1))
		srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: bucket})
		s, err := checkpoint.NewGCSStore(context.Background(), bucket,
			option.WithEndpoint(srv.URL()+"/storage/v1/"), option.WithoutAuthentication(), storage.WithJSONReads())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// TestGCSErrorsReadTheSameAtEveryRequest: an error from GCS reads without what changes from one request
// to the next (its details, its body), so the agent's report, the job's condition and its event say the
// same for as long as the fault is the same.
func TestGCSErrorsReadTheSameAtEveryRequest(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `{"error":{"code":403,"message":"caller does not have storage.objects.list access",`+
			`"errors":[{"reason":"forbidden","message":"denied"}],"details":[{"@type":"type.googleapis.com/google.rpc.RequestInfo",`+
			`"requestId":"req-%d"}]}}`, requests.Add(1))
	}))
	t.Cleanup(srv.Close)
	s, err := checkpoint.NewGCSStore(context.Background(), "ckpt", option.WithEndpoint(srv.URL+"/storage/v1/"),
		option.WithoutAuthentication(), option.WithHTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	var first string
	for i := range 3 {
		_, err := s.List(context.Background(), "ml/a/")
		var g *googleapi.Error
		if !errors.As(err, &g) || g.Code != http.StatusForbidden {
			t.Fatalf("error %v: want the API's 403", err)
		}
		if i == 0 {
			first = err.Error()
		} else if err.Error() != first {
			t.Errorf("the same fault reads differently at request %d (-first +now):\n%s", i+1, cmp.Diff(first, err.Error()))
		}
	}
	if want := "listing gs://ckpt/ml/a/: googleapi: Error 403: caller does not have storage.objects.list access, forbidden"; first != want {
		t.Errorf("error %q, want %q", first, want)
	}
}
