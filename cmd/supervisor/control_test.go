package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
)

// controlled is a supervisor that takes orders, running program, and how to reach it.
type controlled struct {
	cmd   *exec.Cmd
	addr  string
	dir   string
	token string
	out   lockedBuffer
}

// lockedBuffer is the supervisor's output, read while it is written.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startControlled starts program (a shell script) under a supervisor with the token "t0ken", attempt 1, a
// state directory (with state written into it first when not empty), the hold given and env added.
func startControlled(t *testing.T, program, state string, hold int, env ...string) *controlled {
	t.Helper()
	return startControlledIn(t, t.TempDir(), program, state, hold, env...)
}

// startControlledIn is startControlled with the state directory dir (the restarted containers of a pod).
func startControlledIn(t *testing.T, dir, program, state string, hold int, env ...string) *controlled {
	t.Helper()
	c := &controlled{addr: freeAddr(t), dir: dir, token: "t0ken"}
	if state != "" {
		if err := os.WriteFile(filepath.Join(c.dir, "restart.json"), []byte(state), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.cmd = exec.Command(supervisorBin, supervised([]string{"--listen=" + c.addr}, "sh", "-c", program)[1:]...)
	c.cmd.Env = append(os.Environ(), controlapi.TokenEnv+"="+c.token, controlapi.RestartCodeEnv+"=215",
		controlapi.AttemptEnv+"=1", controlapi.StateDirEnv+"="+c.dir, controlapi.HoldEnv+"="+strconv.Itoa(hold))
	c.cmd.Env = append(c.cmd.Env, env...)
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.cmd.Process.Kill(); _ = c.cmd.Wait() })
	return c
}

// client returns the operator's client of the protocol.
func client() *controlapi.Client {
	return &controlapi.Client{HTTP: &http.Client{}, Timeout: 5 * time.Second}
}

// until calls f every 50 ms until it returns true, for at most 20 s.
func until(t *testing.T, what string, f func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if f() {
			return
		}
	}
	t.Fatalf("never: %s", what)
}

// held waits until the supervisor holds a failed program and returns its exit.
func (c *controlled) held(t *testing.T) controlapi.Exit {
	t.Helper()
	var e controlapi.Exit
	until(t, "the program is held", func() bool {
		var err error
		e, err = client().Exit(context.Background(), c.addr, c.token)
		return err == nil && e.Held
	})
	return e
}

// code waits for the supervisor's exit code.
func (c *controlled) code(t *testing.T) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case <-done:
		return c.cmd.ProcessState.ExitCode()
	case <-time.After(20 * time.Second):
		t.Fatalf("the supervisor did not exit; its output:\n%s", c.out.String())
		return 0
	}
}

func healthz(addr string) (int, string) {
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHeldUntilOrdered: a program that fails is held: the pod is unready, GET /exit tells how it ended
// (only with the token), and an order to restart into a later attempt ends the supervisor with the restart
// code after writing the order down for the restarted containers.
func TestHeldUntilOrdered(t *testing.T) {
	c := startControlled(t, `echo "Traceback: ValueError: bad batch" >&2; exit 3`, "", 60)
	e := c.held(t)
	if e.ExitCode != 3 || e.Attempt != 1 || !strings.Contains(e.Message, "ValueError: bad batch") || e.FinishedAt.IsZero() {
		t.Errorf("exit = %+v, want code 3 in attempt 1 with the last line as its message", e)
	}
	if code, body := healthz(c.addr); code != http.StatusServiceUnavailable || !strings.Contains(body, "code 3") {
		t.Errorf("healthz while held = %d %q, want 503 naming the code", code, body)
	}
	if _, err := client().Exit(context.Background(), c.addr, "wrong"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("exit with a wrong token: %v, want 401", err)
	}
	if err := client().Restart(context.Background(), c.addr, "", controlapi.Order{Attempt: 2}); err == nil {
		t.Error("an order without the token was taken")
	}
	if err := client().Restart(context.Background(), c.addr, c.token, controlapi.Order{Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if e := c.held(t); e.ExitCode != 3 {
		t.Errorf("an order for the attempt it runs ended the hold: %+v", e)
	}
	if err := client().Restart(context.Background(), c.addr, c.token, controlapi.Order{Attempt: 2, ResumeFrom: "s3://b/ck-2"}); err != nil {
		t.Fatal(err)
	}
	if code := c.code(t); code != controlapi.RestartCode {
		t.Errorf("exit code %d, want the restart code %d; output:\n%s", code, controlapi.RestartCode, c.out.String())
	}
	var o controlapi.Order
	b, err := os.ReadFile(filepath.Join(c.dir, "restart.json"))
	if err == nil {
		err = json.Unmarshal(b, &o)
	}
	if diff := cmp.Diff(controlapi.Order{Attempt: 2, ResumeFrom: "s3://b/ck-2"}, o); err != nil || diff != "" {
		t.Errorf("the order kept (-want +got):\n%s (%v)", diff, err)
	}
}

// TestRunningProgramStopped: an order stops a running program: SIGTERM, and SIGKILL after the grace period
// when it ignores SIGTERM (a hung rank; a newer order's shorter grace hastens it); a program that exited
// before the order (its output still draining) gets no signal. The supervisor exits with the restart code,
// its log says what it did, and the restarted containers' supervisor says how the program before them ended
// (the kubelet removes the containers it restarts: no logs --previous).
func TestRunningProgramStopped(t *testing.T) {
	for _, tt := range []struct {
		name, program string
		orders        []controlapi.Order
		said, notSaid []string
		before        string
	}{
		{name: "it ignores SIGTERM", program: `trap "" TERM; echo started; while :; do sleep 0.1; done`,
			orders: []controlapi.Order{{Attempt: 5, GraceSeconds: 1}},
			said: []string{"into attempt 5: stopping the program (SIGTERM, SIGKILL after 1s)",
				"did not stop within 1s of the order: killed (SIGKILL)"},
			before: "before it, the program did not stop on SIGTERM and was killed (SIGKILL)"},
		{name: "it stops on SIGTERM", program: `echo started; exec sleep 30`, orders: []controlapi.Order{{Attempt: 5, GraceSeconds: 1}},
			said: []string{"into attempt 5: stopping the program (SIGTERM, SIGKILL after 1s)"}, notSaid: []string{"killed (SIGKILL)"},
			before: "before it, the program ended with code 143 after SIGTERM"},
		{name: "a newer order's shorter grace", program: `trap "" TERM; echo started; while :; do sleep 0.1; done`,
			orders: []controlapi.Order{{Attempt: 5, GraceSeconds: 600}, {Attempt: 6, GraceSeconds: 1}},
			said:   []string{"SIGKILL after 600s)", "did not stop within 1s of the order: killed (SIGKILL)"},
			before: "restarted in place into attempt 6 by the operator's order; before it, the program did not stop on SIGTERM"},
		{name: "it exited, its output still draining", program: `(sleep 30) & echo started; exit 3`,
			orders: []controlapi.Order{{Attempt: 5, GraceSeconds: 1}},
			said:   []string{"the operator restarts this pod's containers into attempt 5\n"}, notSaid: []string{"stopping the program", "SIGKILL"},
			before: "before it, the program had exited with code 3 before the order"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := startControlled(t, tt.program, "", 60)
			until(t, "the program runs", func() bool { return strings.Contains(c.out.String(), "started") })
			time.Sleep(300 * time.Millisecond) // a program that exits has, its silent output draining for 1 s
			for _, o := range tt.orders {
				if err := client().Restart(context.Background(), c.addr, c.token, o); err != nil {
					t.Fatal(err)
				}
			}
			// A program that stops on SIGTERM at once can end the supervisor before this probe: a probe that
			// finds nobody (code 0, the supervisor then exits with the restart code) is an unready pod too.
			if code, body := healthz(c.addr); code != http.StatusServiceUnavailable && code != 0 {
				t.Errorf("healthz while restarting = %d %q, want 503", code, body)
			}
			if code := c.code(t); code != controlapi.RestartCode {
				t.Errorf("exit code %d, want the restart code", code)
			}
			out := c.out.String()
			for _, said := range tt.said {
				if !strings.Contains(out, said) {
					t.Errorf("the log does not say %q:\n%s", said, out)
				}
			}
			for _, notSaid := range tt.notSaid {
				if strings.Contains(out, notSaid) {
					t.Errorf("the log says %q:\n%s", notSaid, out)
				}
			}
			again := startControlledIn(t, c.dir, "exit 0", "", 60)
			if code := again.code(t); code != 0 || !strings.Contains(again.out.String(), tt.before) {
				t.Errorf("the restarted supervisor: exit %d, log without %q:\n%s", code, tt.before, again.out.String())
			}
		})
	}
}

// TestHoldEnds: without an order, a hold ends with the program's own code: on SIGTERM (the pod deleted),
// and at the hold's end (the operator gone). A program that succeeds is not held.
func TestHoldEnds(t *testing.T) {
	for _, tt := range []struct {
		name    string
		program string
		hold    int
		signal  bool
		want    int
	}{
		{name: "SIGTERM", program: "exit 7", hold: 60, signal: true, want: 7},
		{name: "SIGTERM while the program runs (the pod deleted): not held", program: "echo started; exec sleep 30", hold: 60,
			signal: true, want: 143},
		{name: "hold's end", program: "exit 9", hold: 1, want: 9},
		{name: "success", program: "exit 0", hold: 60, want: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := startControlled(t, tt.program, "", tt.hold)
			switch {
			case tt.signal && tt.want == 143:
				until(t, "the program runs", func() bool { return strings.Contains(c.out.String(), "started") })
				_ = c.cmd.Process.Signal(syscall.SIGTERM)
			case tt.signal:
				c.held(t)
				_ = c.cmd.Process.Signal(syscall.SIGTERM)
			}
			if code := c.code(t); code != tt.want {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tt.want, c.out.String())
			}
		})
	}
}

// TestRestartedContainersTakeTheOrder: containers restarted in place run in the attempt the last order
// named, with its RESUME_FROM, even when their environment (read by the kubelet from the ConfigMap) is older.
func TestRestartedContainersTakeTheOrder(t *testing.T) {
	c := startControlled(t, `echo "resume=$RESUME_FROM"; exit 4`, `{"attempt":3,"resumeFrom":"s3://b/ck-9"}`, 60)
	if e := c.held(t); e.Attempt != 3 {
		t.Errorf("attempt %d, want 3 (the order's)", e.Attempt)
	}
	if !strings.Contains(c.out.String(), "resume=s3://b/ck-9") {
		t.Errorf("the program's RESUME_FROM is not the order's; output:\n%s", c.out.String())
	}
	if err := client().Restart(context.Background(), c.addr, c.token, controlapi.Order{Attempt: 3}); err != nil {
		t.Fatal(err)
	}
	if e := c.held(t); !e.Held {
		t.Error("an order for the attempt it already runs ended the hold")
	}
}

// TestBehindWaitsForItsOrder: a pod created in attempt 1 when the job is in attempt 3 (Kubernetes' Job controller
// replaced a rank that was gone after the gang restarted in place) does not run the program: it is unready
// and holds nothing until ordered, then exits with the restart code and keeps the order, which the
// restarted containers run in; without an order, at the hold's end, it exits with the restart code too (its
// containers run again and wait anew: the program never ran, no exit of its own may fail the run), and a
// SIGTERM ends it.
func TestBehindWaitsForItsOrder(t *testing.T) {
	behind := controlapi.CurrentAttemptEnv + "=3"
	for _, tt := range []struct {
		name   string
		hold   int
		order  bool
		signal bool
		want   int
	}{
		{name: "ordered", hold: 60, order: true, want: 215},
		{name: "no order: the hold's end restarts the containers to wait anew", hold: 1, want: 215},
		{name: "SIGTERM", hold: 60, signal: true, want: 143},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := startControlled(t, "echo ran; exit 0", "", tt.hold, behind)
			until(t, "unready", func() bool { code, body := healthz(c.addr); return code == 503 && strings.Contains(body, "attempt 3") })
			e, err := client().Exit(context.Background(), c.addr, c.token)
			if err != nil || e.Held || e.Attempt != 1 {
				t.Errorf("exit %+v, %v; want not held, attempt 1", e, err)
			}
			switch {
			case tt.order:
				if err := client().Restart(context.Background(), c.addr, c.token, controlapi.Order{Attempt: 3, ResumeFrom: "s3://b/ck-4"}); err != nil {
					t.Fatal(err)
				}
			case tt.signal:
				_ = c.cmd.Process.Signal(syscall.SIGTERM)
			}
			if code := c.code(t); code != tt.want {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tt.want, c.out.String())
			}
			if strings.Contains(c.out.String(), "ran") {
				t.Errorf("the program ran; output:\n%s", c.out.String())
			}
			if !tt.order {
				return
			}
			// The restarted containers: the order kept, the program runs in attempt 3 from its checkpoint.
			state, err := os.ReadFile(filepath.Join(c.dir, "restart.json"))
			if err != nil {
				t.Fatal(err)
			}
			again := startControlled(t, `echo "resume=$RESUME_FROM"; exit 0`, string(state), 60, behind)
			if code := again.code(t); code != 0 || !strings.Contains(again.out.String(), "resume=s3://b/ck-4") {
				t.Errorf("restarted: exit code %d, want 0 with the order's RESUME_FROM; output:\n%s", code, again.out.String())
			}
		})
	}
}

// TestNewerOrderWhileStopping: an order for a newer attempt that comes while the program stops (a trainer
// that takes its grace period) replaces the one written down: the restarted containers run in the newest.
func TestNewerOrderWhileStopping(t *testing.T) {
	c := startControlled(t, "trap '' TERM; echo started; sleep 30", "", 60)
	until(t, "the program runs", func() bool { return strings.Contains(c.out.String(), "started") })
	for _, o := range []controlapi.Order{{Attempt: 2, GraceSeconds: 2, ResumeFrom: "s3://b/ck-2"},
		{Attempt: 3, GraceSeconds: 2, ResumeFrom: "s3://b/ck-3"}, {Attempt: 2, GraceSeconds: 2}} {
		if err := client().Restart(context.Background(), c.addr, c.token, o); err != nil {
			t.Fatal(err)
		}
	}
	if code := c.code(t); code != 215 {
		t.Errorf("exit code %d, want 215; output:\n%s", code, c.out.String())
	}
	var kept controlapi.Order
	if b, err := os.ReadFile(filepath.Join(c.dir, "restart.json")); err != nil || json.Unmarshal(b, &kept) != nil {
		t.Fatalf("the order kept: %s, %v", b, err)
	}
	if diff := cmp.Diff(controlapi.Order{Attempt: 3, GraceSeconds: 2, ResumeFrom: "s3://b/ck-3"}, kept); diff != "" {
		t.Errorf("the order kept (-want +got):\n%s", diff)
	}
}

// TestHostileStateFile: the trainer shares the state directory; what it leaves there instead of an order
// (a FIFO, a link to an endless file, a huge file) is ignored, and the program runs.
func TestHostileStateFile(t *testing.T) {
	for _, tt := range []struct {
		name string
		make func(path string) error
	}{
		{name: "FIFO", make: func(p string) error { return exec.Command("mkfifo", p).Run() }},
		{name: "link to /dev/zero", make: func(p string) error { return os.Symlink("/dev/zero", p) }},
		{name: "huge", make: func(p string) error { return os.WriteFile(p, make([]byte, 1<<20), 0o600) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := tt.make(filepath.Join(dir, "restart.json")); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(supervisorBin, supervised([]string{"--listen=" + freeAddr(t)}, "sh", "-c", "echo ran; exit 3")[1:]...)
			cmd.Env = append(os.Environ(), controlapi.TokenEnv+"=t", controlapi.RestartCodeEnv+"=215", controlapi.AttemptEnv+"=1",
				controlapi.StateDirEnv+"="+dir, controlapi.HoldEnv+"=1")
			var out lockedBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			c := &controlled{cmd: cmd}
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			if code := c.code(t); code != 3 || !strings.Contains(out.String(), "ran") {
				t.Errorf("exit code %d, want the program's 3; output:\n%s", code, out.String())
			}
		})
	}
}

// TestBadOrders: an order with more than one JSON value, or a grace period past an int32, is refused
// (400) and changes nothing.
func TestBadOrders(t *testing.T) {
	c := startControlled(t, `exit 3`, "", 60)
	c.held(t)
	for _, body := range []string{`{"attempt":2}{"attempt":99} garbage`, `{"attempt":2,"graceSeconds":9999999999}`} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+c.addr+controlapi.RestartPath, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("order %s: %s, want 400 Bad Request", body, resp.Status)
		}
	}
	if e := c.held(t); !e.Held {
		t.Error("a refused order ended the hold")
	}
}

// TestTokensBoundToPodAndAttempt: a supervisor that knows its pod's UID takes only the tokens derived for
// it: /exit the pod's, /restart the pod's for the order's attempt. A token seen on the wire (plain HTTP)
// opens no other pod and orders no other attempt; the job's token itself is refused; an order more than
// controlapi.MaxAttemptLead past the pod's attempt is refused even with its token (before, anyone holding
// the job's token could order attempt 2^31-1, after which the operator's orders changed nothing).
func TestTokensBoundToPodAndAttempt(t *testing.T) {
	c := startControlled(t, `exit 3`, "", 60, controlapi.PodUIDEnv+"=pod-a")
	ctx := context.Background()
	until(t, "the program is held", func() bool {
		e, err := client().Exit(ctx, c.addr, controlapi.ExitToken(c.token, "pod-a"))
		return err == nil && e.Held
	})
	for name, token := range map[string]string{"the job's token": c.token, "another pod's": controlapi.ExitToken(c.token, "pod-b"),
		"an order's token": controlapi.OrderToken(c.token, "pod-a", controlapi.Order{Attempt: 2})} {
		if _, err := client().Exit(ctx, c.addr, token); err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("GET /exit with %s: %v, want 401", name, err)
		}
	}
	order := func(attempt int32) controlapi.Order { return controlapi.Order{Attempt: attempt, GraceSeconds: 1} }
	restart := func(token string, attempt int32) int {
		body := `{"attempt":` + strconv.Itoa(int(attempt)) + `,"graceSeconds":1}`
		req, _ := http.NewRequest(http.MethodPost, "http://"+c.addr+controlapi.RestartPath, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name    string
		token   string
		attempt int32
		want    int
	}{
		{name: "the job's token", token: c.token, attempt: 2, want: http.StatusUnauthorized},
		{name: "another attempt's token (a replay)", token: controlapi.OrderToken(c.token, "pod-a", order(3)), attempt: 2,
			want: http.StatusUnauthorized},
		{name: "another pod's", token: controlapi.OrderToken(c.token, "pod-b", order(2)), attempt: 2, want: http.StatusUnauthorized},
		{name: "the token of another order for the attempt (another resumeFrom)", token: controlapi.OrderToken(c.token, "pod-a",
			controlapi.Order{Attempt: 2, GraceSeconds: 1, ResumeFrom: "s3://attacker/evil.pt"}), attempt: 2, want: http.StatusUnauthorized},
		{name: "the exit token", token: controlapi.ExitToken(c.token, "pod-a"), attempt: 2, want: http.StatusUnauthorized},
		{name: "too far ahead", token: controlapi.OrderToken(c.token, "pod-a", order(1<<31-1)), attempt: 1<<31 - 1, want: http.StatusBadRequest},
		{name: "just past the lead", token: controlapi.OrderToken(c.token, "pod-a", order(2+controlapi.MaxAttemptLead)),
			attempt: 2 + controlapi.MaxAttemptLead, want: http.StatusBadRequest},
	} {
		if got := restart(tc.token, tc.attempt); got != tc.want {
			t.Errorf("POST /restart with %s: %d, want %d", tc.name, got, tc.want)
		}
	}
	if e, err := client().Exit(ctx, c.addr, controlapi.ExitToken(c.token, "pod-a")); err != nil || !e.Held {
		t.Fatalf("a refused order ended the hold: %+v, %v", e, err)
	}
	if got := restart(controlapi.OrderToken(c.token, "pod-a", order(2)), 2); got != http.StatusAccepted {
		t.Errorf("the operator's order: %d, want 202", got)
	}
	if code := c.code(t); code != controlapi.RestartCode {
		t.Errorf("exit code %d, want the restart code %d", code, controlapi.RestartCode)
	}
}
