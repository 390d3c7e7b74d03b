// This file holds the control of the program's run: Run's hooks around the program, the barrier of
// a pod behind the job's attempt, and the hold of a failed program for the operator's word.

package supervisor

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
)

// runControl is what Run and the server ask of the control around the program's run.
type runControl interface {
	// register serves the control's protocol on mux.
	register(mux *http.ServeMux)
	// ready reports whether the pod is ready, and why not.
	ready() (bool, string)
	// barrier holds a pod behind the job's attempt before the program starts.
	barrier(sigs <-chan os.Signal) (code int, waited bool)
	// running records the started program's pid.
	running(pid int)
	// signalled notes a signal the supervisor received while the program ran.
	signalled(s os.Signal)
	// reaped notes that the program ended: its status was read.
	reaped()
	// exited returns the code to exit with once the program ended with status.
	exited(status syscall.WaitStatus, ended time.Time, sigs <-chan os.Signal) int
}

// newControl returns the control cfg describes, noControl when cfg takes no orders. t is the
// output's tail.
func newControl(cfg Control, t *tail) runControl {
	if !cfg.takesOrders() {
		return noControl{}
	}
	return newRestartControl(cfg.withDefaults(), t)
}

// noControl is the control of a supervisor that takes no orders: the program runs as without
// control.
type noControl struct{}

func (noControl) register(*http.ServeMux)              {}
func (noControl) ready() (bool, string)                { return true, "" }
func (noControl) barrier(<-chan os.Signal) (int, bool) { return 0, false }
func (noControl) running(int)                          {}
func (noControl) signalled(os.Signal)                  {}
func (noControl) reaped()                              {}

func (noControl) exited(status syscall.WaitStatus, _ time.Time, _ <-chan os.Signal) int {
	return exitCode(status)
}

// restartControl holds the program's run for the operator. It tells how a failed program ended, and
// it obeys orders to restart the pod's containers into a new attempt.
type restartControl struct {
	cfg  Control
	tail *tail
	// orders receives the first order taken, once it is answered.
	orders chan struct{}

	mu sync.Mutex
	// state is where the run stands.
	state controlState
	// attempt is the attempt the pod runs in.
	attempt int32
	// orderedAttempt is the attempt of the last order written down.
	orderedAttempt int32
	// pid is the program's, once it started.
	pid int
	// started is when the program started.
	started time.Time
	// heldExit is how the held program ended. It is set as the state becomes held.
	heldExit controlapi.Exit
	// termSent records that an order's stop sent SIGTERM. It stays a field: it is what the
	// supervisor did, not where the run stands, and the note on how the program ended tells it.
	termSent bool
	// killed records that SIGKILL was sent as an order's grace ran out. It stays a field: it keeps a
	// newer order's timer from killing again, and the note on how the program ended tells it.
	killed bool
}

// newRestartControl returns the control of cfg. It takes the last order obeyed in the pod, if any.
func newRestartControl(cfg Control, t *tail) *restartControl {
	c := &restartControl{cfg: cfg, tail: t, attempt: cfg.Attempt, orders: make(chan struct{}, 1)}
	c.resumeLastOrder()
	c.state = starting
	if cfg.Current > c.attempt {
		c.state = behind
	}
	return c
}

// advance moves the state on ev, and reports whether it moved. c.mu is held.
func (c *restartControl) advance(ev event) bool {
	to, ok := c.state.next(ev)
	c.state = to
	return ok
}

// current returns the state.
func (c *restartControl) current() controlState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// barrier holds a pod created behind the job's attempt (for a rank that was gone, after the gang
// restarted in place without it) before the program starts. Had the program run, it would have
// joined the gang's rendezvous in the wrong attempt, maybe from an older checkpoint.
//
// It waits for the operator's order, then returns the restart code: the pod's containers run again
// in the attempt ordered, init containers included. A signal that ends the container returns 128+n.
// At the hold's end it returns the restart code too: the containers wait anew, with the job's
// attempt as the kubelet reads it then. The program never ran, so no exit of its own may fail the
// run. waited is false when the pod is not behind.
func (c *restartControl) barrier(sigs <-chan os.Signal) (code int, waited bool) {
	if !c.current().isBehind() {
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

// running records the program's pid once it started. An order that came before kills it at once.
func (c *restartControl) running(pid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pid, c.started = pid, time.Now()
	c.advance(evStarted)
	if c.state.restarting() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// signalled notes a signal the supervisor received while the program ran. One that ends the
// container keeps the program from being held.
func (c *restartControl) signalled(s os.Signal) {
	if !ends(s) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advance(evEndSignal)
}

// ends reports whether s ends a container: the kubelet's at a pod's deletion, or a user's.
func ends(s os.Signal) bool {
	return s == syscall.SIGTERM || s == syscall.SIGINT || s == syscall.SIGHUP || s == syscall.SIGQUIT
}

// reaped notes that the program ended (its status was read). No signal goes to its pid any more:
// another process may take it while the output drains.
func (c *restartControl) reaped() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advance(evReaped)
}

// exited returns the code to exit with once the program ended with status at ended. After an order
// it returns the restart code. It returns the program's code when the program succeeded or a signal
// that ends the container came first. It holds a program that failed otherwise: see hold.
func (c *restartControl) exited(status syscall.WaitStatus, ended time.Time, sigs <-chan os.Signal) int {
	code := exitCode(status)
	c.mu.Lock()
	if c.state.restarting() {
		how := c.howStopped(code)
		c.mu.Unlock()
		c.keepHowItEnded(how)
		return c.cfg.RestartCode
	}
	if code == 0 || !c.advance(evFailed) {
		c.mu.Unlock()
		return code
	}
	c.heldExit = c.describe(status, code, ended)
	c.mu.Unlock()
	fmt.Fprintf(os.Stderr, "supervisor: the program exited with code %d; held for the operator's word (at most %s)\n", code, c.cfg.Hold)
	return c.hold(code, sigs)
}

// howStopped returns how the program that ended with code under an order ended. c.mu is held.
func (c *restartControl) howStopped(code int) string {
	switch {
	case c.killed:
		return "the program did not stop on SIGTERM and was killed (SIGKILL)"
	case c.termSent:
		return fmt.Sprintf("the program ended with code %d after SIGTERM", code)
	}
	return fmt.Sprintf("the program had exited with code %d before the order", code)
}

// hold waits for an order, a signal that ends the container or the hold's end. It returns the
// restart code on an order, code otherwise.
func (c *restartControl) hold(code int, sigs <-chan os.Signal) int {
	ordered, s := c.awaitWord(sigs)
	if !ordered {
		// An order taken as the time ran out, or as a signal came, wins (it was answered 202); once
		// released, orders are refused (409), so a late one is not answered 202 while the container exits
		// with the program's code.
		c.mu.Lock()
		c.advance(evHoldEnded)
		ordered = c.state.restarting()
		c.mu.Unlock()
	}
	switch {
	case ordered:
		c.keepHowItEnded(fmt.Sprintf("the program had exited with code %d (held for the operator's word)", code))
		return c.cfg.RestartCode
	case s == nil:
		fmt.Fprintf(os.Stderr, "supervisor: no word from the operator in %s; exiting with the program's code %d\n", c.cfg.Hold, code)
	}
	return code
}

// awaitWord waits, at most the hold's time, for an order (ordered) or a signal that ends the
// container (s). It returns neither when the time ran out.
func (c *restartControl) awaitWord(sigs <-chan os.Signal) (ordered bool, s os.Signal) {
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

// describe returns how the program ended with status (code) at ended, as the kubelet would tell it
// in the container's terminated state. c.mu is held.
func (c *restartControl) describe(status syscall.WaitStatus, code int, ended time.Time) controlapi.Exit {
	e := controlapi.Exit{Attempt: c.attempt, Held: true, ExitCode: int32(code), StartedAt: c.started, FinishedAt: ended}
	if status.Signaled() {
		e.Signal = int32(status.Signal())
	}
	e.Message = c.message()
	return e
}

// message returns the termination message the program wrote, or else the end of its output.
func (c *restartControl) message() string {
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
