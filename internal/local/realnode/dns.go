package realnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/trainingjob-operator/trainingjob-operator/internal/local/cluster"
)

// DNS is the cluster's DNS server: CoreDNS on ClusterDNS.
type DNS struct {
	proc *cluster.Process
}

// StartDNS adds ClusterDNS on a dummy interface of the host and starts CoreDNS (from assets) on it,
// reading the API server with kubeconfig. It returns once CoreDNS answers.
func StartDNS(ctx context.Context, assets, dir, kubeconfig string) (*DNS, error) {
	_ = exec.Command("ip", "addr", "del", ClusterDNS+"/32", "dev", "lo").Run() // left by a run that was killed
	if out, err := exec.Command("ip", "addr", "add", ClusterDNS+"/32", "dev", "lo").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("adding %s to lo: %w: %s", ClusterDNS, err, out)
	}
	d := &DNS{}
	corefile := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(corefile, []byte(Corefile(kubeconfig)), 0o644); err != nil {
		return nil, errors.Join(err, d.Stop())
	}
	p, err := cluster.StartProcess(filepath.Join(assets, "coredns"), []string{"-conf", corefile}, filepath.Join(dir, "coredns.log"))
	if err != nil {
		return nil, errors.Join(err, d.Stop())
	}
	d.proc = p
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort(ClusterDNS, "53"))
	}}
	err = waitFor(ctx, 30*time.Second, "CoreDNS", func() error {
		_, err := r.LookupHost(ctx, "kubernetes.default.svc.cluster.local")
		return err
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%w; coredns.log ends: %s", err, logEnd(filepath.Join(dir, "coredns.log"))), d.Stop())
	}
	return d, nil
}

// logEnd returns the last line of a component's log (why it stopped: a port taken, a bad Corefile).
func logEnd(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return lines[len(lines)-1]
}

// Stop stops CoreDNS and removes its address.
func (d *DNS) Stop() error {
	if d.proc != nil {
		d.proc.Stop()
		d.proc = nil
	}
	if out, err := exec.Command("ip", "addr", "del", ClusterDNS+"/32", "dev", "lo").CombinedOutput(); err != nil &&
		!strings.Contains(string(out), "Cannot assign") {
		return fmt.Errorf("removing %s from lo: %w: %s", ClusterDNS, err, out)
	}
	return nil
}

// unmountUnder lazily unmounts every mount below dir (containerd's snapshots, the kubelet's volumes),
// deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // read only
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			points = append(points, fields[4])
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
