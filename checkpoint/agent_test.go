package checkpoint

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

func TestAgentRotatesAndServesStatus(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := DirStore{Root: t.TempDir()}
	write := func(e int) {
		for _, f := range []string{"model.bin", Marker} {
			if err := store.Put(ctx, "ml/job/"+Dir(e)+"/"+f, []byte("12345")); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(1)
	write(2)
	a := &Agent{Store: store, Root: "ml/job", Policy: Policy{Retention: 2}, Interval: 20 * time.Millisecond, Log: logr.Discard()}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, l) }()
	write(3)
	var st AgentStatus
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + l.Addr().String() + "/status")
		if err != nil {
			continue
		}
		_ = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if st.LatestEpoch == 3 && st.Deleted == 1 {
			break
		}
	}
	if st.LatestEpoch != 3 || st.Deleted != 1 || st.Count != 2 || st.SizeBytes != 20 || st.Latest != store.URI("ml/job/checkpoint-epoch-3") || st.Error != "" {
		t.Fatalf("status %+v", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestAgentReportsAnUnreachableStore(t *testing.T) {
	s, err := NewS3Store(context.Background(), S3Options{Bucket: "b", Endpoint: "http://127.0.0.1:1", AccessKey: "a", SecretKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := &Agent{Store: s, Root: "ml/job", Policy: Policy{Retention: 1}, Log: logr.Discard()}
	if st := a.SyncOnce(ctx); st.Error == "" {
		t.Fatalf("no error from an unreachable store: %+v", st)
	}
}
