package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"cloud.google.com/go/storage"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
)

// GCSStore is a Google Cloud Storage bucket.
type GCSStore struct {
	client *storage.Client
	bucket string
}

// NewGCSStore builds a client for the bucket. With no options the client uses the pod's workload
// identity (Application Default Credentials); option.WithCredentialsJSON passes a key from a Secret.
// STORAGE_EMULATOR_HOST redirects it to an emulator.
func NewGCSStore(ctx context.Context, bucket string, opts ...option.ClientOption) (*GCSStore, error) {
	// JSON reads: one API for every call, the same against GCS and an emulator.
	c, err := storage.NewClient(ctx, append([]option.ClientOption{storage.WithJSONReads()}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("gcs client: %w", err)
	}
	return &GCSStore{client: c, bucket: bucket}, nil
}

// Close releases the client.
func (g *GCSStore) Close() error { return g.client.Close() }

// List iterates the objects under prefix.
func (g *GCSStore) List(ctx context.Context, prefix string) ([]Object, error) {
	return g.ListUpTo(ctx, prefix, 0)
}

// ListUpTo lists as List does, but stops once it holds more than most objects (0: no limit) and returns
// them: a listing that never ends costs bounded memory.
func (g *GCSStore) ListUpTo(ctx context.Context, prefix string, most int) ([]Object, error) {
	var out []Object
	q := &storage.Query{Prefix: prefix}
	if err := q.SetAttrSelection([]string{"Name", "Size", "Updated", "Etag"}); err != nil {
		return nil, err
	}
	it := g.client.Bucket(g.bucket).Objects(ctx, q)
	for {
		a, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("listing gs://%s/%s: %w", g.bucket, prefix, stable(err))
		}
		out = append(out, Object{Key: a.Name, Size: a.Size, Modified: a.Updated, ETag: a.Etag})
		if most > 0 && len(out) > most {
			return out, nil
		}
	}
}

// Get reads an object.
func (g *GCSStore) Get(ctx context.Context, key string) ([]byte, error) {
	r, err := g.client.Bucket(g.bucket).Object(key).NewReader(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", g.URI(key), stable(err))
	}
	defer r.Close()
	return io.ReadAll(r)
}

// Open streams an object.
func (g *GCSStore) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	r, err := g.client.Bucket(g.bucket).Object(key).NewReader(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", g.URI(key), stable(err))
	}
	return r, nil
}

// Put writes an object.
func (g *GCSStore) Put(ctx context.Context, key string, data []byte) error {
	w := g.client.Bucket(g.bucket).Object(key).NewWriter(ctx)
	if _, err := w.Write(data); err != nil {
		_ = w.Close()
		return fmt.Errorf("writing %s: %w", g.URI(key), stable(err))
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", g.URI(key), stable(err))
	}
	return nil
}

// Delete removes objects one by one (GCS has no batch delete in this client); a missing one is fine.
func (g *GCSStore) Delete(ctx context.Context, keys []string) error {
	var errs []error
	for _, k := range keys {
		if err := g.client.Bucket(g.bucket).Object(k).Delete(ctx); err != nil && !errors.Is(err, storage.ErrObjectNotExist) {
			errs = append(errs, fmt.Errorf("deleting %s: %w", g.URI(k), stable(err)))
		}
	}
	return errors.Join(errs...)
}

// URI returns gs://bucket/key.
func (g *GCSStore) URI(key string) string {
	return "gs://" + g.bucket + "/" + strings.TrimPrefix(key, "/")
}
