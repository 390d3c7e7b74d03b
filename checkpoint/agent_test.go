package checkpoint

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
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
	req, _ := http.NewRequest(http.MethodPut, "http://"+l.Addr().String()+"/resume-from?uri="+st.Latest, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT /resume-from: %v %v", resp, err)
	}
	resp.Body.Close()
	if p := a.policy().Protect; !slices.Contains(p, st.Latest) {
		t.Errorf("RESUME_FROM acknowledged over HTTP is not protected: %v", p)
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

// TestAgentKeepsWhatWorkersMayResumeFrom: with retention 1, a checkpoint the operator was told about (and
// may have put into RESUME_FROM) survives rotation until the operator acknowledges a newer RESUME_FROM;
// the one workers started from survives until then too.
func TestAgentKeepsWhatWorkersMayResumeFrom(t *testing.T) {
	ctx := context.Background()
	store := DirStore{Root: t.TempDir()}
	write := func(e int) {
		for _, f := range []string{"model.bin", Marker} {
			if err := store.Put(ctx, "ml/job/"+Dir(e)+"/"+f, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	uri := func(e int) string { return store.URI("ml/job/" + Dir(e)) }
	left := func() []int {
		var got []int
		for _, c := range listAll(t, store).Checkpoints {
			got = append(got, c.Epoch)
		}
		return got
	}
	ag := &Agent{Store: store, Root: "ml/job", Policy: Policy{Retention: 1}, Log: logr.Discard(), ResumeFrom: uri(1)}
	steps := []struct {
		name string
		do   func()
		want []int
	}{
		{"started from epoch 1", func() { write(1); write(2) }, []int{1, 2}},
		{"epoch 2 served to the operator", func() { ag.Serve(); write(3) }, []int{1, 2, 3}},
		{"operator says RESUME_FROM is epoch 2", func() { ag.Acknowledge(uri(2)) }, []int{2, 3}},
		{"epoch 3 served, epoch 4 written", func() { ag.Serve(); write(4) }, []int{2, 3, 4}},
		{"acknowledged epoch 3", func() { ag.Acknowledge(uri(3)) }, []int{3, 4}},
		{"an empty acknowledgement releases nothing", func() { ag.Serve(); ag.Acknowledge("") }, []int{3, 4}},
		{"acknowledged epoch 4", func() { ag.Acknowledge(uri(4)) }, []int{4}},
	}
	for _, s := range steps {
		s.do()
		if st := ag.SyncOnce(ctx); st.Error != "" {
			t.Fatalf("%s: %s", s.name, st.Error)
		}
		if diff := cmp.Diff(s.want, left()); diff != "" {
			t.Errorf("%s: checkpoints left (-want +got):\n%s", s.name, diff)
		}
	}
}

func listAll(t *testing.T, s Store) Report {
	t.Helper()
	r, err := Sync(context.Background(), s, "ml/job", Policy{Retention: 1 << 20}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return r
}
