package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// S3Options locate an S3-compatible bucket.
type S3Options struct {
	Bucket string
	// Region defaults to us-east-1.
	Region string
	// Endpoint is a custom endpoint (MinIO and other S3-compatible servers); path-style addressing is
	// used with it.
	Endpoint string
	// AccessKey and SecretKey are static credentials; when empty the SDK's default chain is used (the
	// pod's workload identity, environment, shared config).
	AccessKey, SecretKey string
}

// S3Store is a bucket of an S3-compatible service.
type S3Store struct {
	client *s3.Client
	bucket string
}

// NewS3Store builds a client for the bucket.
func NewS3Store(ctx context.Context, o S3Options) (*S3Store, error) {
	region := o.Region
	if region == "" {
		region = "us-east-1"
	}
	opts := []func(*config.LoadOptions) error{config.WithRegion(region)}
	if o.AccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(o.AccessKey, o.SecretKey, "")))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3 configuration: %w", err)
	}
	client := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
			so.UsePathStyle = true
		}
	})
	return &S3Store{client: client, bucket: o.Bucket}, nil
}

// Client returns the underlying S3 client.
func (s *S3Store) Client() *s3.Client { return s.client }

// List pages through ListObjectsV2.
func (s *S3Store) List(ctx context.Context, prefix string) ([]Object, error) {
	return s.ListUpTo(ctx, prefix, 0)
}

// ListUpTo lists as List does, but stops once it holds more than most objects (0: no limit) and returns
// them, or fails after more pages than so many objects fill: a listing that never ends (a server of a
// tenant's own) costs bounded memory and time.
func (s *S3Store) ListUpTo(ctx context.Context, prefix string, most int) ([]Object, error) {
	var out []Object
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix})
	for pages := 1; p.HasMorePages(); pages++ {
		if most > 0 && pages > maxPages(most) {
			return nil, fmt.Errorf("listing s3://%s/%s: %w", s.bucket, prefix, ErrEndlessListing)
		}
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing s3://%s/%s: %w", s.bucket, prefix, stable(err))
		}
		for _, o := range page.Contents {
			out = append(out, Object{
				Key:      aws.ToString(o.Key),
				Size:     aws.ToInt64(o.Size),
				Modified: aws.ToTime(o.LastModified),
				ETag:     strings.Trim(aws.ToString(o.ETag), `"`),
			})
		}
		if most > 0 && len(out) > most {
			return out, nil
		}
	}
	return out, nil
}

// Get reads an object.
func (s *S3Store) Get(ctx context.Context, key string) ([]byte, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", s.URI(key), stable(err))
	}
	defer out.Body.Close()
	return io.ReadAll(out.Body)
}

// Open streams an object.
func (s *S3Store) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", s.URI(key), stable(err))
	}
	return out.Body, nil
}

// Put writes an object.
func (s *S3Store) Put(ctx context.Context, key string, data []byte) error {
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: bytes.NewReader(data)})
	if err != nil {
		return fmt.Errorf("writing %s: %w", s.URI(key), stable(err))
	}
	return nil
}

// Delete removes objects with DeleteObjects, 1,000 keys per call.
func (s *S3Store) Delete(ctx context.Context, keys []string) error {
	var errs []error
	for start := 0; start < len(keys); start += 1000 {
		batch := keys[start:min(start+1000, len(keys))]
		ids := make([]types.ObjectIdentifier, len(batch))
		for i := range batch {
			ids[i] = types.ObjectIdentifier{Key: aws.String(batch[i])}
		}
		out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: &s.bucket,
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting from s3://%s: %w", s.bucket, stable(err)))
			continue
		}
		for _, e := range out.Errors {
			if aws.ToString(e.Code) != "NoSuchKey" {
				errs = append(errs, fmt.Errorf("deleting %s: %s: %s", s.URI(aws.ToString(e.Key)), aws.ToString(e.Code), aws.ToString(e.Message)))
			}
		}
	}
	return errors.Join(errs...)
}

// URI returns s3://bucket/key.
func (s *S3Store) URI(key string) string {
	return "s3://" + s.bucket + "/" + strings.TrimPrefix(key, "/")
}
