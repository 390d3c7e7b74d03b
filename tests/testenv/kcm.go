package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Process is a control-plane component started by a test.
type Process struct {
	cmd  *exec.Cmd
	done chan error
	Log  string
}

// StartControllerManager runs the real kube-controller-manager against the environment with the given
// controllers (for example job, garbagecollector), logging to a file in dir.
func (e *Env) StartControllerManager(dir string, controllers string) (*Process, error) {
	bin := filepath.Join(e.assets, "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("kube-controller-manager missing in KUBEBUILDER_ASSETS (run hack/testbin.sh): %w", err)
	}
	user, err := e.Env.AddUser(envtest.User{Name: "kube-controller-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding controller-manager user: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("controller-manager kubeconfig: %w", err)
	}
	kcPath := filepath.Join(dir, "kcm.kubeconfig")
	if err := os.WriteFile(kcPath, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	args := []string{
		"--kubeconfig=" + kcPath, "--controllers=" + controllers, "--leader-elect=false",
		"--secure-port=0", "--use-service-account-credentials=false", "--concurrent-gc-syncs=5",
	}
	return start(bin, args, filepath.Join(dir, "kube-controller-manager.log"))
}

func start(bin string, args []string, logPath string) (*Process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &Process{cmd: cmd, done: make(chan error, 1), Log: logPath}
	go func() { p.done <- cmd.Wait(); logFile.Close() }()
	return p, nil
}

// Stop terminates the process and waits for it.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-p.done:
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
