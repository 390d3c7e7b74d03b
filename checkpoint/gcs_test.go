package checkpoint_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/storage"
	"github.com/fsouza/fake-gcs-server/fakestorage"
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
