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
		{from: "/checkpoints/ml/a/checkpoint-epoch-3", wantErr: ""},
		{from: "/checkpoints/ml/a/checkpoint-epoch-3/", wantErr: ""},
		{from: "pvc://ml/a/checkpoint-epoch-3", wantErr: ""},
		{from: "s3://bucket/ml/a/checkpoint-epoch-3", wantErr: ""},
		{from: "/checkpoints/ml/a/checkpoint-epoch-5", wantErr: "is not a complete checkpoint"},
		{from: "/checkpoints/ml/a/checkpoint-epoch-9", wantErr: "does not exist"},
		{from: "/data/ml/a/checkpoint-epoch-3", wantErr: "is not under the checkpoint volume /checkpoints"},
		{from: "s3://bucket", wantErr: "names no object"},
	}
	for _, tc := range cases {
		err := CheckResumeFrom(ctx, s, tc.from, "/checkpoints")
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("CheckResumeFrom(%s) = %v, want %q", tc.from, err, tc.wantErr)
		}
	}
}
