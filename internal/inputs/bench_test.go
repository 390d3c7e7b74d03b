package inputs

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkFetchArchive: an https archive of 2,000 files of 4 KiB unpacked into a fresh directory, each
// file through the input directory's os.Root and charged to the budget (make bench-inputs measures a
// whole job's fetch on the local stack).
func BenchmarkFetchArchive(b *testing.B) {
	t := &testing.T{}
	var entries []tarEntry
	for i := range 2000 {
		entries = append(entries, tarEntry{name: fmt.Sprintf("d%d/f%d.bin", i%20, i), content: strings.Repeat("x", 4096)})
	}
	archive := tarGz(t, entries...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(archive) }))
	defer srv.Close()
	src, _ := Parse(srv.URL + "/d.tar.gz")
	src.Kind = HTTP
	b.ReportAllocs()
	for b.Loop() {
		_, err := Fetch(context.Background(), "dataset", src, b.TempDir(), Env{Client: srv.Client()}, nil, &Budget{MaxBytes: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
	}
}
