package checkpoint

import (
	"context"
	"strings"
	"testing"
)

func TestCheckResumeFrom(t *testing.T) {
	ctx := context.Background()
	s := DirStore{Root: t.TempDir()}
	for _, k := range []string{"ml/a/checkpoint-epoch-3/model.bin", "ml/a/checkpoint-epoch-3/" + Marker, "ml/a/checkpoint-epoch-5/model.bin"} {
		if err := s.Put(ctx, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct{ from, wantErr string }{
		{"/checkpoints/ml/a/checkpoint-epoch-3", ""},
		{"/checkpoints/ml/a/checkpoint-epoch-3/", ""},
		{"pvc://ml/a/checkpoint-epoch-3", ""},
		{"s3://bucket/ml/a/checkpoint-epoch-3", ""},
		{"/checkpoints/ml/a/checkpoint-epoch-5", "is not a complete checkpoint"},
		{"/checkpoints/ml/a/checkpoint-epoch-9", "does not exist"},
		{"/data/ml/a/checkpoint-epoch-3", "is not under the checkpoint volume /checkpoints"},
		{"s3://bucket", "names no object"},
	}
	for _, tc := range cases {
		err := CheckResumeFrom(ctx, s, tc.from, "/checkpoints")
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("CheckResumeFrom(%s) = %v, want %q", tc.from, err, tc.wantErr)
		}
	}
}
