// This file holds how the control carries out the operator's orders: it takes an order, then stops
// the program or ends a hold, and kills a program that outlasts the order's grace.

package supervisor

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
)

// errReleased refuses an order that came after the hold's end: the container exits with the program's
// code, not the restart code.
var errReleased = errors.New("too late: the hold ended with no order and the container exits with the program's code")

// obey takes an order and returns what to do once it is answered. An order for an attempt the pod
// runs or was ordered into changes nothing. Otherwise obey writes the order down for the restarted
// containers; a newer one replaces it while the program stops. The first order stops the program or
// ends a hold; a newer one hastens the stop.
func (c *restartControl) obey(o controlapi.Order) (act func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if o.Attempt <= c.attempt || c.state.restarting() && o.Attempt <= c.orderedAttempt {
		return func() {}, nil
	}
	if c.state == released {
		return nil, errReleased
	}
	if err := c.writeOrder(o); err != nil {
		return nil, err
	}
	c.orderedAttempt = o.Attempt
	// The state refuses a second order: this newer one only hastens the stop.
	if !c.advance(evOrder) {
		return func() { c.hasten(o) }, nil
	}
	return func() { c.stop(o) }, nil
}

// stop acts on the first order taken. It ends a hold or a barrier, or stops the running program:
// SIGTERM, then SIGKILL after the order's grace seconds. It says so in the container's log.
func (c *restartControl) stop(o controlapi.Order) {
	c.orders <- struct{}{}
	c.mu.Lock()
	defer c.mu.Unlock()
	say := fmt.Sprintf("supervisor: the operator restarts this pod's containers into attempt %d", o.Attempt)
	if c.state != restartRunning {
		fmt.Fprintln(os.Stderr, say)
		return
	}
	fmt.Fprintf(os.Stderr, "%s: stopping the program (SIGTERM, SIGKILL after %ds)\n", say, o.GraceSeconds)
	c.termSent = true
	_ = syscall.Kill(c.pid, syscall.SIGTERM)
	c.killAfter(o.GraceSeconds)
}

// hasten applies a newer order's grace to a program that is stopping: the earlier of the kills
// wins.
func (c *restartControl) hasten(o controlapi.Order) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == restartRunning {
		c.killAfter(o.GraceSeconds)
	}
}

// killAfter kills the program (SIGKILL) grace seconds from now unless it ended by then. c.mu is
// held.
func (c *restartControl) killAfter(grace int64) {
	pid := c.pid
	time.AfterFunc(time.Duration(grace)*time.Second, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.state == restartRunning && !c.killed {
			fmt.Fprintf(os.Stderr, "supervisor: the program did not stop within %ds of the order: killed (SIGKILL)\n", grace)
			c.killed = true
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}
