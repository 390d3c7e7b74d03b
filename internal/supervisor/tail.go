// This file holds the output's tail: the last lines the program wrote, the message of a failure
// when the program wrote no termination message.

package supervisor

import "sync"

// tail keeps the last bytes of the program's lines.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

// tailSize is how much output tail keeps: the kubelet's fallback to the log keeps 2 KiB.
const tailSize = 2 << 10

// add keeps line, ended by a newline, and drops what has fallen out of the tail. A nil tail keeps
// nothing.
func (t *tail) add(line []byte) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(append(t.buf, line...), '\n')
	if n := len(t.buf); n > 2*tailSize {
		t.buf = append(t.buf[:0], t.buf[n-tailSize:]...)
	}
}

// String returns the last tailSize bytes kept.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.buf); n > tailSize {
		return string(t.buf[n-tailSize:])
	}
	return string(t.buf)
}
