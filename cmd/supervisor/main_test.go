package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// supervisorBin is the supervisor TestMain builds.
var supervisorBin string

// python is the interpreter the test programs run in.
const python = "/usr/bin/python3"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "supervisor-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	supervisorBin = filepath.Join(dir, "supervisor")
	build := exec.Command("go", "build", "-o", supervisorBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build the supervisor:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is what a program did: its output and exit code.
type result struct {
	Stdout, Stderr []byte
	Code           int
}

// supervised returns argv run through the supervisor, serving nothing unless a --listen in flags says where.
func supervised(flags []string, argv ...string) []string {
	if len(flags) == 0 {
		flags = []string{"--listen="}
	}
	return append(append(append([]string{supervisorBin}, flags...), "--"), argv...)
}

// runArgv runs argv to its end with env added to the environment.
func runArgv(t *testing.T, env []string, argv ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Fatalf("run %q: %v", argv, err)
	}
	return result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Code: cmd.ProcessState.ExitCode()}
}

// equalBytes reports where got first differs from want.
func equalBytes(t *testing.T, what string, want, got []byte) {
	t.Helper()
	if bytes.Equal(want, got) {
		return
	}
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	t.Errorf("%s: %d bytes, want %d; first difference at byte %d: got %q, want %q", what, len(got), len(want), i,
		got[i:min(i+16, len(got))], want[i:min(i+16, len(want))])
}

// TestPassThrough: what the program writes reaches the supervisor's stdout and stderr byte for byte,
// "\r", NUL, invalid UTF-8, a 10 MiB line with no newline and an unterminated last line included.
func TestPassThrough(t *testing.T) {
	tests := []struct {
		name, program string
	}{
		{name: "control bytes and invalid UTF-8", program: `o.write(b"a\rb\r\n\x00\xff\xfe\n\r\r"); e.write(b"\xff\r\x00e\n\xc3(")`},
		{name: "10 MiB line", program: `o.write(b"y" * (10 << 20)); e.write(b"z" * (3 << 20)); o.write(b"\nend\n")`},
		{name: "unterminated", program: `o.write(b"no newline"); e.write(b"nor here")`},
		{name: "interleaved", program: "for i in range(2000):\n (o if i % 3 else e).write(b'line %d\\r' % i); o.flush(); e.flush()"},
		{name: "nothing", program: `pass`},
		{name: "exit code kept", program: `o.write(b"x"); sys.exit(9)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			argv := []string{python, "-c", "import sys\no, e = sys.stdout.buffer, sys.stderr.buffer\n" + tt.program}
			want := runArgv(t, nil, argv...)
			got := runArgv(t, nil, supervised(nil, argv...)...)
			equalBytes(t, "stdout", want.Stdout, got.Stdout)
			equalBytes(t, "stderr", want.Stderr, got.Stderr)
			if got.Code != want.Code {
				t.Errorf("exit code %d, want %d", got.Code, want.Code)
			}
		})
	}
}

// TestOneFileForBoth: when stdout and stderr are one file (a process node's log, 2>&1), what the program
// writes to either keeps its order in it, as without the supervisor.
func TestOneFileForBoth(t *testing.T) {
	argv := []string{python, "-c", "import sys\no, e = sys.stdout.buffer, sys.stderr.buffer\n" +
		"for i in range(500):\n (o if i % 2 else e).write(b'line %d\\r' % i); o.flush(); e.flush()\no.write(b'done\\n')"}
	run := func(argv ...string) []byte {
		f, err := os.CreateTemp(t.TempDir(), "log")
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	equalBytes(t, "the shared log", run(argv...), run(supervised(nil, argv...)...))
}

// TestStdin: the program reads the supervisor's stdin.
func TestStdin(t *testing.T) {
	cmd := exec.Command(supervisorBin, supervised(nil, "cat")[1:]...)
	cmd.Stdin = strings.NewReader("to the program\n")
	out, err := cmd.Output()
	if err != nil || string(out) != "to the program\n" {
		t.Errorf("stdout %q (%v), want %q", out, err, "to the program\n")
	}
}

// TestNoLineBuffering: a partial line reaches the supervisor's stdout while the program still runs.
func TestNoLineBuffering(t *testing.T) {
	cmd := exec.Command(supervisorBin, supervised(nil, python, "-c", `import sys
sys.stdout.write("partial"); sys.stdout.flush(); sys.stdin.read()`)[1:]...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	got := make(chan string, 1)
	go func() {
		b := make([]byte, len("partial"))
		_, _ = io.ReadFull(stdout, b)
		got <- string(b)
	}()
	select {
	case s := <-got:
		if s != "partial" {
			t.Errorf("read %q, want %q", s, "partial")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the partial line did not come through while the program ran")
	}
}

// TestExitCodes: the program's exit code, 128+n for signal n, 127 and 126 (with one line on stderr) when
// it cannot be run, as a shell does.
func TestExitCodes(t *testing.T) {
	notExecutable := filepath.Join(t.TempDir(), "train.sh")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		argv []string
		want struct {
			Code   int
			Stderr string
		}
	}{
		{name: "0", argv: []string{"sh", "-c", "exit 0"}},
		{name: "3", argv: []string{"sh", "-c", "exit 3"}, want: want(3, "")},
		{name: "255", argv: []string{"sh", "-c", "exit 255"}, want: want(255, "")},
		{name: "SIGKILL", argv: []string{"sh", "-c", "kill -KILL $$"}, want: want(137, "")},
		{name: "SIGSEGV", argv: []string{"sh", "-c", "ulimit -c 0; kill -SEGV $$"}, want: want(139, "")},
		{name: "SIGABRT", argv: []string{"sh", "-c", "ulimit -c 0; kill -ABRT $$"}, want: want(134, "")},
		{name: "not found", argv: []string{"no-such-program"},
			want: want(127, "supervisor: cannot run no-such-program: executable file not found in $PATH\n")},
		{name: "no such file", argv: []string{"/no/such/program"},
			want: want(127, "supervisor: cannot run /no/such/program: stat /no/such/program: no such file or directory\n")},
		{name: "not executable", argv: []string{notExecutable},
			want: want(126, "supervisor: cannot run "+notExecutable+": permission denied\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runArgv(t, nil, supervised(nil, tt.argv...)...)
			got := struct {
				Code   int
				Stderr string
			}{Code: r.Code, Stderr: string(r.Stderr)}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("exit (-want +got):\n%s", diff)
			}
		})
	}
}

// want returns an expected exit code and stderr.
func want(code int, stderr string) struct {
	Code   int
	Stderr string
} {
	return struct {
		Code   int
		Stderr string
	}{Code: code, Stderr: stderr}
}

// trapper is a program that says "ready" once it handles the signals, and on one says "got N", takes
// 0.2 s (a checkpoint) and exits 7. It sleeps in short naps: CPython runs a handler only between
// bytecodes, and a signal that comes just before a long time.sleep starts would wait for its end.
const trapper = `import os, signal, sys, time
def got(n, frame):
    time.sleep(0.2)
    sys.stdout.write("got %d\n" % n); sys.stdout.flush()
    os._exit(7)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH, 40):
    signal.signal(s, got)
print("ready", flush=True)
for _ in range(600):
    time.sleep(0.05)
`

// TestSignalsForwarded: a signal sent to the supervisor reaches the program, which may take its time;
// the supervisor waits for it and exits with its code.
func TestSignalsForwarded(t *testing.T) {
	tests := []struct {
		name     string
		argv     []string
		sig      syscall.Signal
		wantOut  string
		wantCode int
	}{
		{name: "SIGTERM", argv: []string{python, "-c", trapper}, sig: syscall.SIGTERM, wantOut: "ready\ngot 15\n", wantCode: 7},
		{name: "SIGINT", argv: []string{python, "-c", trapper}, sig: syscall.SIGINT, wantOut: "ready\ngot 2\n", wantCode: 7},
		{name: "SIGHUP", argv: []string{python, "-c", trapper}, sig: syscall.SIGHUP, wantOut: "ready\ngot 1\n", wantCode: 7},
		{name: "SIGQUIT", argv: []string{python, "-c", trapper}, sig: syscall.SIGQUIT, wantOut: "ready\ngot 3\n", wantCode: 7},
		{name: "SIGUSR1", argv: []string{python, "-c", trapper}, sig: syscall.SIGUSR1, wantOut: "ready\ngot 10\n", wantCode: 7},
		{name: "SIGUSR2", argv: []string{python, "-c", trapper}, sig: syscall.SIGUSR2, wantOut: "ready\ngot 12\n", wantCode: 7},
		{name: "SIGWINCH", argv: []string{python, "-c", trapper}, sig: syscall.SIGWINCH, wantOut: "ready\ngot 28\n", wantCode: 7},
		{name: "real-time signal 40", argv: []string{python, "-c", trapper}, sig: syscall.Signal(40), wantOut: "ready\ngot 40\n", wantCode: 7},
		{name: "SIGTERM not handled", argv: []string{"sh", "-c", "echo ready; exec sleep 30"}, sig: syscall.SIGTERM,
			wantOut: "ready\n", wantCode: 143},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(supervisorBin, supervised(nil, tt.argv...)[1:]...)
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			timer := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
			defer timer.Stop()
			out := bufio.NewReader(stdout)
			ready, _ := out.ReadString('\n')
			if err := cmd.Process.Signal(tt.sig); err != nil {
				t.Fatal(err)
			}
			rest, _ := io.ReadAll(out)
			_ = cmd.Wait()
			got := struct {
				Out  string
				Code int
			}{Out: ready + string(rest), Code: cmd.ProcessState.ExitCode()}
			if diff := cmp.Diff(struct {
				Out  string
				Code int
			}{Out: tt.wantOut, Code: tt.wantCode}, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// children returns the processes whose parent is pid, as comm and state (from /proc/PID/stat).
func children(t *testing.T, pid int) []string {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var found []string
	for _, path := range stats {
		b, err := os.ReadFile(path)
		i := bytes.LastIndexByte(b, ')')
		if err != nil || i < 0 {
			continue // gone meanwhile
		}
		fields := strings.Fields(string(b[i+1:])) // state, ppid, ...
		comm := string(b[bytes.IndexByte(b, '(')+1 : i])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			found = append(found, comm+" "+fields[0])
		}
	}
	return found
}

// TestProgramDiesWithTheSupervisor: a supervisor SIGKILLed (a container's first process, by the OOM killer
// or a test) takes the program with it, as a container's end would: no program is left running alone.
func TestProgramDiesWithTheSupervisor(t *testing.T) {
	cmd := exec.Command(supervisorBin, supervised(nil, "sleep", "60")[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child := 0
	for deadline := time.Now().Add(5 * time.Second); child == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
		if f := strings.Fields(string(data)); len(f) > 0 {
			child, _ = strconv.Atoi(f[0])
		}
	}
	if child == 0 {
		t.Fatal("the program did not start")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return // gone, or dead and not yet reaped by its new parent
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program (pid %d) outlived the supervisor: %s", child, stat)
		}
	}
}

// TestOrphansReaped: a grandchild orphaned while the program runs becomes the supervisor's child (the
// supervisor is a subreaper), and once it exits it is reaped: no zombie is left.
func TestOrphansReaped(t *testing.T) {
	// The inner shell starts a sleep in the background and exits: the sleep is orphaned.
	cmd := exec.Command(supervisorBin, supervised(nil, "sh", "-c", `sh -c "sleep 0.6 >/dev/null 2>&1 &"; sleep 2`)[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	time.Sleep(300 * time.Millisecond)
	during := children(t, cmd.Process.Pid)
	time.Sleep(1200 * time.Millisecond)
	after := children(t, cmd.Process.Pid)
	want := struct{ During, After []string }{During: []string{"sh S", "sleep S"}, After: []string{"sh S"}}
	got := struct{ During, After []string }{During: sorted(during), After: after}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the supervisor's children (-want +got):\n%s", diff)
	}
}

// sorted sorts s in place and returns it.
func sorted(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

// TestOrphanHoldingOutput: when the program has exited but an orphan still holds its output open, the
// supervisor copies what came and exits with the program's code within about a second.
func TestOrphanHoldingOutput(t *testing.T) {
	start := time.Now()
	r := runArgv(t, nil, supervised(nil, "sh", "-c", "sleep 3 & echo started; exit 4")...)
	elapsed := time.Since(start)
	got := struct {
		Stdout string
		Code   int
	}{Stdout: string(r.Stdout), Code: r.Code}
	if diff := cmp.Diff(struct {
		Stdout string
		Code   int
	}{Stdout: "started\n", Code: 4}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if elapsed > 2500*time.Millisecond {
		t.Errorf("took %v: the supervisor waited for the orphan", elapsed)
	}
}

// TestClosedStdout: when the supervisor's stdout is closed, the program's output is still drained (it
// does not block), its stderr still comes through, and the exit code is the program's.
func TestClosedStdout(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	cmd := exec.Command(supervisorBin, supervised(nil, python, "-c", `import sys
for _ in range(64): sys.stdout.buffer.write(b"x" * 65536 + b"\n")
sys.stdout.flush(); sys.stderr.write("done\n"); sys.exit(5)`)[1:]...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	timer := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	_ = cmd.Wait()
	got := struct {
		Stderr string
		Code   int
	}{Stderr: stderr.String(), Code: cmd.ProcessState.ExitCode()}
	if diff := cmp.Diff(struct {
		Stderr string
		Code   int
	}{Stderr: "done\n", Code: 5}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// freeAddr returns a local address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// scrape reads the supervisor's /metrics: each sample by name and labels, and each series' type.
func scrape(addr string) (samples map[string]float64, types map[string]string, err error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
		return nil, nil, fmt.Errorf("content type %q", ct)
	}
	samples, types = map[string]float64{}, map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 4 && f[0] == "#" && f[1] == "TYPE":
			types[f[2]] = f[3]
		case len(f) == 2:
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return nil, nil, fmt.Errorf("sample %q: %w", sc.Text(), err)
			}
			samples[f[0]] = v
		}
	}
	return samples, types, sc.Err()
}

// printer writes its argument and waits for its stdin to close.
const printer = `import sys
sys.stdout.write(sys.argv[1]); sys.stdout.flush()
sys.stdin.read()
`

// TestMetrics: while the program runs, /metrics shows what the recogniser found in its output (the
// built-in formats, the job's pattern) and the output series; /healthz answers "ok". A pattern that does
// not compile is reported in one line on stderr and the built-in formats go on.
func TestMetrics(t *testing.T) {
	tests := []struct {
		name, pattern, line string
		want                map[string]float64
		wantStderr          string // its prefix
	}{
		{name: "built-in format", line: "epoch 1/3 loss 0.5\n", want: map[string]float64{
			"training_epoch": 1, "training_epochs_total": 3, "training_loss": 0.5, "trainingjob_output_bytes_total": 19,
			"trainingjob_output_lines_total": 1, "trainingjob_output_recognized_lines_total": 1,
			`trainingjob_output_format{format="plain"}`: 1,
		}},
		{name: "bar not redrawn yet", line: "\r 45%|████▌     | 45/100 [00:10<00:12,  4.50it/s, loss=0.231]", want: map[string]float64{
			"training_step": 45, "training_steps_total": 100, "training_loss": 0.231, "trainingjob_output_lines_total": 1,
			"trainingjob_output_recognized_lines_total": 1, `trainingjob_output_format{format="tqdm"}`: 1,
		}},
		{name: "pattern", pattern: `it (?P<step>\d+) of (?P<steps>\d+)`, line: "it 5 of 10\n", want: map[string]float64{
			"training_step": 5, "training_steps_total": 10, `trainingjob_output_format{format="pattern"}`: 1,
			"trainingjob_output_lines_total": 1, "trainingjob_output_recognized_lines_total": 1,
		}},
		{name: "bad pattern", pattern: `it (`, line: "epoch 1/3 loss 0.5\n", wantStderr: "supervisor: monitoring.progressPattern ignored: ",
			want: map[string]float64{"training_epoch": 1, "trainingjob_output_recognized_lines_total": 1}},
		{name: "nothing recognised", line: "hello\n", want: map[string]float64{
			"trainingjob_output_bytes_total": 6, "trainingjob_output_lines_total": 1, "trainingjob_output_recognized_lines_total": 0,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := freeAddr(t)
			cmd := exec.Command(supervisorBin, supervised([]string{"--listen=" + addr}, python, "-c", printer, tt.line)[1:]...)
			cmd.Env = append(os.Environ(), "TRAININGJOB_PROGRESS_PATTERN="+tt.pattern)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			stdin, _ := cmd.StdinPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			samples, types := scrapeLines(t, addr, 1)
			checkSeries(t, tt.want, samples, types)
			checkHealthz(t, addr)
			stdin.Close()
			if err := cmd.Wait(); err != nil {
				t.Errorf("supervisor: %v", err)
			}
			if stdout.String() != tt.line || !oneLine(stderr.String(), tt.wantStderr) {
				t.Errorf("stdout %q, stderr %q; want stdout %q, stderr starting %q", stdout.String(), stderr.String(), tt.line, tt.wantStderr)
			}
		})
	}
}

// oneLine says whether stderr is one line starting with prefix, or empty when prefix is.
func oneLine(stderr, prefix string) bool {
	if prefix == "" {
		return stderr == ""
	}
	return strings.HasPrefix(stderr, prefix) && strings.Count(stderr, "\n") == 1 && strings.HasSuffix(stderr, "\n")
}

// scrapeLines scrapes addr until the supervisor has counted lines lines, for 10 s at most.
func scrapeLines(t *testing.T, addr string, lines float64) (map[string]float64, map[string]string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		samples, types, err := scrape(addr)
		if err == nil && samples["trainingjob_output_lines_total"] >= lines {
			return samples, types
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %v lines counted: %v %v", lines, samples, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkSeries compares the samples named in want, checks the idle gauge, the types of every series and
// that at most one format is shown.
func checkSeries(t *testing.T, want, samples map[string]float64, types map[string]string) {
	t.Helper()
	got := map[string]float64{}
	for name := range want {
		if v, ok := samples[name]; ok {
			got[name] = v
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("series (-want +got):\n%s", diff)
	}
	if idle, ok := samples["trainingjob_output_idle_seconds"]; !ok || idle < 0 || idle > 10 {
		t.Errorf("trainingjob_output_idle_seconds %v (present %v)", idle, ok)
	}
	formats := 0
	for name, v := range samples {
		base, _, labelled := strings.Cut(name, "{")
		wantType := "gauge"
		if strings.HasSuffix(base, "_total") && strings.HasPrefix(base, "trainingjob_") {
			wantType = "counter"
		}
		if types[base] != wantType {
			t.Errorf("%s: type %q, want %q", base, types[base], wantType)
		}
		if labelled && (base != "trainingjob_output_format" || v != 1) {
			t.Errorf("unexpected sample %s %v", name, v)
		}
		if labelled {
			formats++
		}
	}
	if recognised := samples["trainingjob_output_recognized_lines_total"] > 0; formats != map[bool]int{false: 0, true: 1}[recognised] {
		t.Errorf("%d formats shown, recognised lines %v", formats, samples["trainingjob_output_recognized_lines_total"])
	}
}

// checkHealthz: GET /healthz answers 200 "ok".
func checkHealthz(t *testing.T, addr string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Errorf("/healthz: %d %q", resp.StatusCode, body)
	}
}

// TestListenFails: when the address is taken, the supervisor says so in one line and runs the program.
func TestListenFails(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	r := runArgv(t, nil, supervised([]string{"--listen=" + addr}, "sh", "-c", "echo hi; exit 3")...)
	got := struct {
		Stdout, Stderr string
		Code           int
	}{Stdout: string(r.Stdout), Stderr: string(r.Stderr), Code: r.Code}
	want := struct {
		Stdout, Stderr string
		Code           int
	}{
		Stdout: "hi\n",
		Stderr: fmt.Sprintf("supervisor: not serving progress on %s: listen tcp %s: bind: address already in use\n", addr, addr),
		Code:   3,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// ptySpawn runs its arguments on a new terminal (python's pty.spawn) and exits with their exit code.
const ptySpawn = `import os, pty, sys
sys.exit(os.waitstatus_to_exitcode(pty.spawn(sys.argv[1:])))
`

// TestTerminal: on a terminal the program gets the terminal itself, in its foreground, and its exit code
// is kept.
func TestTerminal(t *testing.T) {
	program := `test -t 0 && test -t 1 && test -t 2 && echo tty; ` +
		`test "$(ps -o tpgid= -p $$)" -eq "$(ps -o pgid= -p $$)" && echo foreground; exit 3`
	if _, err := exec.LookPath("ps"); err != nil {
		program = `test -t 0 && test -t 1 && test -t 2 && echo tty; echo foreground; exit 3`
	}
	r := runArgv(t, nil, append([]string{python, "-c", ptySpawn}, supervised(nil, "sh", "-c", program)...)...)
	got := struct {
		Stdout string
		Code   int
	}{Stdout: strings.ReplaceAll(string(r.Stdout), "\r\n", "\n"), Code: r.Code}
	if diff := cmp.Diff(struct {
		Stdout string
		Code   int
	}{Stdout: "tty\nforeground\n", Code: 3}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestCommandLine: usage errors exit 2; `install DEST` copies the supervisor.
func TestCommandLine(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "bin", "supervisor")
	tests := []struct {
		name     string
		args     []string
		wantCode int
	}{
		{name: "no command", args: []string{"--listen="}, wantCode: 2},
		{name: "unknown flag", args: []string{"--nope", "--", "true"}, wantCode: 2},
		{name: "install without dest", args: []string{"install"}, wantCode: 2},
		{name: "install", args: []string{"install", dest}, wantCode: 0},
		{name: "a program named install", args: []string{"--listen=", "--", "install", "--version"}, wantCode: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r := runArgv(t, nil, append([]string{supervisorBin}, tt.args...)...); r.Code != tt.wantCode {
				t.Errorf("exit code %d, want %d (stderr %q)", r.Code, tt.wantCode, r.Stderr)
			}
		})
	}
	want, _ := os.ReadFile(supervisorBin)
	got, err := os.ReadFile(dest)
	if err != nil || !bytes.Equal(want, got) {
		t.Errorf("installed %d bytes (%v), want the supervisor's %d", len(got), err, len(want))
	}
}

// TestDependencies: the supervisor stays small: no Kubernetes, Prometheus or pprof packages.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "k8s.io/") || strings.Contains(pkg, "prometheus") || pkg == "net/http/pprof" {
			bad = append(bad, pkg)
		}
	}
	if diff := cmp.Diff([]string(nil), bad); diff != "" {
		t.Errorf("dependencies (-want +got):\n%s", diff)
	}
}

// TestSlowReaderGetsTheEnd: when whoever reads the supervisor's output (the container runtime's log) is
// slow, the program's last bytes (its traceback) still reach it after the program exited.
func TestSlowReaderGetsTheEnd(t *testing.T) {
	program := "import sys\nsys.stdout.buffer.write(b'x' * 100000 + b'\\nTraceback: the end\\n')\nsys.exit(3)"
	cmd := exec.Command(supervisorBin, supervised(nil, python, "-c", program)[1:]...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // longer than the drain's idle second: the supervisor's write is blocked
	data, _ := io.ReadAll(out)
	_ = cmd.Wait()
	if !bytes.HasSuffix(data, []byte("Traceback: the end\n")) || len(data) != 100000+20 || cmd.ProcessState.ExitCode() != 3 {
		t.Errorf("read %d bytes ending %q, exit %d; want 100020 ending with the traceback, exit 3", len(data), data[max(0, len(data)-30):],
			cmd.ProcessState.ExitCode())
	}
}
