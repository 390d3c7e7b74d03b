package supervisor

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
)

// Control is what a supervisor that takes the operator's orders (package controlapi) needs: the job's
// token, the code to exit with on an order to restart, the attempt the pod was created in and a
// directory that outlives the containers. A zero Token takes no orders.
type Control struct {
	Token string
	// PodUID is the pod's UID: the tokens taken are derived for it (controlapi.ExitToken, OrderToken); ""
	// takes Token itself.
	PodUID      string
	RestartCode int
	Attempt     int32
	// Current is the job's attempt when the container was created (0: unknown). A pod behind it (created
	// in an older attempt, never ordered) waits for its order before it runs the program.
	Current  int32
	StateDir string
	// Hold is how long a program that failed is held for the operator's word; then the supervisor exits
	// with the program's code, as without control (DefaultHold when zero).
	Hold time.Duration
	// TerminationLog is the container's termination message file (/dev/termination-log when empty).
	TerminationLog string
}

// DefaultHold is how long a failed program waits for the operator's order before the supervisor exits
// with its code: the Job then fails, and the operator restarts the gang the slow way.
const DefaultHold = 2 * time.Minute

// stateFile keeps, in Control.StateDir, the last order obeyed: the attempt the restarted containers run in
// and the RESUME_FROM it named.
const stateFile = "restart.json"

// endedFile keeps, in Control.StateDir, how the program of the containers an order restarted ended, for the
// restarted supervisor to say in its log: the kubelet removes those containers (no `kubectl logs --previous`).
const endedFile = "ended.txt"

// controller holds the program's run for the operator: its pid, and once it failed, how it ended.
type controller struct {
	cfg     Control
	tail    *tail
	mu      sync.Mutex
	attempt int32
	pid     int
	started time.Time
	held    *controlapi.Exit
	ordered bool
	// orderedAttempt is the attempt of the order written down.
	orderedAttempt int32
	// stopping: a signal that ends the container came (the pod is deleted): a program that ends then is
	// not held.
	stopping bool
	// behind: the pod is behind the job's attempt and waits for its order (barrier).
	behind bool
	// programEnded: the program ended (its status was read); a stop's SIGKILL is not sent then.
	programEnded bool
	// termSent, killed: a stop sent SIGTERM, and SIGKILL (the program ignored SIGTERM).
	termSent, killed bool
	orders           chan struct{}
}

// newController returns the controller of cfg, nil when it takes no orders. It reads the last order obeyed
// (the restart that started these containers) and gives its RESUME_FROM to the program.
func newController(cfg Control, t *tail) *controller {
	if cfg.Token == "" || cfg.RestartCode <= 0 || cfg.RestartCode > 255 {
		return nil
	}
	if cfg.Hold <= 0 {
		cfg.Hold = DefaultHold
	}
	if cfg.TerminationLog == "" {
		cfg.TerminationLog = "/dev/termination-log"
	}
	c := &controller{cfg: cfg, tail: t, attempt: cfg.Attempt, orders: make(chan struct{}, 1)}
	if o, ok := c.lastOrder(); ok && o.Attempt >= c.attempt {
		c.attempt = o.Attempt
		if o.ResumeFrom != "" {
			_ = os.Setenv("RESUME_FROM", o.ResumeFrom)
		}
		c.sayHowItEnded(o)
	}
	c.behind = cfg.Current > c.attempt
	return c
}

// barrier holds a pod that is behind the job's attempt (created for a rank that was gone, after the gang
// restarted in place without it) before the program starts: had it run, it would have joined the gang's
// rendezvous in the wrong attempt, maybe from an older checkpoint. It waits for the operator's order (the
// restart code: the pod's containers run again in the attempt ordered, init containers included), or a
// signal that ends the container. At the hold's end it exits with the restart code too: the containers
// run again and wait anew, with the job's attempt as the kubelet reads it then (the program never ran: no
// exit of its own may fail the run). waited is false when the pod is not behind.
func (c *controller) barrier(sigs <-chan os.Signal) (code int, waited bool) {
	if c == nil || !c.behind {
		return 0, false
	}
	fmt.Fprintf(os.Stderr, "supervisor: this pod was created in attempt %d and the job is in attempt %d; "+
		"waiting for the operator's order to join it (at most %s)\n", c.attempt, c.cfg.Current, c.cfg.Hold)
	ordered, s := c.awaitWord(sigs)
	switch {
	case ordered:
	case s != nil:
		return 128 + int(s.(syscall.Signal)), true
	default:
		fmt.Fprintf(os.Stderr, "supervisor: no order from the operator in %s; the program did not run; waiting again\n", c.cfg.Hold)
	}
	return c.cfg.RestartCode, true
}

// lastOrder reads the last order obeyed in this pod.
func (c *controller) lastOrder() (controlapi.Order, bool) {
	var o controlapi.Order
	if c.cfg.StateDir == "" {
		return o, false
	}
	b, err := readRegular(filepath.Join(c.cfg.StateDir, stateFile), controlapi.MaxBody)
	if err != nil || json.Unmarshal(b, &o) != nil {
		return o, false
	}
	return o, true
}

// keepHowItEnded writes down how the program of the containers an order restarts ended (endedFile).
func (c *controller) keepHowItEnded(how string) {
	if c.cfg.StateDir != "" {
		_ = os.WriteFile(filepath.Join(c.cfg.StateDir, endedFile), []byte(how), 0o600)
	}
}

// sayHowItEnded says in the log that these containers run after the operator's order o, and how the
// program of the containers before them ended (endedFile, read once: a later restart of another cause
// does not repeat it).
func (c *controller) sayHowItEnded(o controlapi.Order) {
	if c.cfg.StateDir == "" {
		return
	}
	path := filepath.Join(c.cfg.StateDir, endedFile)
	b, err := readRegular(path, maxEndedNote)
	if err != nil {
		return
	}
	_ = os.Remove(path)
	how := strings.Join(strings.Fields(strings.ToValidUTF8(string(b), "?")), " ")
	fmt.Fprintf(os.Stderr, "supervisor: these containers were restarted in place into attempt %d by the operator's order; "+
		"before it, %s\n", o.Attempt, how)
}

// maxEndedNote bounds endedFile as read (the trainer shares the directory).
const maxEndedNote = 256

// readRegular reads at most limit bytes of path when it is a regular file, not through a link: the trainer,
// which shares the directory, may have put anything there (a FIFO would block the read for ever).
func readRegular(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read only
	if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() || info.Size() > limit {
		return nil, fmt.Errorf("%s is not a regular file of at most %d bytes", path, limit)
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// register serves the protocol on mux.
func (c *controller) register(mux *http.ServeMux) {
	mux.HandleFunc("GET "+controlapi.ExitPath, c.serveExit)
	mux.HandleFunc("POST "+controlapi.RestartPath, c.serveRestart)
}

// ready says whether the pod is ready: not while a failed program is held or a restart is under way.
func (c *controller) ready() (bool, string) {
	if c == nil {
		return true, ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.held != nil:
		return false, fmt.Sprintf("held: the program exited with code %d", c.held.ExitCode)
	case c.ordered:
		return false, "restarting"
	case c.behind:
		return false, fmt.Sprintf("waiting for the order to join attempt %d", c.cfg.Current)
	}
	return true, ""
}

func (c *controller) serveExit(w http.ResponseWriter, r *http.Request) {
	if !agentapi.Authorized(r, controlapi.ExitToken(c.cfg.Token, c.cfg.PodUID)) {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	c.mu.Lock()
	e := controlapi.Exit{Attempt: c.attempt}
	if c.held != nil {
		e = *c.held
	}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(e)
}

func (c *controller) serveRestart(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") == "" {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	var o controlapi.Order
	dec := json.NewDecoder(io.LimitReader(r.Body, controlapi.MaxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil || dec.More() || o.Attempt < 0 || o.GraceSeconds < 0 || o.GraceSeconds > maxGrace ||
		len(o.ResumeFrom) > 4096 {
		http.Error(w, "bad order", http.StatusBadRequest)
		return
	}
	if !agentapi.Authorized(r, controlapi.OrderToken(c.cfg.Token, c.cfg.PodUID, o)) {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if c.tooFar(o.Attempt) {
		http.Error(w, "the order's attempt is too far ahead", http.StatusBadRequest)
		return
	}
	act, err := c.obey(o)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	// Answer before acting: the supervisor exits once the order ends its hold or its program, and an answer
	// not yet written then reaches the operator as EOF (it recreated the gang).
	w.WriteHeader(http.StatusAccepted)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	act()
}

// tooFar says whether an order's attempt is more than controlapi.MaxAttemptLead past the one the pod runs
// in and the job's when its container was created: an order the operator did not give (it orders the next
// attempt), after which its real orders would change nothing.
func (c *controller) tooFar(attempt int32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(attempt) > int64(max(c.attempt, c.cfg.Current))+controlapi.MaxAttemptLead
}

// maxGrace bounds an order's grace period (a pod's terminationGracePeriodSeconds fits an int32 too).
const maxGrace = 1<<31 - 1

// obey takes an order: one for an attempt the pod already runs or was ordered into changes nothing.
// Otherwise it writes the order down for the restarted containers (a newer one replaces it while the
// program stops) and returns what to do once the order is answered: stop the program or end a hold.
func (c *controller) obey(o controlapi.Order) (act func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	nothing := func() {}
	if o.Attempt <= c.attempt || c.ordered && o.Attempt <= c.orderedAttempt {
		return nothing, nil
	}
	if err := c.writeOrder(o); err != nil {
		return nil, err
	}
	c.orderedAttempt = o.Attempt
	if c.ordered { // a newer order while the program stops: the restarted containers take it
		return func() { c.hasten(o) }, nil
	}
	c.ordered = true
	return func() { c.stop(o) }, nil
}

// stop acts on the order taken: it ends a hold or a barrier, or stops the running program (SIGTERM, then
// SIGKILL after the order's grace seconds), and says so in the container's log.
func (c *controller) stop(o controlapi.Order) {
	c.orders <- struct{}{}
	c.mu.Lock()
	defer c.mu.Unlock()
	say := fmt.Sprintf("supervisor: the operator restarts this pod's containers into attempt %d", o.Attempt)
	if c.held != nil || c.pid <= 0 || c.programEnded {
		fmt.Fprintln(os.Stderr, say)
		return
	}
	fmt.Fprintf(os.Stderr, "%s: stopping the program (SIGTERM, SIGKILL after %ds)\n", say, o.GraceSeconds)
	c.termSent = true
	_ = syscall.Kill(c.pid, syscall.SIGTERM)
	c.killAfter(o.GraceSeconds)
}

// hasten applies a newer order's grace to a program that is stopping: the earlier of the two kills it.
func (c *controller) hasten(o controlapi.Order) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held == nil && c.pid > 0 && !c.programEnded {
		c.killAfter(o.GraceSeconds)
	}
}

// killAfter kills the program (SIGKILL) grace seconds from now unless it ended by then. c.mu is held.
func (c *controller) killAfter(grace int64) {
	pid := c.pid
	time.AfterFunc(time.Duration(grace)*time.Second, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.programEnded && !c.killed {
			fmt.Fprintf(os.Stderr, "supervisor: the program did not stop within %ds of the order: killed (SIGKILL)\n", grace)
			c.killed = true
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// reaped notes that the program ended (its status was read): no signal is sent to its pid any more, which
// another process may take while the output drains.
func (c *controller) reaped() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.programEnded = true
}

// writeOrder keeps the order in the state directory, replacing the last one at once.
func (c *controller) writeOrder(o controlapi.Order) error {
	if c.cfg.StateDir == "" {
		return nil
	}
	b, _ := json.Marshal(o)
	tmp := filepath.Join(c.cfg.StateDir, stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("keeping the order: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(c.cfg.StateDir, stateFile)); err != nil {
		return fmt.Errorf("keeping the order: %w", err)
	}
	return nil
}

// running records the program's pid once it started; an order that came before it stops it at once.
func (c *controller) running(pid int) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pid, c.started = pid, time.Now()
	if c.ordered {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// exited returns the code to exit with once the program ended with status: the restart code when an order
// came; the program's code when it succeeded, when a signal that ends the container came first, or once a
// hold ends without an order (such a signal, the hold's time). A program that failed otherwise is held until
// then.
func (c *controller) exited(status syscall.WaitStatus, ended time.Time, sigs <-chan os.Signal) int {
	code := exitCode(status)
	if c == nil {
		return code
	}
	c.mu.Lock()
	if c.ordered { // programEnded: set by reaped, before the output drained
		how := fmt.Sprintf("the program had exited with code %d before the order", code)
		switch {
		case c.killed:
			how = "the program did not stop on SIGTERM and was killed (SIGKILL)"
		case c.termSent:
			how = fmt.Sprintf("the program ended with code %d after SIGTERM", code)
		}
		c.mu.Unlock()
		c.keepHowItEnded(how)
		return c.cfg.RestartCode
	}
	if code == 0 || c.stopping {
		c.mu.Unlock()
		return code
	}
	c.held = c.exit(status, code, ended)
	c.mu.Unlock()
	fmt.Fprintf(os.Stderr, "supervisor: the program exited with code %d; held for the operator's word (at most %s)\n", code, c.cfg.Hold)
	return c.hold(code, sigs)
}

// signalled notes a signal the supervisor received while the program ran.
func (c *controller) signalled(s os.Signal) {
	if c == nil || !ends(s) {
		return
	}
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
}

// ends says whether a signal ends a container: what the kubelet sends at a pod's deletion, or a user.
func ends(s os.Signal) bool {
	return s == syscall.SIGTERM || s == syscall.SIGINT || s == syscall.SIGHUP || s == syscall.SIGQUIT
}

// hold waits for an order (the restart code), a signal that ends the container or the hold's end (code).
func (c *controller) hold(code int, sigs <-chan os.Signal) int {
	ordered, s := c.awaitWord(sigs)
	switch {
	case ordered:
		c.keepHowItEnded(fmt.Sprintf("the program had exited with code %d (held for the operator's word)", code))
		return c.cfg.RestartCode
	case s == nil:
		fmt.Fprintf(os.Stderr, "supervisor: no word from the operator in %s; exiting with the program's code %d\n", c.cfg.Hold, code)
	}
	return code
}

// awaitWord waits, at most the hold's time, for an order (ordered) or a signal that ends the container (s);
// neither when the time ran out.
func (c *controller) awaitWord(sigs <-chan os.Signal) (ordered bool, s os.Signal) {
	timer := time.NewTimer(c.cfg.Hold)
	defer timer.Stop()
	for {
		select {
		case <-c.orders:
			return true, nil
		case s := <-sigs:
			if ends(s) {
				return false, s
			}
		case <-timer.C:
			return false, nil
		}
	}
}

// exit describes how the program ended (at ended), as the kubelet would in its container's terminated state.
func (c *controller) exit(status syscall.WaitStatus, code int, ended time.Time) *controlapi.Exit {
	e := &controlapi.Exit{Attempt: c.attempt, Held: true, ExitCode: int32(code), StartedAt: c.started, FinishedAt: ended}
	if status.Signaled() {
		e.Signal = int32(status.Signal())
	}
	e.Message = c.message()
	return e
}

// message returns the termination message the program wrote, or the end of its output.
func (c *controller) message() string {
	f, err := os.Open(c.cfg.TerminationLog)
	if err == nil {
		b, _ := io.ReadAll(io.LimitReader(f, controlapi.MaxMessage))
		_ = f.Close()
		if len(b) > 0 {
			return string(b)
		}
	}
	return c.tail.String()
}

// ControlFromEnv returns the Control the environment (controlapi's variables) describes; a zero Token when
// it describes none.
func ControlFromEnv() Control {
	code, _ := strconv.Atoi(os.Getenv(controlapi.RestartCodeEnv))
	attempt, current := envInt32(controlapi.AttemptEnv), envInt32(controlapi.CurrentAttemptEnv)
	hold, _ := strconv.Atoi(os.Getenv(controlapi.HoldEnv))
	return Control{Token: os.Getenv(controlapi.TokenEnv), PodUID: os.Getenv(controlapi.PodUIDEnv), RestartCode: code,
		Attempt: attempt, Current: current,
		StateDir: os.Getenv(controlapi.StateDirEnv), Hold: time.Duration(hold) * time.Second}
}

// envInt32 reads an int32 from the environment: 0 when unset or not one (out of range included).
func envInt32(name string) int32 {
	n, err := strconv.ParseInt(os.Getenv(name), 10, 32)
	if err != nil {
		return 0
	}
	return int32(n)
}

// tail keeps the last bytes of the program's lines: the message of a failure when the program wrote no
// termination message.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

// tailSize is how much output tail keeps: the kubelet's fallback to the log keeps 2 KiB.
const tailSize = 2 << 10

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

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.buf); n > tailSize {
		return string(t.buf[n-tailSize:])
	}
	return string(t.buf)
}
