package supervisor

import (
	"os"
	"os/signal"
	"syscall"
)

// maxSignal is the highest signal number on Linux (SIGRTMAX).
const maxSignal = 64

// notForwarded are the signals the supervisor keeps: those no process can catch, SIGCHLD (its own
// children's), SIGURG (the Go runtime's preemption), SIGPIPE (raised by its own writes to a closed stdout)
// and 32 to 34, which C libraries reserve for their threads (glibc's and musl's).
var notForwarded = map[syscall.Signal]bool{
	syscall.SIGKILL: true, syscall.SIGSTOP: true, syscall.SIGCHLD: true, syscall.SIGURG: true,
	syscall.SIGPIPE: true, 32: true, 33: true, 34: true,
}

// notifySignals starts catching every signal: sigs receives those to forward to the program, chld a
// SIGCHLD when a child has exited (one pending is enough: each reaps them all). SIGPIPE is caught and
// dropped, so a write to a closed stdout returns EPIPE instead of killing the supervisor.
func notifySignals() (sigs, chld chan os.Signal) {
	sigs, chld = make(chan os.Signal, 64), make(chan os.Signal, 1)
	for n := syscall.Signal(1); n <= maxSignal; n++ {
		if !notForwarded[n] {
			signal.Notify(sigs, n)
		}
	}
	signal.Notify(chld, syscall.SIGCHLD)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	return sigs, chld
}

// forward sends the signal to the program, as tini does by default (not to its process group).
func forward(pid int, s os.Signal) {
	if n, ok := s.(syscall.Signal); ok {
		_ = syscall.Kill(pid, n)
	}
}
