package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// process is one run of a container: a process group started from the container's command.
type process struct {
	cmd      *exec.Cmd
	log      *os.File
	started  time.Time
	finished time.Time
	exited   chan struct{}
	err      error
}

// start resolves the container's command, env and paths and starts its process. A *ConfigError means the
// container cannot be configured yet; any other error means it cannot run (the kubelet's StartError).
func (r *podRun) start(ctx context.Context, c *corev1.Container, dirs map[string]string) (*process, error) {
	ms, err := containerMounts(c, dirs)
	if err != nil {
		return nil, err
	}
	if ms, err = r.withTerminationLog(c, ms); err != nil {
		return nil, err
	}
	env, err := r.containerEnv(ctx, c, ms)
	if err != nil {
		return nil, err
	}
	argv, err := commandLine(c, env, ms)
	if err != nil {
		return nil, err
	}
	bin, err := lookPath(argv[0], append(r.n.opts.Path, filepath.SplitList(env["PATH"])...))
	if err != nil {
		return nil, err
	}
	logPath, err := r.logPath(c.Name)
	if err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	if fi, err := logFile.Stat(); err == nil {
		r.logStarted(c.Name, fi.Size())
	}
	cmd := exec.Command(bin, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env, cmd.Dir = Environ(env), r.workDir(c, ms)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := os.MkdirAll(cmd.Dir, 0o755); err != nil {
		_ = logFile.Close() // nothing was written
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close() // nothing was written
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	p := &process{cmd: cmd, log: logFile, started: time.Now(), exited: make(chan struct{})}
	go p.wait()
	return p, nil
}

// containerEnv returns the process environment: PATH and HOME from the node, HOSTNAME, then the container's
// resolved env, with mount paths translated to host paths and pod DNS names to pod addresses.
func (r *podRun) containerEnv(ctx context.Context, c *corev1.Container, ms mounts) (map[string]string, error) {
	r.mu.Lock()
	pod := r.pod.DeepCopy()
	pod.Status = *r.status.DeepCopy()
	r.mu.Unlock()
	resolved, err := Env(ctx, APISource{Reader: r.n.reader}, pod, c, r.n.allocatable())
	if err != nil {
		return nil, err
	}
	hostname := pod.Spec.Hostname
	if hostname == "" {
		hostname = pod.Name
	}
	env := map[string]string{
		"PATH":     strings.Join(append(append([]string{}, r.n.opts.Path...), os.Getenv("PATH")), string(os.PathListSeparator)),
		"HOME":     filepath.Join(r.dir, "home"),
		"HOSTNAME": hostname,
	}
	maps.Copy(env, r.n.opts.Env)
	for k, v := range resolved {
		env[k] = ResolveNames(ms.Translate(v))
	}
	for k, v := range r.n.gpus.env(string(pod.UID), c) {
		env[k] = v
	}
	isolationEnv(pod.Status.PodIP, c.Ports, env)
	return env, os.MkdirAll(env["HOME"], 0o755)
}

// commandLine returns command + args with $(VAR) expanded against env, as the kubelet does, and paths and
// names translated like env values. The node cannot read an image's entrypoint, so command is required.
func commandLine(c *corev1.Container, env map[string]string, ms mounts) ([]string, error) {
	if len(c.Command) == 0 {
		return nil, fmt.Errorf("container %q has no command: a process node cannot read the entrypoint of image %q; set command", c.Name, c.Image)
	}
	lookup := func(n string) (string, bool) { v, ok := env[n]; return v, ok }
	var argv []string
	for _, a := range append(append([]string{}, c.Command...), c.Args...) {
		argv = append(argv, ResolveNames(ms.Translate(Expand(a, lookup))))
	}
	return argv, nil
}

// lookPath finds a command: a path as it is, a bare name in dirs.
func lookPath(name string, dirs []string) (string, error) {
	if strings.Contains(name, "/") {
		if _, err := os.Stat(name); err != nil {
			return "", fmt.Errorf("exec: %q: %w", name, err)
		}
		return name, nil
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
}

func (r *podRun) workDir(c *corev1.Container, ms mounts) string {
	if c.WorkingDir != "" {
		return ms.Translate(c.WorkingDir)
	}
	return r.n.opts.WorkDir
}

// wait waits for the container's main process; when it has ended, what it left running in its group ends
// too, as a container runtime ends every process of a container whose first process exited (a background
// server the program started, for example the MPI launcher's sshd, was left behind on this node).
func (p *process) wait() {
	p.err = p.cmd.Wait()
	p.finished = time.Now()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.log.Close() // the process wrote it; nothing is left to flush
	close(p.exited)
}

// kill stops the process group: SIGTERM, then SIGKILL after grace.
func (p *process) kill(grace time.Duration) {
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.exited
	}
	_ = syscall.Kill(pgid, syscall.SIGKILL) // children left behind by the leader
}

// exitCode returns the container runtime's exit code: 128+signal for a signalled process.
func (p *process) exitCode() (int32, string) {
	var ee *exec.ExitError
	if p.err != nil && !errors.As(p.err, &ee) {
		return 128, "StartError"
	}
	st := p.cmd.ProcessState
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal()), "Error"
	}
	if code := st.ExitCode(); code != 0 {
		return int32(code), "Error"
	}
	return 0, "Completed"
}
