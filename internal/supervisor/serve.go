package supervisor

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/recognize"
)

// contentType is the Prometheus text format's.
const contentType = "text/plain; version=0.0.4; charset=utf-8"

// serve serves m on addr in the background: GET /metrics and GET /healthz, and ctl's protocol when it takes
// orders. When it cannot listen it says so in one line on stderr and serves nothing: the training goes on.
func serve(addr string, m *Monitor, ctl runControl) {
	if addr == "" {
		return
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "supervisor: not serving progress on %s: %v\n", addr, err)
		return
	}
	go func() { _ = newServer(m, ctl, newFairConns(maxConns, maxConnsPerSource)).Serve(l) }()
}

// Anyone who reaches the pod may connect, and the supervisor's memory is the trainer container's: the
// server holds at most maxConns connections, at most maxConnsPerSource of one source IP (fairConns).
const (
	maxConns          = 64
	maxConnsPerSource = 8
)

// fairConns bounds the connections a server holds (its ConnState hook, track) so that no source starves
// another: the operator (one IP) and the kubelet's probe (the node's IP) get in however many connections
// strangers open. A newcomer over a bound takes the place of a connection that serves no request (idle,
// or new: no request read yet), the oldest first: of its own source when that source holds
// maxConnsPerSource; when maxConns are held, of the source that holds the most if that one holds more
// than the newcomer's would after it, or the newcomer's holds none; else of its own source, or, when all
// of its own serve requests, of the source that holds the most if that one holds as many. When every held
// connection serves a request (a stranger's trickled bodies), the newcomer takes the oldest of the source
// that holds the most, if that one holds more than the newcomer's would after it: a source with one
// request in flight (the operator's order) keeps it. When there is none, the newcomer is closed. What
// remains possible: with about as many stranger IPs as maxConns (63 trickling bodies shut out the probe,
// 62 and one more close one of two requests the operator has in flight), strangers hold or close the
// others' connections in turn; a NetworkPolicy on the workers' ports is the answer there.
type fairConns struct {
	total, perSource int

	mu     sync.Mutex
	held   map[net.Conn]*heldConn
	counts map[string]int // held by source IP
	seq    uint64
}

// heldConn is a connection held: its source IP, its order of arrival and whether it serves a request.
type heldConn struct {
	source string
	seq    uint64
	active bool
}

func newFairConns(total, perSource int) *fairConns {
	return &fairConns{total: total, perSource: perSource, held: map[net.Conn]*heldConn{}, counts: map[string]int{}}
}

// track is the server's ConnState hook. The server calls it with StateNew in its accepting goroutine,
// before the connection's own goroutine, which makes the other calls.
func (f *fairConns) track(c net.Conn, s http.ConnState) {
	f.mu.Lock()
	var closing net.Conn
	switch s {
	case http.StateNew:
		closing = f.admit(c)
	case http.StateActive, http.StateIdle:
		if h := f.held[c]; h != nil {
			h.active = s == http.StateActive
		}
	case http.StateHijacked, http.StateClosed:
		f.drop(c)
	}
	f.mu.Unlock()
	if closing != nil {
		_ = closing.Close() // its goroutine ends, and reports StateClosed
	}
}

// admit holds c and returns the connection to close for it, c itself when none may be. f.mu is held.
func (f *fairConns) admit(c net.Conn) (closing net.Conn) {
	src := sourceIP(c)
	n := f.counts[src]
	own := func(h *heldConn) bool { return h.source == src }
	switch {
	case n >= f.perSource:
		closing = f.oldestIdle(own)
	case len(f.held) >= f.total:
		closing = f.oldestIdle(func(*heldConn) bool { return true })
		if closing != nil && n > 0 && f.counts[f.held[closing].source] <= n+1 {
			// No fairer share to take: its own idle one, if any; else, its own all serving requests (the
			// operator's read and its order at once), the biggest source's if that holds as many.
			if mine := f.oldestIdle(own); mine != nil || f.counts[f.held[closing].source] < n {
				closing = mine
			}
		}
		if closing == nil {
			// All serve requests (slow bodies): the oldest of a source that holds more than the newcomer's
			// would after it, so that a stranger's trickling requests do not shut out the probe.
			closing = f.oldestServing(func(h *heldConn) bool { return f.counts[h.source] > n+1 })
		}
	default:
		f.hold(c, src)
		return nil
	}
	if closing == nil {
		return c
	}
	f.drop(closing)
	f.hold(c, src)
	return closing
}

// hold records c, from src, as held. f.mu is held.
func (f *fairConns) hold(c net.Conn, src string) {
	f.seq++
	f.held[c] = &heldConn{source: src, seq: f.seq}
	f.counts[src]++
}

// oldestIdle returns the connection that serves no request, among those of the sources that match, of the
// source that holds the most, the oldest first; nil when there is none. f.mu is held.
func (f *fairConns) oldestIdle(match func(*heldConn) bool) net.Conn {
	var pick net.Conn
	var best *heldConn
	for c, h := range f.held {
		if h.active || !match(h) {
			continue
		}
		if best == nil || f.counts[h.source] > f.counts[best.source] ||
			f.counts[h.source] == f.counts[best.source] && h.seq < best.seq {
			pick, best = c, h
		}
	}
	return pick
}

// oldestServing returns the connection that serves a request, among those of the sources that match, of
// the source that holds the most, the oldest first; nil when there is none. f.mu is held.
func (f *fairConns) oldestServing(match func(*heldConn) bool) net.Conn {
	var pick net.Conn
	var best *heldConn
	for c, h := range f.held {
		if !h.active || !match(h) {
			continue
		}
		if best == nil || f.counts[h.source] > f.counts[best.source] ||
			f.counts[h.source] == f.counts[best.source] && h.seq < best.seq {
			pick, best = c, h
		}
	}
	return pick
}

// drop forgets c. f.mu is held.
func (f *fairConns) drop(c net.Conn) {
	h := f.held[c]
	if h == nil {
		return
	}
	delete(f.held, c)
	if f.counts[h.source]--; f.counts[h.source] == 0 {
		delete(f.counts, h.source)
	}
}

// sourceIP returns the IP c comes from.
func sourceIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	return host
}

// newServer returns the metrics server, its connections held by conns. Its timeouts free a slow or idle
// client's connection soon (the operator reads every few seconds, on a connection it may open anew), and
// it logs nothing (its stderr is the program's). GET /healthz answers 503 while ctl holds a failed program
// or restarts: the pod's readiness probe. A nil ctl takes no orders (noControl).
func newServer(m *Monitor, ctl runControl, conns *fairConns) *http.Server {
	if ctl == nil {
		ctl = noControl{}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(m.AppendMetrics(nil, time.Now()))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if ok, why := ctl.ready(); !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, why)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	ctl.register(mux)
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 2 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       2 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnState:         conns.track,
	}
}

// gauge is a training series and the field of the progress it shows.
type gauge struct {
	name, help string
	value      func(recognize.Progress) *float64
}

// trainingGauges are the series of what the recogniser found, in the order they are written.
var trainingGauges = []gauge{
	{"training_epoch", "Epoch the program printed last.", func(p recognize.Progress) *float64 { return p.Epoch }},
	{"training_epochs_total", "Epochs the program plans.", func(p recognize.Progress) *float64 { return p.TotalEpochs }},
	{"training_step", "Step or batch the program printed last.", func(p recognize.Progress) *float64 { return p.Step }},
	{"training_steps_total", "Steps the program plans.", func(p recognize.Progress) *float64 { return p.TotalSteps }},
	{"training_progress_ratio", "Fraction of the run done, 0 to 1.", func(p recognize.Progress) *float64 { return p.Fraction }},
	{"training_loss", "Loss the program printed last.", func(p recognize.Progress) *float64 { return p.Loss }},
	{"training_accuracy", "Accuracy the program printed last.", func(p recognize.Progress) *float64 { return p.Accuracy }},
	{"training_learning_rate", "Learning rate the program printed last.", func(p recognize.Progress) *float64 { return p.LearningRate }},
	{"training_samples_per_second", "Samples or iterations per second the program printed last.",
		func(p recognize.Progress) *float64 { return p.Throughput }},
}

// AppendMetrics appends m's series in the Prometheus text format (0.0.4) to b: the training series the
// recogniser has values for, and, when the output passes through the supervisor, the output series,
// the idle time as of now.
func (m *Monitor) AppendMetrics(b []byte, now time.Time) []byte {
	p, format := m.progress()
	b = appendProgress(b, p)
	if !m.piped {
		return b
	}
	b = appendSeries(b, "trainingjob_output_bytes_total", "counter",
		"Bytes the program wrote to stdout and stderr.", "", float64(m.bytes.Load()))
	b = appendSeries(b, "trainingjob_output_lines_total", "counter",
		"Non-empty lines (ended by a newline or carriage return) the program wrote.", "", float64(m.lines.Load()))
	b = appendSeries(b, "trainingjob_output_recognized_lines_total", "counter",
		"Lines that showed progress.", "", float64(m.recognized.Load()))
	b = appendSeries(b, "trainingjob_output_unread_bytes_total", "counter",
		"Bytes passed through but not read for progress: the program wrote faster than they could be.", "", float64(m.skipped.Load()))
	b = appendSeries(b, "trainingjob_output_idle_seconds", "gauge",
		"Seconds since the program last wrote, or since it started.", "", m.idle(now).Seconds())
	if format != "" {
		b = appendSeries(b, "trainingjob_output_format", "gauge",
			"Format of the last line that showed progress.", `format="`+escapeLabel(format)+`"`, 1)
	}
	return b
}

// SeriesOutputMetric is the family of the named metrics the recogniser found, one series per name (label
// name): derive.ParseSample reads them into status.metrics.custom.
const SeriesOutputMetric = "trainingjob_output_metric"

// appendProgress appends the training series p has values for, then its named metrics as one
// trainingjob_output_metric family, in the order of their names.
func appendProgress(b []byte, p recognize.Progress) []byte {
	for _, g := range trainingGauges {
		if v := g.value(p); v != nil {
			b = appendSeries(b, g.name, "gauge", g.help, "", *v)
		}
	}
	if len(p.Metrics) == 0 {
		return b
	}
	b = append(b, "# HELP "+SeriesOutputMetric+" A figure the program printed under its own name (label name).\n"+
		"# TYPE "+SeriesOutputMetric+" gauge\n"...)
	for _, m := range p.Metrics {
		b = append(b, SeriesOutputMetric+`{name="`...)
		b = append(b, escapeLabel(m.Name)...)
		b = append(b, `"} `...)
		b = strconv.AppendFloat(b, m.Value, 'g', -1, 64)
		b = append(b, '\n')
	}
	return b
}

// appendSeries appends one series with its HELP and TYPE lines; labels, when not empty, go between braces.
func appendSeries(b []byte, name, kind, help, labels string, v float64) []byte {
	b = append(b, "# HELP "+name+" "+help+"\n# TYPE "+name+" "+kind+"\n"+name...)
	if labels != "" {
		b = append(b, "{"+labels+"}"...)
	}
	b = append(b, ' ')
	b = strconv.AppendFloat(b, v, 'g', -1, 64)
	return append(b, '\n')
}

// labelEscaper escapes a label value as the text format requires.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// escapeLabel escapes a label value.
func escapeLabel(v string) string { return labelEscaper.Replace(v) }
