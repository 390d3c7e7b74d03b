package node

import (
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// TestBindShim: two "pods" listen on the wildcard address and the same declared port at once; each gets
// its own pod address, as in network namespaces of their own. A port they did not declare stays on the
// wildcard address.
func TestBindShim(t *testing.T) {
	if _, err := BindShim(); err != nil {
		t.Fatal(err)
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 (a dynamically linked program that binds the wildcard address) is needed:", err)
	}
	const listen = `import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0); s.bind(("0.0.0.0", 29477)); s.listen()
u = socket.socket(); u.bind(("0.0.0.0", 0))
print(s.getsockname()[0], u.getsockname()[0]); sys.stdout.flush(); time.sleep(1)`
	addrs := []string{"127.9.0.1 0.0.0.0", "127.9.0.2 0.0.0.0"}
	got := make([]string, len(addrs))
	var wg sync.WaitGroup
	for i, ip := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env := map[string]string{}
			isolationEnv(strings.Fields(ip)[0], []corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 29477}}, env)
			cmd := exec.Command(python, "-c", listen)
			cmd.Env = Environ(env)
			out, err := cmd.CombinedOutput()
			got[i] = strings.TrimSpace(string(out))
			if err != nil {
				got[i] = fmt.Sprintf("%v: %s", err, out)
			}
		}()
	}
	wg.Wait()
	if diff := cmp.Diff(addrs, got); diff != "" {
		t.Errorf("addresses the two wildcard listeners got (-want +got):\n%s", diff)
	}
}
