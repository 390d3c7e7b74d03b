package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
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
	a := &Agent{
		Store: store, Root: "ml/job", Policy: Policy{Retention: 2}, Interval: 20 * time.Millisecond, Log: logr.Discard(),
	}
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
	if st.LatestEpoch != 3 || st.Deleted != 1 || st.Count != 2 || st.SizeBytes != 20 ||
		st.Latest != store.URI("ml/job/checkpoint-epoch-3") || st.Error != "" {
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
	s, err := NewS3Store(context.Background(),
		S3Options{Bucket: "b", Endpoint: "http://127.0.0.1:1", AccessKey: "a", SecretKey: "s"})
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
		{name: "started from epoch 1", do: func() { write(1); write(2) }, want: []int{1, 2}},
		{name: "epoch 2 served to the operator", do: func() { ag.Serve(); write(3) }, want: []int{1, 2, 3}},
		{name: "operator says RESUME_FROM is epoch 2", do: func() { ag.Acknowledge(uri(2)) }, want: []int{2, 3}},
		{name: "epoch 3 served, epoch 4 written", do: func() { ag.Serve(); write(4) }, want: []int{2, 3, 4}},
		{name: "acknowledged epoch 3", do: func() { ag.Acknowledge(uri(3)) }, want: []int{3, 4}},
		{name: "an empty acknowledgement releases nothing", do: func() { ag.Serve(); ag.Acknowledge("") }, want: []int{3, 4}},
		{name: "acknowledged epoch 4", do: func() { ag.Acknowledge(uri(4)) }, want: []int{4}},
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

// TestAgentResumeFromNeedsTheToken: against the agent's real handler, PUT /resume-from (here naming a
// checkpoint beyond all, which would release every protected one) changes nothing without the job's
// token: not without an Authorization header, not with another token, not with the token in another
// form; with it, the acknowledgement is taken and rotation keeps only `retention`. An agent without a
// token (a Job built before tokens) takes any, as before. GET /status needs no token.
func TestAgentResumeFromNeedsTheToken(t *testing.T) {
	const token = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
	cases := []struct {
		name           string
		agentToken     string
		authorization  string // the request's Authorization header; "" for none
		wantCode       int
		wantLeft       []int // epochs left after the next rotation
		wantResumeFrom int   // the epoch the agent takes RESUME_FROM to name
	}{
		{name: "no token", agentToken: token,
			wantCode: http.StatusUnauthorized, wantLeft: []int{1, 3}, wantResumeFrom: 1},
		{name: "another job's token", agentToken: token, authorization: "Bearer " + strings.Repeat("0", len(token)),
			wantCode: http.StatusUnauthorized, wantLeft: []int{1, 3}, wantResumeFrom: 1},
		{name: "the token and more", agentToken: token, authorization: "Bearer " + token + "0",
			wantCode: http.StatusUnauthorized, wantLeft: []int{1, 3}, wantResumeFrom: 1},
		{name: "the token without its scheme", agentToken: token, authorization: token,
			wantCode: http.StatusUnauthorized, wantLeft: []int{1, 3}, wantResumeFrom: 1},
		{name: "an empty bearer token", agentToken: token, authorization: "Bearer ",
			wantCode: http.StatusUnauthorized, wantLeft: []int{1, 3}, wantResumeFrom: 1},
		{name: "the job's token", agentToken: token, authorization: "Bearer " + token,
			wantCode: http.StatusNoContent, wantLeft: []int{3}, wantResumeFrom: 999},
		{name: "an agent without a token takes any", authorization: "",
			wantCode: http.StatusNoContent, wantLeft: []int{3}, wantResumeFrom: 999},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := DirStore{Root: t.TempDir()}
			for e := 1; e <= 3; e++ {
				if err := store.Put(ctx, "ml/job/"+Dir(e)+"/"+Marker, []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
			uri := func(e int) string { return store.URI("ml/job/" + Dir(e)) }
			a := &Agent{
				Store: store, Root: "ml/job", Policy: Policy{Retention: 1}, Log: logr.Discard(),
				ResumeFrom: uri(1), Token: tc.agentToken,
			}
			a.SyncOnce(ctx)
			srv := httptest.NewServer(a.Handler())
			defer srv.Close()

			resp, err := http.Get(srv.URL + agentapi.StatusPath) // the operator reads: epoch 3 is protected from now on
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /status without a token: %s", resp.Status)
			}
			query := url.Values{agentapi.ResumeFromParam: {uri(999)}}.Encode()
			req, _ := http.NewRequest(http.MethodPut, srv.URL+agentapi.ResumeFromPath+"?"+query, nil)
			if tc.authorization != "" {
				req.Header.Set("Authorization", tc.authorization)
			}
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if st := a.SyncOnce(ctx); st.Error != "" {
				t.Fatal(st.Error)
			}
			var left []int
			for _, c := range listAll(t, store).Checkpoints {
				left = append(left, c.Epoch)
			}
			type outcome struct {
				Code       int
				Left       []int
				ResumeFrom string
			}
			got := outcome{Code: resp.StatusCode, Left: left, ResumeFrom: a.policy().Protect[len(a.policy().Protect)-1]}
			want := outcome{Code: tc.wantCode, Left: tc.wantLeft, ResumeFrom: uri(tc.wantResumeFrom)}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("status, checkpoints left, RESUME_FROM (-want +got):\n%s", diff)
			}
		})
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

// failingStore is a store whose listing fails with err.
type failingStore struct {
	DirStore
	err error
}

func (s failingStore) List(context.Context, string) ([]Object, error) { return nil, s.err }

// TestAgentReportsABoundedError: the error a report carries is bounded (maxReportedError): the report is
// also the agent's termination message, of which the kubelet keeps 4 KiB, and must stay readable JSON.
func TestAgentReportsABoundedError(t *testing.T) {
	a := &Agent{Store: failingStore{DirStore: DirStore{Root: t.TempDir()}, err: errors.New(strings.Repeat("é", 100000))},
		Root: "ml/job", Policy: Policy{Retention: 1}, Log: logr.Discard()}
	st := a.SyncOnce(context.Background())
	if len(st.Error) > maxReportedError || !utf8.ValidString(st.Error) || st.Error == "" {
		t.Errorf("error of %d bytes (valid UTF-8: %t), want at most %d", len(st.Error), utf8.ValidString(st.Error), maxReportedError)
	}
}
