package inputs

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Source
		wantErr string
	}{
		{in: "bert-base-uncased", want: Source{Kind: Name, URI: "bert-base-uncased"}},
		{in: "pvc://coco/train2017/", want: Source{Kind: PVC, URI: "pvc://coco/train2017/", Host: "coco", Path: "train2017"}},
		{in: "pvc://coco", want: Source{Kind: PVC, URI: "pvc://coco", Host: "coco"}},
		{in: "nfs://10.0.0.5/exports/imagenet",
			want: Source{Kind: NFS, URI: "nfs://10.0.0.5/exports/imagenet", Host: "10.0.0.5", Path: "exports/imagenet"}},
		{in: "s3://datasets/squad/v2", want: Source{Kind: S3, URI: "s3://datasets/squad/v2", Host: "datasets", Path: "squad/v2"}},
		{in: "gs://models-eu/resnet50", want: Source{Kind: GCS, URI: "gs://models-eu/resnet50", Host: "models-eu", Path: "resnet50"}},
		{in: "hf://google-bert/bert-base-uncased",
			want: Source{Kind: Hub, URI: "hf://google-bert/bert-base-uncased", Host: "google-bert/bert-base-uncased", Revision: "main"}},
		{in: "hf://gpt2@v1.0", want: Source{Kind: Hub, URI: "hf://gpt2@v1.0", Host: "gpt2", Revision: "v1.0"}},
		{in: "https://example.com/data/cifar.tar.gz",
			want: Source{Kind: HTTPS, URI: "https://example.com/data/cifar.tar.gz", Host: "example.com", Path: "data/cifar.tar.gz"}},
		{in: "ftp://host/x", wantErr: `unknown scheme "ftp"`},
		{in: "s3://A_B/x", wantErr: "bucket's name"},
		{in: "s3:///x", wantErr: "bucket's name"},
		{in: "pvc://Coco/x", wantErr: "claim's name"},
		{in: "pvc://coco/../etc", wantErr: "'..'"},
		{in: "nfs:///x", wantErr: "nfs://SERVER/PATH"},
		{in: "hf://a/b/c", wantErr: "hf://ORG/NAME"},
		{in: "hf://org/name@", wantErr: "hf://ORG/NAME"},
		{in: "https://example.com/", wantErr: "one file or archive"},
		{in: "https://user:pw@example.com/x", wantErr: "no user or password"},
		{in: "https://example.com/x/%2e%2e", wantErr: "encoded or not"},
		{in: "https://example.com/%2E%2E/x.tgz", wantErr: "encoded or not"},
		{in: "https://example.com/a/./b", wantErr: "encoded or not"},
	} {
		got, err := Parse(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse(%q) error = %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("Parse(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

// FuzzParse: Parse never panics; what it accepts is a plain name or a source whose parts hold no '..',
// and parsing its URI again gives the same source.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"squad", "pvc://c/p", "nfs://h/e", "s3://b-1/p/q", "gs://bb/x", "hf://o/n@r", "https://h/f.tgz", "s3://", "hf://@", "http://[::1]/x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		src, err := Parse(s)
		if err != nil {
			return
		}
		if src.Kind != Name && (strings.Contains(src.Host, "..") || strings.Contains(src.Path, "..") || src.Host == "") {
			t.Fatalf("Parse(%q) = %+v: a host is required and no part may hold '..'", s, src)
		}
		again, err := Parse(src.URI)
		if err != nil || again != src {
			t.Fatalf("Parse(Parse(%q).URI) = %+v, %v; want %+v", s, again, err, src)
		}
	})
}

func TestRedacted(t *testing.T) {
	for in, want := range map[string]string{
		"https://bucket.s3.amazonaws.com/d.tgz?X-Amz-Signature=abc&X-Amz-Credential=k": "https://bucket.s3.amazonaws.com/d.tgz",
		"https://h/x.bin#frag": "https://h/x.bin",
		"s3://datasets/squad":  "s3://datasets/squad",
		"hf://org/name@v1":     "hf://org/name@v1",
		"http://h:8080/m.tar":  "http://h:8080/m.tar",
	} {
		if got := Redacted(in); got != want {
			t.Errorf("Redacted(%q) = %q, want %q", in, got, want)
		}
	}
}
