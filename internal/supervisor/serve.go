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
func serve(addr string, m *Monitor, ctl *controller) {
	if addr == "" {
		return
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "supervisor: not serving progress on %s: %v\n", addr, err)
		return
	}
	go func() { _ = newServer(m, ctl).Serve(limitListener(l, maxConns)) }()
}

// maxConns bounds the connections the server holds: anyone who reaches the pod may connect, and the
// supervisor's memory is the trainer container's. The readiness probe and the operator's orders share them:
// a NetworkPolicy that lets only the nodes and the operator reach the port keeps strangers from taking them.
const maxConns = 32

// limitListener accepts at most n connections at once; one more is closed at once.
func limitListener(l net.Listener, n int) net.Listener {
	return &limited{Listener: l, slots: make(chan struct{}, n)}
}

type limited struct {
	net.Listener
	slots chan struct{}
}

// Accept returns the next connection while a slot is free, and closes those that come when none is.
func (l *limited) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
		default:
			_ = c.Close() // over the limit: the client may retry
		}
	}
}

// slotConn gives its slot back once when closed.
type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}

// newServer returns the metrics server; its timeouts free a slow or idle client's connection, and it logs
// nothing (its stderr is the program's). GET /healthz answers 503 while ctl holds a failed program or
// restarts: the pod's readiness probe.
func newServer(m *Monitor, ctl *controller) *http.Server {
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
	if ctl != nil {
		ctl.register(mux)
	}
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       5 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          log.New(io.Discard, "", 0),
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

// appendProgress appends the training series p has values for.
func appendProgress(b []byte, p recognize.Progress) []byte {
	for _, g := range trainingGauges {
		if v := g.value(p); v != nil {
			b = appendSeries(b, g.name, "gauge", g.help, "", *v)
		}
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
