package supervisor

import (
	"bytes"
	"io"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSplitter: lines end at "\n" and at "\r", whichever chunks the stream comes in; empty lines are
// skipped; a line is cut at maxLine bytes and its rest skipped; the last line counts at the end. A line
// begun after "\r" is handed over when the stream is drained (after each chunk here), once.
func TestSplitter(t *testing.T) {
	long := strings.Repeat("x", maxLine)
	tests := []struct {
		name   string
		chunks []string
		want   []string
	}{
		{name: "newlines", chunks: []string{"a\nb\n"}, want: []string{"a", "b"}},
		{name: "carriage returns", chunks: []string{"\r 10%|#\r 20%|##\r"}, want: []string{" 10%|#", " 20%|##"}},
		{name: "crlf and empty lines", chunks: []string{"a\r\n\n\nb\n"}, want: []string{"a", "b"}},
		{name: "line across chunks", chunks: []string{"ep", "och 1", "/3\nst", "ep"}, want: []string{"epoch 1/3", "step"}},
		{name: "unterminated last line", chunks: []string{"a\nlast"}, want: []string{"a", "last"}},
		{name: "cut at maxLine", chunks: []string{long, "yyy", "zz\nnext\n"}, want: []string{long, "next"}},
		{name: "cut within a chunk", chunks: []string{long + "tail\rnext"}, want: []string{long, "next"}},
		{name: "bytes kept as they are", chunks: []string{"\x00\xff\xfe\n"}, want: []string{"\x00\xff\xfe"}},
		{name: "nothing", chunks: []string{"", "\n\r"}, want: nil},
		{name: "redraws at once", chunks: []string{"\r 10%|#", "\r 20%|##", "\n"}, want: []string{" 10%|#", " 20%|##"}},
		{name: "redraw across chunks", chunks: []string{"\r 10", "%|#", "\r"}, want: []string{" 10", " 10%|#"}},
		{name: "redraw cut at maxLine", chunks: []string{"\r" + long, "more", "\n"}, want: []string{long}},
		{name: "line after newline waits", chunks: []string{"a\nepoch 1", "/3\n"}, want: []string{"a", "epoch 1/3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			s := splitter{line: func(l []byte) { got = append(got, string(l)) }}
			for _, c := range tt.chunks {
				s.write([]byte(c))
				s.drained()
			}
			s.end(0)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTee: tee copies every byte, counts bytes and lines, and keeps reading when its destination fails.
func TestTee(t *testing.T) {
	input := "a\rb\n\x00\xff" + strings.Repeat("y", 3*chunkSize) + "\nend"
	tests := []struct {
		name    string
		dst     io.Writer
		wantOut string
	}{
		{name: "copied", dst: &bytes.Buffer{}, wantOut: input},
		{name: "destination fails", dst: failingWriter{}, wantOut: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMonitor("", true)
			tee(tt.dst, strings.NewReader(input), m)
			got := struct{ Bytes, Lines uint64 }{Bytes: m.bytes.Load(), Lines: m.lines.Load()}
			if diff := cmp.Diff(struct{ Bytes, Lines uint64 }{Bytes: uint64(len(input)), Lines: 4}, got); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
			if b, ok := tt.dst.(*bytes.Buffer); ok && b.String() != tt.wantOut {
				t.Errorf("copied %d bytes, want the %d written", b.Len(), len(tt.wantOut))
			}
		})
	}
}

// failingWriter fails as a closed pipe does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, syscall.EPIPE }
