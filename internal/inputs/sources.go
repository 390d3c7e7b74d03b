package inputs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
)

// Env is how the fetcher reaches the sources, from the init container's environment.
type Env struct {
	// S3Endpoint and S3Region: AWS_ENDPOINT_URL_S3 (or AWS_ENDPOINT_URL) and AWS_REGION; credentials come
	// from the AWS default chain (the Secret's keys, or the pod's identity).
	S3Endpoint, S3Region string
	// HubEndpoint is HF_ENDPOINT (https://huggingface.co when unset), HubToken HF_TOKEN.
	HubEndpoint, HubToken string
	// Client makes the hub's and https sources' requests.
	Client *http.Client
}

// EnvFromOS reads Env from the process's environment.
func EnvFromOS() Env {
	e := Env{S3Endpoint: os.Getenv("AWS_ENDPOINT_URL_S3"), S3Region: os.Getenv("AWS_REGION"),
		HubEndpoint: os.Getenv("HF_ENDPOINT"), HubToken: os.Getenv("HF_TOKEN"), Client: sourceClient()}
	if e.S3Endpoint == "" {
		e.S3Endpoint = os.Getenv("AWS_ENDPOINT_URL")
	}
	if e.HubEndpoint == "" {
		e.HubEndpoint = "https://huggingface.co"
	}
	return e
}

// sourceClient makes the hub's and https sources' requests: a server that does not connect or answer in
// time is given up (a stalled body is, by the fetch's IdleTimeout).
func sourceClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = time.Minute
	t.TLSHandshakeTimeout = 30 * time.Second
	return &http.Client{Transport: t}
}

// newLister lists src; a hub source is a dataset repository for the dataset, a model's for the model. An
// object store's listing stops past most objects.
func newLister(ctx context.Context, name string, src Source, env Env, most int) (lister, error) {
	switch src.Kind {
	case S3:
		s, err := checkpoint.NewS3Store(ctx, checkpoint.S3Options{Bucket: src.Host, Region: env.S3Region, Endpoint: env.S3Endpoint})
		return storeLister{s, src.Path, most}, err
	case GCS:
		s, err := checkpoint.NewGCSStore(ctx, src.Host)
		return storeLister{s, src.Path, most}, err
	case Hub:
		return hubLister{src, env, name == "dataset"}, nil
	case HTTP, HTTPS:
		return httpLister{src, env}, nil
	}
	return nil, permanentf("%s is not fetched", src.URI)
}

// storeLister lists an S3 or GCS prefix: every object under it, by its path below the prefix, at most
// most+1 of them (the budget refuses more).
type storeLister struct {
	store interface {
		checkpoint.Opener
		ListUpTo(ctx context.Context, prefix string, most int) ([]checkpoint.Object, error)
	}
	prefix string
	most   int
}

func (s storeLister) list(ctx context.Context) ([]remote, error) {
	prefix := s.prefix
	if prefix != "" {
		prefix += "/"
	}
	objs, err := s.store.ListUpTo(ctx, prefix, s.most)
	if errors.Is(err, checkpoint.ErrEndlessListing) {
		return nil, &Error{Err: err}
	}
	if err != nil {
		return nil, err
	}
	var out []remote
	for _, o := range objs {
		rel := strings.TrimPrefix(o.Key, prefix)
		if rel == "" || strings.HasSuffix(rel, "/") {
			continue // a "directory" placeholder
		}
		key := o.Key
		out = append(out, remote{Rel: rel, Size: o.Size, ETag: o.ETag, open: func(ctx context.Context) (io.ReadCloser, error) {
			return s.store.Open(ctx, key)
		}})
	}
	return sortRemotes(out), nil
}

// hubLister lists a Hugging Face Hub repository's files at a revision with the hub's HTTP API
// (GET /api/models/REPO/revision/REV?blobs=true, /api/datasets/... for a dataset) and reads each from
// /REPO/resolve/REV/FILE (/datasets/REPO/resolve/...).
type hubLister struct {
	src     Source
	env     Env
	dataset bool
}

// urls returns the repository's API URL and the prefix of its files' URLs.
func (h hubLister) urls() (api, files string) {
	base := strings.TrimSuffix(h.env.HubEndpoint, "/")
	rev := url.PathEscape(h.src.Revision)
	if h.dataset {
		return fmt.Sprintf("%s/api/datasets/%s/revision/%s?blobs=true", base, h.src.Host, rev),
			fmt.Sprintf("%s/datasets/%s/resolve/%s/", base, h.src.Host, rev)
	}
	return fmt.Sprintf("%s/api/models/%s/revision/%s?blobs=true", base, h.src.Host, rev),
		fmt.Sprintf("%s/%s/resolve/%s/", base, h.src.Host, rev)
}

func (h hubLister) list(ctx context.Context) ([]remote, error) {
	api, files := h.urls()
	var info struct {
		Siblings []struct {
			Name   string `json:"rfilename"`
			Size   *int64 `json:"size"`
			BlobID string `json:"blobId"`
		} `json:"siblings"`
	}
	if err := h.env.getJSON(ctx, api, h.env.HubToken, &info); err != nil {
		return nil, err
	}
	var out []remote
	for _, s := range info.Siblings {
		if err := LocalName(s.Name); err != nil {
			return nil, permanentf("the hub names a file %q: %v", s.Name, err)
		}
		size := int64(-1)
		if s.Size != nil {
			size = *s.Size
		}
		u := files + escapePath(s.Name)
		out = append(out, remote{Rel: s.Name, Size: size, ETag: s.BlobID, open: func(ctx context.Context) (io.ReadCloser, error) {
			return h.env.get(ctx, u, h.env.HubToken)
		}})
	}
	return sortRemotes(out), nil
}

// httpLister is one file (or archive) at a URL; its size and ETag from a HEAD request.
type httpLister struct {
	src Source
	env Env
}

func (h httpLister) list(ctx context.Context) ([]remote, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, h.src.URI, nil)
	if err != nil {
		return nil, permanentf("%s: %v", h.src.URI, err)
	}
	resp, err := h.env.Client.Do(req)
	if err != nil {
		return nil, transientf("%s: %v", h.src.URI, err)
	}
	_ = resp.Body.Close()
	if err := statusError(h.src.URI, resp); err != nil {
		return nil, err
	}
	size := resp.ContentLength
	if size < 0 {
		size = -1
	}
	rel := path.Base(h.src.Path)
	return []remote{{Rel: rel, Size: size, ETag: strings.Trim(resp.Header.Get("ETag"), `"`), Unpack: isArchive(rel),
		open: func(ctx context.Context) (io.ReadCloser, error) { return h.env.get(ctx, h.src.URI, "") }}}, nil
}

func (e Env) get(ctx context.Context, u, token string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, permanentf("%s: %v", u, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.Client.Do(req)
	if err != nil {
		return nil, transientf("%s: %v", u, err)
	}
	if err := statusError(u, resp); err != nil {
		_ = resp.Body.Close()
		return nil, err
	}
	return resp.Body, nil
}

// maxListingBytes bounds a hub's listing of a repository: a longer answer fails to decode.
const maxListingBytes = 32 << 20

func (e Env) getJSON(ctx context.Context, u, token string, v any) error {
	body, err := e.get(ctx, u, token)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	if err := json.NewDecoder(io.LimitReader(body, maxListingBytes)).Decode(v); err != nil {
		return transientf("%s: %v", u, err)
	}
	return nil
}

// statusError returns nil for a 2xx response, else the status as a permanent or transient error.
func statusError(u string, resp *http.Response) error {
	if resp.StatusCode/100 == 2 {
		return nil
	}
	err := &Error{Transient: transientStatus(resp.StatusCode), Err: fmt.Errorf("%s: %s", u, resp.Status)}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		err.Err = fmt.Errorf("%s: %s (check the credentials: spec.inputs.secretRef)", u, resp.Status)
	}
	return err
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i := range parts {
		parts[i] = url.PathEscape(parts[i])
	}
	return strings.Join(parts, "/")
}
