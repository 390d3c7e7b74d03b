package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Process is a control-plane component running as a child process.
type Process struct {
	cmd  *exec.Cmd
	done chan error
	// Log is the file receiving the component's output.
	Log string
}

// StartProcess starts bin with args, its output going to logPath. The child is killed if this process dies.
func StartProcess(bin string, args []string, logPath string) (*Process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close() // the start failed: nothing was written
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &Process{cmd: cmd, done: make(chan error, 1), Log: logPath}
	go func() { p.done <- cmd.Wait(); _ = logFile.Close() }() // the process wrote it; nothing is left to flush
	return p, nil
}

// Exited reports whether the process has exited, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case err := <-p.done:
		p.done <- err
		return true, err
	default:
		return false, nil
	}
}

// Stop terminates the process (SIGINT, then SIGKILL after 10 s) and waits for it.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case err := <-p.done:
		p.done <- err
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		p.done <- <-p.done
	}
}

// Pid returns the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Kill kills the process with SIGKILL, as the OOM killer or a node failure would, and waits for it.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	err := <-p.done
	p.done <- err
}
