// Command supervisorbench measures what the supervisor (cmd/supervisor) costs a training program: it runs
// each workload directly and through the supervisor, alternately, several times, reading and discarding
// the output as a container runtime would, and writes a Markdown table of the median wall time and CPU
// time (user + system of the whole process tree) of each, with the supervisor's peak RSS.
//
//	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /tmp/supervisor ./cmd/supervisor
//	go run ./tests/performance/supervisor -supervisor /tmp/supervisor
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// workload is a program whose output is measured.
type workload struct {
	name string
	argv []string
}

// python is the interpreter the workloads run in.
const python = "/usr/bin/python3"

// bulk writes size bytes in 64 KiB lines.
const bulk = `import sys
line, n = b"x" * 65535 + b"\n", int(sys.argv[1]) // 65536
w = sys.stdout.buffer
for _ in range(n):
    w.write(line)
`

// shortLines writes size bytes in 100-byte lines a recogniser reads ("step N/M loss x").
const shortLines = `import sys
block = b"".join(b"step %d/100000 loss 0.%04d".ljust(99) % (i, i) + b"\n" for i in range(655))
w = sys.stdout.buffer
for _ in range(int(sys.argv[1]) // len(block)):
    w.write(block)
`

// bar redraws a tqdm bar rate times a second for seconds, each redraw written at once.
const bar = `import sys, time
rate, secs = int(sys.argv[1]), float(sys.argv[2])
total, n, w, start = int(rate * secs), 0, sys.stdout.buffer, time.monotonic()
while n < total:
    due = min(total, int((time.monotonic() - start) * rate) + 1)
    while n < due:
        n += 1
        line = "\r Epoch 3:  %d%%|████▌     | %d/%d [00:10<00:12,  4.50it/s, loss=0.231]" % (n * 100 // total, n, total)
        w.write(line.encode())
        w.flush()
    time.sleep(0.001)
`

// run is one measured run.
type run struct {
	wall, cpu time.Duration
	bytes     int64
	hwm       int64 // the supervisor's VmHWM in KiB; 0 when run directly
}

func main() {
	supervisor := flag.String("supervisor", "", "the supervisor binary (required)")
	out := flag.String("out", "bin/supervisor-report.md", "where to write the report")
	n := flag.Int("n", 3, "runs of each workload each way")
	size := flag.Int64("bytes", 1<<30, "bytes the bulk workload writes")
	shortSize := flag.Int64("short-bytes", 256<<20, "bytes the short-lines workload writes")
	rate := flag.Int("rate", 10000, "bar redraws a second")
	seconds := flag.Float64("seconds", 10, "seconds of bar redraws")
	flag.Parse()
	if *supervisor == "" {
		fmt.Fprintln(os.Stderr, "supervisorbench: -supervisor is required")
		os.Exit(2)
	}
	workloads := []workload{
		{name: fmt.Sprintf("%s in 64 KiB lines", human(*size)), argv: []string{python, "-c", bulk, strconv.FormatInt(*size, 10)}},
		{
			name: fmt.Sprintf("%s in 100-byte `step N/M loss x` lines", human(*shortSize)),
			argv: []string{python, "-c", shortLines, strconv.FormatInt(*shortSize, 10)},
		},
		{
			name: fmt.Sprintf("tqdm bar redrawn %d times a second for %gs", *rate, *seconds),
			argv: []string{python, "-c", bar, strconv.Itoa(*rate), strconv.FormatFloat(*seconds, 'g', -1, 64)},
		},
	}
	report, err := measureAll(*supervisor, workloads, *n)
	if err == nil {
		err = write(*out, report)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "supervisorbench:", err)
		os.Exit(1)
	}
	fmt.Print(report)
}

// measureAll measures every workload and returns the report.
func measureAll(supervisor string, workloads []workload, n int) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "Median of %d runs each way, alternating; CPU is user + system of the whole process tree.\n\n", n)
	b.WriteString("| workload | without supervisor (wall, CPU) | through supervisor (wall, CPU) | supervisor's extra CPU | " +
		"CPU ratio | wall ratio | supervisor VmHWM |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, w := range workloads {
		direct, through, err := measure(supervisor, w, n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "| %s | %s, %s | %s, %s | %s | %.2f | %.2f | %d KiB |\n", w.name,
			secs(direct.wall), secs(direct.cpu), secs(through.wall), secs(through.cpu), secs(through.cpu-direct.cpu),
			through.cpu.Seconds()/direct.cpu.Seconds(), through.wall.Seconds()/direct.wall.Seconds(), through.hwm)
	}
	return b.String(), nil
}

// measure runs w n times each way, alternately, and returns the medians.
func measure(supervisor string, w workload, n int) (direct, through run, err error) {
	var ds, ts []run
	for i := range n {
		for _, sup := range []bool{i%2 == 1, i%2 == 0} {
			argv := w.argv
			if sup {
				argv = append([]string{supervisor, "--listen=127.0.0.1:0", "--"}, w.argv...)
			}
			r, err := once(argv, sup)
			if err != nil {
				return run{}, run{}, fmt.Errorf("%s: %w", w.name, err)
			}
			if sup {
				ts = append(ts, r)
			} else {
				ds = append(ds, r)
			}
		}
	}
	if direct, through = median(ds), median(ts); direct.bytes != through.bytes {
		return direct, through, fmt.Errorf("%s: %d bytes through the supervisor, %d directly", w.name, through.bytes, direct.bytes)
	}
	return direct, through, nil
}

// once runs argv, reading and discarding its stdout, and measures it; watch samples the process's peak RSS.
func once(argv []string, watch bool) (run, error) {
	r, wr, err := os.Pipe()
	if err != nil {
		return run{}, err
	}
	defer r.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = wr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		wr.Close()
		return run{}, err
	}
	wr.Close()
	read := make(chan int64, 1)
	go func() { n, _ := io.CopyBuffer(io.Discard, onlyReader{r}, make([]byte, 1<<20)); read <- n }()
	stop, hwm := make(chan struct{}), make(chan int64, 1)
	go func() { hwm <- peakRSS(cmd.Process.Pid, watch, stop) }()
	n := <-read
	err = cmd.Wait()
	wall := time.Since(start)
	close(stop)
	if err != nil {
		return run{}, fmt.Errorf("%q: %w", argv, err)
	}
	return run{wall: wall, cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), bytes: n, hwm: <-hwm}, nil
}

// onlyReader hides io.Discard's ReadFrom, so the given buffer is used.
type onlyReader struct{ io.Reader }

// peakRSS samples pid's VmHWM every 20 ms until stop and returns the last value read, in KiB.
func peakRSS(pid int, watch bool, stop <-chan struct{}) int64 {
	var last int64
	for watch {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
			last = max(last, vmHWM(string(b)))
		}
		select {
		case <-stop:
			return last
		case <-time.After(20 * time.Millisecond):
		}
	}
	return last
}

// vmHWM returns the VmHWM line of a /proc/PID/status, in KiB; 0 when absent (a zombie).
func vmHWM(status string) int64 {
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kib
		}
	}
	return 0
}

// median returns the run with the median wall time, with the median CPU time and the highest RSS.
func median(runs []run) run {
	walls, cpus := make([]time.Duration, len(runs)), make([]time.Duration, len(runs))
	m := run{bytes: runs[0].bytes}
	for i, r := range runs {
		walls[i], cpus[i], m.hwm = r.wall, r.cpu, max(m.hwm, r.hwm)
	}
	slices.Sort(walls)
	slices.Sort(cpus)
	m.wall, m.cpu = walls[len(walls)/2], cpus[len(cpus)/2]
	return m
}

// secs formats d in seconds.
func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// human formats a byte count in MiB or GiB.
func human(n int64) string {
	if n >= 1<<30 && n%(1<<30) == 0 {
		return fmt.Sprintf("%d GiB", n>>30)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}

// write writes the report to path, making its directory.
func write(path, report string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(report), 0o644)
}
