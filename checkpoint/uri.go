package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// OpenURI opens the store a location names, with the identity of the environment, and returns the key of
// the location inside it. It is what a trainer uses for CHECKPOINT_DIR, CHECKPOINT_URI and RESUME_FROM:
//   - s3://bucket/key: credentials from the AWS default chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY,
//     which the operator passes from the storage Secret, or the pod's workload identity), AWS_REGION, and
//     a custom endpoint from AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (path-style addressing);
//   - gs://bucket/key: Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, which the
//     operator points at the storage Secret's key, or workload identity); STORAGE_EMULATOR_HOST is honoured;
//   - an absolute path: the local file system (a mounted volume).
func OpenURI(ctx context.Context, uri string) (Store, string, error) {
	if rest, ok := strings.CutPrefix(uri, "s3://"); ok {
		bucket, key := bucketKey(rest)
		endpoint := os.Getenv("AWS_ENDPOINT_URL_S3")
		if endpoint == "" {
			endpoint = os.Getenv("AWS_ENDPOINT_URL")
		}
		s, err := NewS3Store(ctx, S3Options{Bucket: bucket, Region: os.Getenv("AWS_REGION"), Endpoint: endpoint})
		return s, key, err
	}
	if rest, ok := strings.CutPrefix(uri, "gs://"); ok {
		bucket, key := bucketKey(rest)
		s, err := NewGCSStore(ctx, bucket)
		return s, key, err
	}
	if !filepath.IsAbs(uri) {
		return nil, "", fmt.Errorf("checkpoint location %q is neither s3://, gs:// nor an absolute path", uri)
	}
	return DirStore{Root: "/"}, strings.TrimPrefix(filepath.ToSlash(filepath.Clean(uri)), "/"), nil
}

func bucketKey(s string) (bucket, key string) {
	bucket, key, _ = strings.Cut(s, "/")
	return bucket, strings.Trim(key, "/")
}
