package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"syscall"
	"time"
	"unsafe"
)

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

// setSubreaper makes the supervisor the reaper of its orphaned descendants even when it is not PID 1 (a
// container sharing its pod's process namespace); as PID 1 it is anyway.
func setSubreaper() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// lookPath finds the program as exec does; a program found through a relative PATH entry is run, as a
// shell would.
func lookPath(name string) (string, error) {
	path, err := exec.LookPath(name)
	if errors.Is(err, exec.ErrDot) {
		return path, nil
	}
	var e *exec.Error
	if errors.As(err, &e) {
		return "", e.Err // "executable file not found in $PATH": the caller names the program
	}
	return path, err
}

// start starts the program with our environment and stdin, its stdout and stderr on p's pipes (on our own
// files when p is nil, in the terminal's foreground when they are a terminal), and returns its pid.
func start(argv []string, p *pipes) (int, error) {
	path, err := lookPath(argv[0])
	if err != nil {
		return 0, err
	}
	// The program dies with the supervisor (SIGKILLed, as a container's first process is by the OOM killer
	// or a test): in a container the kernel kills the rest when its first process dies; elsewhere (a
	// process node) nothing would. Pdeathsig follows the thread that forks: Run keeps it locked.
	attr := &syscall.ProcAttr{Env: os.Environ(), Files: p.files(), Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}}
	if p == nil && inForeground(1) {
		// Like tini: a terminal's ^C then reaches the program once, from the terminal, not twice.
		attr.Sys = &syscall.SysProcAttr{Foreground: true, Ctty: 1, Pdeathsig: syscall.SIGKILL}
	}
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil && attr.Sys.Foreground {
		attr.Sys = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		pid, err = syscall.ForkExec(path, argv, attr)
	}
	return pid, err
}

// cannotRun reports why the program could not be started and returns a shell's exit code for it: 127
// when it does not exist, 126 otherwise (not executable, a directory, not a program).
func cannotRun(name string, err error) int {
	fmt.Fprintf(os.Stderr, "supervisor: cannot run %s: %v\n", name, err)
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return 127
	}
	return 126
}

// wait forwards the signals that arrive to the program (telling seen of each) and reaps every child that
// exits until the program itself has, and returns its status.
func wait(pid int, sigs, chld <-chan os.Signal, seen func(os.Signal)) syscall.WaitStatus {
	for {
		if status, exited := reap(pid); exited {
			return status
		}
		select {
		case s := <-sigs:
			seen(s)
			forward(pid, s)
		case <-chld:
		}
	}
}

// drain waits until the output is copied (done closed), reaping the orphans that exit meanwhile. It gives
// up once the output has not moved for idle (an orphaned grandchild may hold the pipes open for ever),
// but not while it moves (a slow log reader still takes the program's last lines, its traceback), at
// most drainCap in all.
func drain(done <-chan struct{}, chld <-chan os.Signal, m *Monitor, idle time.Duration) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	start, last, moved := time.Now(), time.Now(), m.moved()
	for {
		reap(0)
		select {
		case <-done:
			return
		case <-chld:
		case now := <-tick.C:
			if n := m.moved(); n != moved || m.writing.Load() > 0 {
				moved, last = n, now
			}
			if now.Sub(last) >= idle || now.Sub(start) >= drainCap {
				return
			}
		}
	}
}

// drainCap bounds the wait for the output at the program's end, however slowly it moves.
const drainCap = 30 * time.Second

// reap collects every child that has exited, and says whether pid was one of them and its status.
func reap(pid int) (syscall.WaitStatus, bool) {
	var found syscall.WaitStatus
	exited := false
	for {
		var status syscall.WaitStatus
		got, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || got <= 0 {
			return found, exited
		}
		if got == pid {
			found, exited = status, true
		}
	}
}

// exitCode returns a shell's exit code for a status: the program's code, or 128+n when signal n killed it.
func exitCode(status syscall.WaitStatus) int {
	switch {
	case status.Exited():
		return status.ExitStatus()
	case status.Signaled():
		return 128 + int(status.Signal())
	}
	return 1
}

// isTerminal says whether fd is a terminal.
func isTerminal(fd uintptr) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}

// inForeground says whether fd is a terminal whose foreground process group is ours: the program can
// then be given the foreground.
func inForeground(fd uintptr) bool {
	var pgrp int32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp)))
	return errno == 0 && int(pgrp) == syscall.Getpgrp()
}
