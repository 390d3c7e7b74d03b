// Package supervisor runs a training program as a container's first process, the way Tekton's entrypoint
// and Argo's emissary executor wrap a container's command: it passes the program's output through
// unchanged while it recognises the progress the output shows (package recognize), forwards every signal
// it receives to the program, reaps orphaned processes, exits with the program's exit code, and serves
// what it recognised in the Prometheus text format. The command is cmd/supervisor.
package supervisor

import (
	"fmt"
	"os"
	"runtime"
	"time"
)

// drainTimeout is how long the supervisor waits, once the program has exited, for the rest of its output
// to move again: an orphaned grandchild may hold the pipes open for ever.
const drainTimeout = time.Second

// Config is what the supervisor runs and where it serves.
type Config struct {
	// Command is the program and its arguments; Command[0] is looked up in PATH as a shell does.
	Command []string
	// Listen is the address of the metrics server (":8084"); empty serves nothing.
	Listen string
	// Pattern is the job's own progress pattern (TRAININGJOB_PROGRESS_PATTERN); empty for none.
	Pattern string
	// Control lets the operator hold a failed program and restart the pod in place; zero for none.
	Control Control
}

// Run runs cfg.Command under supervision until it exits and returns the code to exit with: the program's
// own, 128+n when signal n killed it, 127 when it was not found and 126 when it could not be run.
func Run(cfg Config) int {
	if len(cfg.Command) == 0 {
		fmt.Fprintln(os.Stderr, "supervisor: no command to run")
		return 2
	}
	runtime.LockOSThread() // for the program's Pdeathsig (see start): this thread outlives it
	setSubreaper()
	sigs, chld := notifySignals()
	var p *pipes
	if !isTerminal(1) {
		p = newPipes() // nil when it fails: the program then writes to our files itself
	}
	m := newMonitor(cfg.Pattern, p != nil)
	ctl := newControl(cfg.Control, m.tail)
	serve(cfg.Listen, m, ctl)
	if code, waited := ctl.barrier(sigs); waited {
		p.close()
		return code
	}
	pid, err := start(cfg.Command, p)
	if err != nil {
		p.close()
		return cannotRun(cfg.Command[0], err)
	}
	ctl.running(pid)
	done := p.copy(m)
	status := wait(pid, sigs, chld, ctl.signalled)
	ended := time.Now() // before the output drains: which rank failed first is told by this
	ctl.reaped()
	drain(done, chld, m, drainTimeout)
	return ctl.exited(status, ended, sigs)
}
