package derive

import (
	"strings"
	"testing"
)

// TestInRunRefuses: paths that are not the run's own checkpoint directory, or that a trainer would read
// elsewhere, must not be accepted.
func TestInRunRefuses(t *testing.T) {
	s3 := Place{NameRoot: "ml/a", RunRoot: "ml/a/uid-1", Store: "s3://b"}
	mnt := Place{NameRoot: "ml/a", RunRoot: "ml/a/uid-1", Mount: "/checkpoints"}
	for _, tc := range []struct {
		uri   string
		place Place
	}{
		{"s3://b/ml/a/uid-1/checkpoint-epoch-1/..", s3},
		{"s3://b/ml/a/uid-1/checkpoint-epoch-1%2F..%2F..", s3},
		{"s3://b/ml/a/uid-1/%2e%2e/checkpoint-epoch-1", s3},
		{"s3://b/ml/a/uid-1//checkpoint-epoch-1", s3},
		{"s3://b/ml/a/uid-1/checkpoint-epoch-1\\..\\..", s3},
		{"s3://b/ml/a/uid-1/checkpoint-epoch-1?versionId=x", s3},
		{"s3://b/ml/a/uid-1/checkpoint-epoch-1#x", s3},
		{"s3://b/ml/a/uid-1/checkpoint-epoch-１", s3},
		{"s3://b.evil/ml/a/uid-1/checkpoint-epoch-1", s3},
		{"s3://b/ml/a/uid-1/checkpoint-epoch-1.", s3},
		{"/mnt/xml/a/uid-1/checkpoint-epoch-1", mnt},
		{"/mnt/other/b/uid-9/ml/a/uid-1/checkpoint-epoch-1", mnt}, // another job's directory
		{"/mnt/ml/a/uid-1/ml/a/uid-1/checkpoint-epoch-1", mnt},    // a subdirectory, not directly in
		{"/etc/ml/a/uid-1/checkpoint-epoch-1", mnt},               // anything the pod has
		{"/mnt//ml/a/uid-1/checkpoint-epoch-1", mnt},
		{"/mnt/..%2f/ml/a/uid-1/checkpoint-epoch-1", mnt},
		{"/mnt/ml/a/uid-1/checkpoint-epoch-1\u200b", mnt},
		{"/" + strings.Repeat("x/", 500) + "ml/a/uid-1/checkpoint-epoch-1", mnt},
	} {
		if InRun(tc.uri, tc.place) {
			t.Errorf("InRun accepted %q (store %q)", tc.uri, tc.place.Store)
		}
	}
}
