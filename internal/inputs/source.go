// Package inputs delivers a TrainingJob's model and dataset: it parses their source URIs (used by the
// builders and admission's twin in Go) and fetches object-store, hub and HTTP sources into the job's
// input cache (run in the workers' init container by `manager fetch-inputs`), verified and reused by
// every later attempt.
package inputs

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Kind is what a source is.
type Kind string

// The kinds of source. A Name is a plain name (no "://"): passed to the workers as it is.
const (
	Name  Kind = "name"
	PVC   Kind = "pvc"
	NFS   Kind = "nfs"
	S3    Kind = "s3"
	GCS   Kind = "gs"
	Hub   Kind = "hf"
	HTTPS Kind = "https"
	HTTP  Kind = "http"
)

// Source is a parsed model or dataset.
type Source struct {
	Kind Kind
	// URI is the source as written.
	URI string
	// Host is the claim (pvc), the server (nfs), the bucket (s3, gs), the repository ORG/NAME (hf) or the
	// host (http, https).
	Host string
	// Path is the path in the claim or export, the key prefix in the bucket, or the URL's path; no
	// leading or trailing slash except nfs's, which is absolute.
	Path string
	// Revision is a hub repository's branch, tag or commit (main when unset).
	Revision string
}

// Fetched is true for the kinds the init container copies into the cache; pvc and nfs are mounted where
// they are, and a plain name is only a name.
func (s Source) Fetched() bool {
	switch s.Kind {
	case S3, GCS, Hub, HTTPS, HTTP:
		return true
	}
	return false
}

var (
	claimName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	bucket    = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$`)
	hubRepo   = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*$`)
	revision  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]*$`)
)

// Parse reads a model or dataset: a plain name, or pvc://CLAIM[/path], nfs://SERVER/path,
// s3://BUCKET[/prefix], gs://BUCKET[/prefix], hf://[ORG/]NAME[@revision], https://HOST/path (one file, a
// .tar, .tar.gz or .tgz archive is unpacked) or http://HOST/path.
func Parse(s string) (Source, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return Source{Kind: Name, URI: s}, nil
	}
	src := Source{Kind: Kind(scheme), URI: s}
	if strings.Contains(rest, "..") {
		return src, fmt.Errorf("%q: a source must not contain '..'", s)
	}
	switch src.Kind {
	case PVC, NFS, S3, GCS:
		host, path, _ := strings.Cut(rest, "/")
		src.Host, src.Path = host, strings.Trim(path, "/")
		return src, checkStore(src)
	case Hub:
		repo, rev, hasRev := strings.Cut(strings.Trim(rest, "/"), "@")
		src.Host, src.Revision = repo, "main"
		if hasRev {
			src.Revision = rev
		}
		if !hubRepo.MatchString(repo) || !revision.MatchString(src.Revision) {
			return src, fmt.Errorf("%q: want hf://ORG/NAME or hf://ORG/NAME@REVISION", s)
		}
		return src, nil
	case HTTPS, HTTP:
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || strings.Trim(u.Path, "/") == "" || u.User != nil {
			return src, fmt.Errorf("%q: want %s://HOST/PATH of one file or archive, with no user or password in it", s, scheme)
		}
		if hasDotSegment(u.Path) || strings.Contains(u.Path, "\\") {
			return src, fmt.Errorf("%q: a source must not contain '..' or '.' segments, encoded or not", s)
		}
		src.Host, src.Path = u.Host, strings.Trim(u.Path, "/")
		return src, nil
	}
	return src, fmt.Errorf("%q: unknown scheme %q: use a plain name, pvc://, nfs://, s3://, gs://, hf:// or https://", s, scheme)
}

// hasDotSegment reports whether a decoded path has a "." or ".." segment.
func hasDotSegment(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

func checkStore(src Source) error {
	switch {
	case src.Kind == PVC && !claimName.MatchString(src.Host):
		return fmt.Errorf("%q: want pvc://CLAIM/PATH with a claim's name", src.URI)
	case src.Kind == NFS && (src.Host == "" || strings.ContainsAny(src.Host, " ?#@")):
		return fmt.Errorf("%q: want nfs://SERVER/PATH", src.URI)
	case (src.Kind == S3 || src.Kind == GCS) && !bucket.MatchString(src.Host):
		return fmt.Errorf("%q: want %s://BUCKET/PREFIX with a bucket's name", src.URI, src.Kind)
	}
	return nil
}

// Redacted returns uri without what may be a credential: an https URL's query (a presigned URL's signature),
// fragment and user info. The fetcher's progress endpoint, which any pod that reaches it may read, shows
// it so.
func Redacted(uri string) string {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != string(HTTPS) && u.Scheme != string(HTTP) {
		return uri
	}
	u.RawQuery, u.Fragment, u.RawFragment, u.User = "", "", "", nil
	return u.String()
}

// ExportPath returns an nfs source's exported path (absolute).
func (s Source) ExportPath() string { return "/" + s.Path }
