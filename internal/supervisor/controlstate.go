// This file holds the control's state machine: where the program's run stands under control, the
// events that move it, and the table of the moves.

package supervisor

import "strconv"

// controlState is where the program's run stands under control. Each restart state follows an order
// to restart; its suffix says where the program stood when the order came, or stands since.
type controlState int

const (
	// starting is the state before the program starts.
	starting controlState = iota
	// behind is the state of a pod created behind the job's attempt: it waits at the barrier for
	// its order.
	behind
	// running is the state while the program runs.
	running
	// terminating is the state once a signal that ends the container came while the program runs. A
	// program that ends then is not held.
	terminating
	// ended is the state once the program ended (it was reaped), while its output drains.
	ended
	// terminated is the state once the program ended after a signal that ends the container.
	terminated
	// held is the state of a failed program held for the operator's word.
	held
	// restartBehind is the state once an order came for a pod behind: the program never runs.
	restartBehind
	// restartStarting is the state once an order came before the program started: it is killed as
	// it starts.
	restartStarting
	// restartRunning is the state once an order came while the program runs: it is stopped.
	restartRunning
	// restartEnded is the state once the program ended under an order, or before it.
	restartEnded
	// restartHeld is the state once an order ended a hold.
	restartHeld
	// released is the state once a hold ended with no order: the container exits with the program's
	// code, and an order comes too late.
	released
)

// stateNames are the names tests print the states by.
var stateNames = [...]string{
	starting: "starting", behind: "behind", running: "running", terminating: "terminating", ended: "ended",
	terminated: "terminated", held: "held", restartBehind: "restartBehind", restartStarting: "restartStarting",
	restartRunning: "restartRunning", restartEnded: "restartEnded", restartHeld: "restartHeld", released: "released",
}

// String returns the state's name.
func (s controlState) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "controlState(" + strconv.Itoa(int(s)) + ")"
}

// event is what happens to the program's run under control.
type event int

const (
	// evStarted is the program's start.
	evStarted event = iota
	// evEndSignal is a signal that ends the container (see ends), received while the program runs.
	evEndSignal
	// evReaped is the program's end: its status was read.
	evReaped
	// evFailed is the decision to hold a program that ended with a non-zero code.
	evFailed
	// evOrder is an order to restart into a new attempt, the first one taken.
	evOrder
	// evHoldEnded is the end of a hold with no order: its time ran out, or a signal ended the container.
	evHoldEnded
)

// eventNames are the names tests print the events by.
var eventNames = [...]string{
	evStarted: "started", evEndSignal: "endSignal", evReaped: "reaped", evFailed: "failed", evOrder: "order",
	evHoldEnded: "holdEnded",
}

// String returns the event's name.
func (ev event) String() string {
	if ev >= 0 && int(ev) < len(eventNames) {
		return eventNames[ev]
	}
	return "event(" + strconv.Itoa(int(ev)) + ")"
}

// transition is a move of the state from one to another on an event.
type transition struct {
	from controlState
	on   event
	to   controlState
}

// transitions are all the moves of the state. An event in a state it does not list changes nothing.
var transitions = []transition{
	{behind, evOrder, restartBehind},
	{starting, evStarted, running},
	{starting, evOrder, restartStarting},
	{running, evEndSignal, terminating},
	{running, evReaped, ended},
	{running, evOrder, restartRunning},
	{terminating, evReaped, terminated},
	{terminating, evOrder, restartRunning},
	{ended, evFailed, held},
	{ended, evOrder, restartEnded},
	{terminated, evOrder, restartEnded},
	{held, evOrder, restartHeld},
	{held, evHoldEnded, released},
	{restartStarting, evStarted, restartRunning},
	{restartRunning, evReaped, restartEnded},
}

// next returns the state ev moves s to, and reports whether the table allows ev in s. It returns s
// itself when it refuses ev.
func (s controlState) next(ev event) (controlState, bool) {
	for _, t := range transitions {
		if t.from == s && t.on == ev {
			return t.to, true
		}
	}
	return s, false
}

// restarting reports whether s follows an order to restart.
func (s controlState) restarting() bool {
	switch s {
	case restartBehind, restartStarting, restartRunning, restartEnded, restartHeld:
		return true
	}
	return false
}

// isBehind reports whether s is of a pod created behind the job's attempt, ordered or not.
func (s controlState) isBehind() bool {
	return s == behind || s == restartBehind
}

// holding reports whether s holds a failed program's exit, ordered or not.
func (s controlState) holding() bool {
	return s == held || s == restartHeld
}
