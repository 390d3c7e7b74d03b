package supervisor

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
)

// The source IPs of the tests: Linux routes all of 127/8 to the loopback interface.
const (
	strangerIP = "127.0.0.1"
	kubeletIP  = "127.0.0.2"
	operatorIP = "127.0.0.3"
	slowIP     = "127.0.0.4"
)

// testToken is the job's control token in these tests.
const testToken = "job-token"

// strangerIPs returns 127.0.0.10 to 127.0.0.90: a stranger with more source IPs than maxConns.
func strangerIPs() []string {
	var ips []string
	for i := 10; i <= 90; i++ {
		ips = append(ips, fmt.Sprintf("127.0.0.%d", i))
	}
	return ips
}

// testServer is the supervisor's server as serve starts it, with what its ConnState hook saw.
type testServer struct {
	addr  string
	conns *fairConns
	news  atomic.Int64 // connections the server accepted
	// peak and peakPerSource are the most connections held, and held by one source, after any change.
	peak, peakPerSource atomic.Int64
}

// startServer serves a monitor and a control that takes orders (testToken) on 127.0.0.1 as serve does,
// with the server's connections held by a fairConns that the test reads.
func startServer(t *testing.T) *testServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctl := newControl(Control{Token: testToken, RestartCode: controlapi.RestartCode, StateDir: t.TempDir(),
		TerminationLog: "/nonexistent"}, &tail{})
	ts := &testServer{addr: l.Addr().String(), conns: newFairConns(maxConns, maxConnsPerSource)}
	srv := newServer(newMonitor("", true), ctl, ts.conns)
	track := srv.ConnState
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		track(c, s)
		if s == http.StateNew {
			ts.news.Add(1)
		}
		total, most := ts.held()
		for _, p := range []struct {
			peak *atomic.Int64
			n    int64
		}{{&ts.peak, int64(total)}, {&ts.peakPerSource, int64(most)}} {
			for v := p.peak.Load(); p.n > v && !p.peak.CompareAndSwap(v, p.n); v = p.peak.Load() {
			}
		}
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ts
}

// held returns the connections the server holds, and the most one source holds.
func (ts *testServer) held() (total, most int) {
	ts.conns.mu.Lock()
	defer ts.conns.mu.Unlock()
	for _, n := range ts.conns.counts {
		most = max(most, n)
	}
	return len(ts.conns.held), most
}

// waitAccepted waits until the server accepted n connections in all (its hook saw them).
func (ts *testServer) waitAccepted(t *testing.T, n int64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ts.news.Load() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server accepted %d connections, want %d", ts.news.Load(), n)
		}
	}
}

// dialFrom opens a connection to addr from the source IP ip; the test closes it.
func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// flood opens, from each of ips, silent connections that send nothing, then idle ones that read /healthz
// once and stay open (keep-alive), and waits until the server accepted them all. The server may close any.
func (ts *testServer) flood(t *testing.T, ips []string, silent, idle int) {
	t.Helper()
	before := ts.news.Load()
	for _, ip := range ips {
		for range silent {
			dialFrom(t, ip, ts.addr)
		}
	}
	for _, ip := range ips {
		for range idle {
			c := dialFrom(t, ip, ts.addr)
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: supervisor\r\n\r\n"); err != nil {
				continue // closed for a newer one
			}
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		}
	}
	ts.waitAccepted(t, before+int64(len(ips)*(silent+idle)))
}

// clientFrom returns a client whose connections come from the source IP ip, each request within 5 s.
func clientFrom(t *testing.T, ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

// call is a request of the kubelet or the operator and the status it must get.
type call struct {
	name, ip, method, path string
	token, body            string
	wantStatus             int
}

// probeAndOrders are the kubelet's probe and the operator's reads and order.
var probeAndOrders = []call{
	{name: "probe", ip: kubeletIP, method: "GET", path: "/healthz", wantStatus: http.StatusOK},
	{name: "progress", ip: operatorIP, method: "GET", path: "/metrics", wantStatus: http.StatusOK},
	{name: "exit", ip: operatorIP, method: "GET", path: controlapi.ExitPath, token: testToken, wantStatus: http.StatusOK},
	{name: "restart", ip: operatorIP, method: "POST", path: controlapi.RestartPath, token: testToken,
		body: `{"attempt":1,"graceSeconds":0}`, wantStatus: http.StatusAccepted},
}

// do sends the call and returns the status it got, or an error.
func (c call) do(t *testing.T, addr string) (int, error) {
	req, err := http.NewRequest(c.method, "http://"+addr+c.path, strings.NewReader(c.body))
	if err != nil {
		return 0, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := clientFrom(t, c.ip).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// TestStrangersCannotStarve: however many connections strangers hold, on one source IP or spread over more
// IPs than maxConns, the kubelet's probe and the operator's reads and order get in.
func TestStrangersCannotStarve(t *testing.T) {
	tests := []struct {
		name         string
		ips          []string
		silent, idle int // per IP
	}{
		{name: "one source", ips: []string{strangerIP}, silent: 2 * maxConns, idle: 2 * maxConns},
		{name: "many sources", ips: strangerIPs(), silent: 2, idle: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startServer(t)
			ts.flood(t, tt.ips, tt.silent, tt.idle)
			for _, c := range probeAndOrders {
				status, err := c.do(t, ts.addr)
				if err != nil {
					t.Errorf("%s: %v", c.name, err)
					continue
				}
				if status != c.wantStatus {
					t.Errorf("%s: status %d, want %d", c.name, status, c.wantStatus)
				}
			}
		})
	}
}

// TestConnsBounded: the server never holds more than maxConns connections, nor more than maxConnsPerSource
// of one source, however many strangers open.
func TestConnsBounded(t *testing.T) {
	ts := startServer(t)
	ts.flood(t, []string{strangerIP}, 2*maxConns, maxConns)
	ts.flood(t, strangerIPs(), 3, 1)
	type peaks struct{ Total, PerSource int64 }
	got := peaks{Total: ts.peak.Load(), PerSource: ts.peakPerSource.Load()}
	if got.Total > maxConns || got.PerSource > maxConnsPerSource {
		t.Errorf("connections held at most: %+v, want no more than %+v", got, peaks{Total: maxConns, PerSource: maxConnsPerSource})
	}
	if got.Total < maxConns {
		t.Errorf("held at most %d connections, want the bound %d reached", got.Total, maxConns)
	}
}

// TestActiveConnKept: a connection whose request is being served is never closed for a newcomer, of its
// own source or another: a slow order sent while strangers flood the server is answered.
func TestActiveConnKept(t *testing.T) {
	ts := startServer(t)
	slow := dialFrom(t, slowIP, ts.addr)
	_ = slow.SetDeadline(time.Now().Add(9 * time.Second)) // within the server's ReadTimeout
	body := `{"attempt":1,"graceSeconds":0}`
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: supervisor\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", controlapi.RestartPath, testToken, len(body))
	if _, err := io.WriteString(slow, head+body[:1]); err != nil {
		t.Fatal(err)
	}
	ts.waitActive(t, slowIP)
	ts.flood(t, []string{slowIP}, 2*maxConnsPerSource, 0) // the slow one is its source's oldest
	ts.flood(t, strangerIPs(), 2, 0)                      // its source holds the most
	if _, err := io.WriteString(slow, body[1:]); err != nil {
		t.Fatalf("the slow order's connection was closed: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(slow), nil)
	if err != nil {
		t.Fatalf("the slow order's connection was closed: %v", err)
	}
	_ = resp.Body.Close()
	if diff := cmp.Diff(http.StatusAccepted, resp.StatusCode); diff != "" {
		t.Errorf("the slow order's status (-want +got):\n%s", diff)
	}
}

// waitActive waits until the server serves a request of the source ip.
func (ts *testServer) waitActive(t *testing.T, ip string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		ts.conns.mu.Lock()
		active := false
		for _, h := range ts.conns.held {
			active = active || h.source == ip && h.active
		}
		ts.conns.mu.Unlock()
		if active {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no request of %s is served", ip)
		}
	}
}

// TestFairConnsAdmit: whom a newcomer displaces, on conns that only have remote addresses.
func TestFairConnsAdmit(t *testing.T) {
	tests := []struct {
		name string
		// held are the connections held, oldest first: their source and whether they serve a request.
		held      []fakeHeld
		total     int
		perSource int // at least 2
		newcomer  string
		want      string // the connection closed: "newcomer" or an index in held
	}{
		{name: "room", held: []fakeHeld{{ip: "a"}}, total: 3, newcomer: "b", want: ""},
		{name: "own bound: its oldest idle", held: []fakeHeld{{ip: "a", active: true}, {ip: "a"}, {ip: "b"}}, total: 4,
			newcomer: "a", want: "1"},
		{name: "own bound, all active", held: []fakeHeld{{ip: "a", active: true}, {ip: "a", active: true}}, total: 4,
			newcomer: "a", want: "newcomer"},
		{name: "full: the biggest source's oldest", held: []fakeHeld{{ip: "b"}, {ip: "a"}, {ip: "a"}}, total: 3,
			newcomer: "c", want: "1"},
		{name: "full: the biggest source with an idle one", held: []fakeHeld{{ip: "a", active: true}, {ip: "a", active: true}, {ip: "b"}},
			total: 3, newcomer: "c", want: "2"},
		{name: "full: no fairer share, its own idle one", held: []fakeHeld{{ip: "a"}, {ip: "a"}, {ip: "c"}, {ip: "b"}},
			total: 4, newcomer: "c", want: "2"},
		{name: "full: no fairer share, its own active: the biggest's", held: []fakeHeld{{ip: "a"}, {ip: "a"}, {ip: "c", active: true},
			{ip: "b"}}, total: 4, newcomer: "c", want: "0"},
		{name: "full: one each, its own active: the oldest other", held: []fakeHeld{{ip: "a"}, {ip: "c", active: true}, {ip: "b"}},
			total: 3, newcomer: "c", want: "0"},
		{name: "full: its source holds the most, all active", held: []fakeHeld{{ip: "c", active: true}, {ip: "c", active: true}, {ip: "b"}},
			total: 3, perSource: 3, newcomer: "c", want: "newcomer"},
		{name: "full: idle again after a request", held: []fakeHeld{{ip: "a", idleAgain: true}, {ip: "b"}}, total: 2,
			newcomer: "c", want: "0"},
		{name: "full: one each, a new source takes the oldest", held: []fakeHeld{{ip: "a"}, {ip: "b"}, {ip: "c"}}, total: 3,
			newcomer: "d", want: "0"},
		{name: "full: all active", held: []fakeHeld{{ip: "a", active: true}, {ip: "b", active: true}}, total: 2,
			newcomer: "c", want: "newcomer"},
		{name: "full: all active, a source holds more: its oldest", held: []fakeHeld{{ip: "b", active: true}, {ip: "a", active: true},
			{ip: "a", active: true}}, total: 3, newcomer: "c", want: "1"},
		{name: "full: all active, no fairer share", held: []fakeHeld{{ip: "a", active: true}, {ip: "a", active: true},
			{ip: "c", active: true}}, total: 3, newcomer: "c", want: "newcomer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFairConns(tt.total, max(tt.perSource, 2))
			conns := make([]net.Conn, len(tt.held))
			for i, h := range tt.held {
				conns[i] = &fakeConn{ip: h.ip}
				f.track(conns[i], http.StateNew)
				if h.active || h.idleAgain {
					f.track(conns[i], http.StateActive)
				}
				if h.idleAgain {
					f.track(conns[i], http.StateIdle)
				}
			}
			newcomer := &fakeConn{ip: tt.newcomer}
			f.track(newcomer, http.StateNew)
			got := ""
			for i, c := range conns {
				if c.(*fakeConn).closed.Load() {
					got += fmt.Sprint(i)
				}
			}
			if newcomer.closed.Load() {
				got += "newcomer"
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("closed (-want +got):\n%s", diff)
			}
		})
	}
}

// fakeHeld is a connection held in TestFairConnsAdmit.
type fakeHeld struct {
	ip                string
	active, idleAgain bool // serves a request; served one and waits for the next
}

// fakeConn is a connection from ip (any name: sourceIP reads it as the host) that records its Close.
type fakeConn struct {
	net.Conn
	ip     string
	closed atomic.Bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return fakeAddr(c.ip + ":1") }
func (c *fakeConn) Close() error         { c.closed.Store(true); return nil }

type fakeAddr string

func (a fakeAddr) Network() string { return "tcp" }
func (a fakeAddr) String() string  { return string(a) }

// TestSlowBodiesDoNotLockOut: maxConns/maxConnsPerSource stranger IPs (8 pods of the pod network), each
// holding maxConnsPerSource connections that sent a POST /restart header and trickle its body, fill every
// slot with requests being served. The kubelet's probe and the operator's ask and order still get in.
func TestSlowBodiesDoNotLockOut(t *testing.T) {
	ts := startServer(t)
	var conns []net.Conn
	for i := range maxConns / maxConnsPerSource {
		ip := fmt.Sprintf("127.0.1.%d", 10+i)
		for range maxConnsPerSource {
			c := dialFrom(t, ip, ts.addr)
			_ = c.SetDeadline(time.Now().Add(9 * time.Second))
			head := "POST /restart HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer x\r\nContent-Length: 16000\r\n\r\n"
			if _, err := io.WriteString(c, head+`{"attempt":`); err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
	}
	ts.waitAccepted(t, int64(maxConns))
	time.Sleep(200 * time.Millisecond)
	stop := make(chan struct{})
	go func() { // trickle: a byte a second keeps each request alive until ReadTimeout
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				for _, c := range conns {
					_, _ = io.WriteString(c, "1")
				}
			}
		}
	}()
	defer close(stop)
	failed := 0
	for _, c := range probeAndOrders {
		status, err := c.do(t, ts.addr)
		t.Logf("%s while 64 slow bodies are held: status %d, err %v", c.name, status, err)
		if err != nil || status != c.wantStatus {
			failed++
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d of the kubelet's and operator's calls failed while 8 stranger IPs trickle request bodies", failed, len(probeAndOrders))
	}
}
