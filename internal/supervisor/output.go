package supervisor

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/recognize"
)

const (
	// chunkSize is the most the supervisor reads from a pipe at once (a Linux pipe holds 64 KiB).
	chunkSize = 64 << 10
	// maxLine is how much of a line the recogniser sees; the rest is passed through, unread.
	maxLine = 4 << 10
)

// Monitor keeps what the supervisor learns from the program's output. Its methods are safe for
// concurrent use: both streams feed it while the metrics server reads it.
type Monitor struct {
	piped bool      // the output passes through the supervisor: there are output series
	start time.Time // when the supervisor started (monotonic)

	bytes, lines, recognized atomic.Uint64
	skipped                  atomic.Uint64 // bytes the recogniser skipped, being behind
	written                  atomic.Uint64 // bytes passed on (or dropped: a broken stdout)
	writing                  atomic.Int32  // copies in the middle of a write
	lastOutput               atomic.Int64  // time of the last byte, in nanoseconds since start; 0 for none

	mu     sync.Mutex
	rec    *recognize.Recognizer
	format string // of the last recognised line
	tail   *tail  // the last lines
}

// newMonitor returns a Monitor recognising the built-in formats and pattern, if any; a pattern that does
// not compile is reported on stderr and ignored.
func newMonitor(pattern string, piped bool) *Monitor {
	rec, err := recognize.New(pattern)
	if err != nil {
		fmt.Fprintf(os.Stderr, "supervisor: monitoring.progressPattern ignored: %v\n", err)
		rec, _ = recognize.New("")
	}
	return &Monitor{piped: piped, start: time.Now(), rec: rec, tail: &tail{}}
}

// moved returns how much output has been passed on.
func (m *Monitor) moved() uint64 { return m.written.Load() }

// wrote counts n bytes of output written now.
func (m *Monitor) wrote(n int) {
	m.bytes.Add(uint64(n))
	m.lastOutput.Store(max(int64(time.Since(m.start)), 1))
}

// Line reads one line of output (without its end).
func (m *Monitor) Line(line []byte) {
	m.lines.Add(1)
	m.tail.add(line)
	m.mu.Lock()
	defer m.mu.Unlock()
	if format, ok := m.rec.Line(line); ok {
		m.format = format
		m.recognized.Add(1)
	}
}

// progress returns the progress recognised so far and the format of the last recognised line.
func (m *Monitor) progress() (recognize.Progress, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rec.Progress(), m.format
}

// idle returns how long the program has written nothing: since its last byte, or since the start.
func (m *Monitor) idle(now time.Time) time.Duration {
	return now.Sub(m.start) - time.Duration(m.lastOutput.Load())
}

// pipes carry the program's stdout and stderr to the supervisor.
type pipes struct {
	outR, outW, errR, errW *os.File
}

// newPipes makes the two pipes; nil when it cannot. When our stdout and stderr are one file (a log file
// both go to, `2>&1`), the program gets one pipe for both, so that what it writes to either keeps its order
// there, as without the supervisor.
func newPipes() *pipes {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil
	}
	if sameFile(1, 2) {
		return &pipes{outR: outR, outW: outW}
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		_ = outR.Close() // nothing was read or written
		_ = outW.Close()
		return nil
	}
	return &pipes{outR: outR, outW: outW, errR: errR, errW: errW}
}

// sameFile reports whether the two descriptors are the same open file (device and inode).
func sameFile(a, b int) bool {
	var sa, sb syscall.Stat_t
	if syscall.Fstat(a, &sa) != nil || syscall.Fstat(b, &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// files returns the program's stdin, stdout and stderr: ours (the Go runtime opened /dev/null for any we
// were started without), with its stdout and stderr on the pipes. Fd makes the pipes' write ends
// blocking, as a program expects its stdout to be; the read ends stay with the Go poller.
func (p *pipes) files() []uintptr {
	switch {
	case p == nil:
		return []uintptr{0, 1, 2}
	case p.errW == nil:
		out := p.outW.Fd()
		return []uintptr{0, out, out}
	}
	return []uintptr{0, p.outW.Fd(), p.errW.Fd()}
}

// close closes all the ends, when the program could not be started.
func (p *pipes) close() {
	if p != nil {
		for _, f := range []*os.File{p.outR, p.outW, p.errR, p.errW} {
			if f != nil {
				_ = f.Close() // the program never ran: nothing to flush
			}
		}
	}
}

// copy closes the program's ends and copies the pipes to our stdout and stderr, feeding m; the channel
// is closed when both reached their end (at once when there are no pipes).
func (p *pipes) copy(m *Monitor) <-chan struct{} {
	done := make(chan struct{})
	if p == nil {
		close(done)
		return done
	}
	var wg sync.WaitGroup
	_ = p.outW.Close() // the program holds its own copies
	wg.Go(func() { tee(os.Stdout, p.outR, m) })
	if p.errW != nil {
		_ = p.errW.Close()
		wg.Go(func() { tee(os.Stderr, p.errR, m) })
	}
	go func() { wg.Wait(); close(done) }()
	return done
}

// backlog is how many chunks of a stream (64 KiB each) the recogniser may lag behind the output: the
// output never waits for it, and a program writing faster than it reads (hundreds of thousands of short
// lines a second) has the lines in between skipped, not slowed down.
const backlog = 16

// chunk is a piece of a stream, passed through already, for the recogniser.
type chunk struct {
	data *[]byte // from chunkPool
	// drained: the program had written nothing more when it was read; gap: chunks before it were skipped.
	drained, gap bool
}

var chunkPool = sync.Pool{New: func() any { b := make([]byte, 0, chunkSize); return &b }}

// tee copies src to dst a chunk at a time, as soon as it is read, and hands the chunks to a recogniser
// that reads their lines into m behind it. When dst fails (a closed stdout), it goes on reading src, so
// the program never blocks on a full pipe.
func tee(dst io.Writer, src io.Reader, m *Monitor) {
	buf := make([]byte, chunkSize)
	work, done := make(chan chunk, backlog), make(chan struct{})
	go recognizeChunks(work, m, done)
	broken, gap := false, false
	for {
		n, err := src.Read(buf)
		if n > 0 {
			m.wrote(n)
			if !broken {
				m.writing.Add(1)
				_, werr := dst.Write(buf[:n])
				m.writing.Add(-1)
				broken = werr != nil
			}
			m.written.Add(uint64(n))
			data := chunkPool.Get().(*[]byte)
			*data = append((*data)[:0], buf[:n]...)
			select {
			case work <- chunk{data: data, drained: n < len(buf), gap: gap}:
				gap = false
			default:
				chunkPool.Put(data)
				m.skipped.Add(uint64(n))
				gap = true
			}
		}
		if err != nil {
			close(work)
			<-done
			return
		}
	}
}

// recognizeChunks splits the chunks of one stream into lines for m until work is closed.
func recognizeChunks(work <-chan chunk, m *Monitor, done chan<- struct{}) {
	lines := splitter{line: m.Line, buf: make([]byte, 0, maxLine)}
	for c := range work {
		if c.gap {
			lines.skip()
		}
		lines.write(*c.data)
		if c.drained {
			lines.drained()
		}
		chunkPool.Put(c.data)
	}
	lines.end(0)
	close(done)
}

// splitter cuts a stream into lines at "\n" and "\r" and hands each non-empty one, its first maxLine
// bytes, to line.
//
// A progress bar redraws itself with "\r" before each state, not after: its latest state would wait for
// the next redraw, an epoch later for a bar of epochs. So a line begun after a "\r" is handed over
// already when the program has written nothing more for now (drained), and not again at its end unless
// it grew meanwhile.
type splitter struct {
	line    func([]byte)
	buf     []byte // the line so far, at most maxLine bytes
	afterCR bool   // the line began after a "\r"
	handed  bool   // the line, as it is, was handed over
	partial bool   // part of the line was skipped: it is not handed over
}

// skip says bytes of the stream were skipped: the line in progress lost its middle and is dropped.
func (s *splitter) skip() {
	s.buf, s.handed, s.partial = s.buf[:0], false, true
}

// write reads the next bytes of the stream.
func (s *splitter) write(p []byte) {
	// The next "\r" and "\n" are searched for once each, not once per line: a chunk of short lines with
	// a single "\r" in it costs one pass.
	cr, lf := nextByte(p, 0, '\r'), nextByte(p, 0, '\n')
	for start := 0; ; {
		end := min(cr, lf)
		if end == len(p) {
			s.keep(p[start:])
			return
		}
		s.keep(p[start:end])
		s.end(p[end])
		start = end + 1
		if end == cr {
			cr = nextByte(p, start, '\r')
		} else {
			lf = nextByte(p, start, '\n')
		}
	}
}

// keep appends what room is left in the line.
func (s *splitter) keep(p []byte) {
	if s.partial {
		return
	}
	if room := maxLine - len(s.buf); room > 0 && len(p) > 0 {
		s.buf = append(s.buf, p[:min(room, len(p))]...)
		s.handed = false
	}
}

// end ends the line at terminator ("\n", "\r", or 0 at the end of the stream).
func (s *splitter) end(terminator byte) {
	if len(s.buf) > 0 && !s.handed && !s.partial {
		s.line(s.buf)
	}
	s.buf, s.handed, s.afterCR, s.partial = s.buf[:0], false, terminator == '\r', false
}

// drained says the program has written nothing more for now: a redrawn line is handed over as it is.
func (s *splitter) drained() {
	if s.afterCR && len(s.buf) > 0 && !s.handed {
		s.line(s.buf)
		s.handed = true
	}
}

// nextByte returns the index of the first c in p from from on, or len(p).
func nextByte(p []byte, from int, c byte) int {
	if i := bytes.IndexByte(p[from:], c); i >= 0 {
		return from + i
	}
	return len(p)
}
