package checkpoint_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
)

// TestStorageErrorsReadTheSame: a storage fault reads the same at every request and stays small, whatever
// the server (the job's own, a tenant's) answers: a connection reset names no local port, and a huge
// error message is cut.
func TestStorageErrorsReadTheSame(t *testing.T) {
	for _, tc := range []struct {
		name    string
		serve   func(t *testing.T) string // returns the endpoint
		want    string                    // in the message
		maxSize int
	}{
		{name: "connection reset", serve: resetting, want: "connection reset by peer", maxSize: 1024},
		{name: "a huge error message", serve: func(t *testing.T) string {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusForbidden)
				fmt.Fprintf(w, "<Error><Code>AccessDenied</Code><Message>%s</Message><RequestId>%p</RequestId></Error>",
					strings.Repeat("denied ", 1<<20), w)
			}))
			t.Cleanup(srv.Close)
			return srv.URL
		}, want: "api error AccessDenied: denied denied", maxSize: 1024},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := checkpoint.NewS3Store(context.Background(),
				checkpoint.S3Options{Bucket: "bk", Endpoint: tc.serve(t), AccessKey: "a", SecretKey: "b"})
			if err != nil {
				t.Fatal(err)
			}
			var first string
			for i := range 3 {
				_, err := s.List(context.Background(), "p/")
				if err == nil {
					t.Fatal("listing succeeded")
				}
				if i == 0 {
					first = err.Error()
				} else if diff := cmp.Diff(first, err.Error()); diff != "" {
					t.Errorf("the same fault reads differently at request %d (-first +now):\n%s", i+1, diff)
				}
			}
			if !strings.Contains(first, tc.want) || len(first) > tc.maxSize {
				t.Errorf("error of %d bytes %.300q: want %q in at most %d bytes", len(first), first, tc.want, tc.maxSize)
			}
		})
	}
}

// resetting serves a listener that reads each request and resets the connection.
func resetting(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = http.ReadRequest(bufio.NewReader(c))
			_ = c.(*net.TCPConn).SetLinger(0)
			_ = c.Close()
		}
	}()
	return "http://" + l.Addr().String()
}
