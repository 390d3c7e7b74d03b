package node

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// Pods on a process node share the host's network namespace. Each has its own loopback address (addr.go),
// but a program that listens on the wildcard address (PyTorch's TCPStore, TensorFlow's server, JAX's
// coordinator) would take the port on every address: a second job's rank 0 on the same machine would
// fail with EADDRINUSE, or two jobs would reach each other's ranks. bindshim (a small C library built once
// with the host's C compiler, cached by its content) is preloaded into every process of a pod and turns
// those binds on the ports a container declares into binds to the pod's address, as a network namespace
// of its own would.

//go:embed bindshim/bindshim.c
var bindShimSource []byte

var bindShim struct {
	once sync.Once
	path string
	err  error
}

// BindShim returns the path of the built shim (built on first use into the user's cache directory), or an
// error saying why there is none (no C compiler).
func BindShim() (string, error) {
	bindShim.once.Do(func() { bindShim.path, bindShim.err = buildBindShim() })
	return bindShim.path, bindShim.err
}

func buildBindShim() (string, error) {
	sum := sha256.Sum256(bindShimSource)
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "trainingjob-operator", "bindshim")
	lib := filepath.Join(dir, hex.EncodeToString(sum[:8])+".so")
	if _, err := os.Stat(lib); err == nil {
		return lib, nil
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		return "", fmt.Errorf("no C compiler (cc) to build the bind shim: pods' wildcard listeners are not isolated")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	src := filepath.Join(dir, "bindshim.c")
	if err := os.WriteFile(src, bindShimSource, 0o644); err != nil {
		return "", err
	}
	tmp := lib + fmt.Sprintf(".%d.tmp", os.Getpid())
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", tmp, src, "-ldl").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the bind shim: %w: %s", err, out)
	}
	return lib, os.Rename(tmp, lib)
}

// isolationEnv preloads the shim into a container's processes: its declared ports bound to the pod's
// address; nothing without a shim or declared ports.
func isolationEnv(podIP string, ports []corev1.ContainerPort, env map[string]string) {
	lib, err := BindShim()
	if err != nil || podIP == "" || len(ports) == 0 {
		return
	}
	list := make([]string, len(ports))
	for i, p := range ports {
		list[i] = strconv.Itoa(int(p.ContainerPort))
	}
	env["TRAININGJOB_LOCAL_POD_IP"], env["TRAININGJOB_LOCAL_PORTS"] = podIP, strings.Join(list, ",")
	if prev := env["LD_PRELOAD"]; prev != "" && !strings.Contains(prev, lib) {
		lib += ":" + prev
	}
	env["LD_PRELOAD"] = lib
}
