package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/trainingjob-operator/trainingjob-operator/internal/local/cluster"
)

// Proxy is kube-proxy for the machine's nodes: one is enough, as they share the host's network stack. It
// makes Services' ClusterIPs work, the `kubernetes` Service's for in-cluster clients first.
type Proxy struct {
	proc   *cluster.Process
	binary string
}

// kubeProxyConfig runs kube-proxy in iptables mode for the pod networks of this package, leaving the
// machine's conntrack settings alone.
func kubeProxyConfig(kubeconfig, node string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
mode: iptables
clusterCIDR: 10.244.0.0/16
hostnameOverride: %s
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
conntrack:
  maxPerCore: 0
`, kubeconfig, node)
}

// StartProxy starts kube-proxy (from assets) and waits until it has programmed the `kubernetes` Service.
func StartProxy(ctx context.Context, assets, dir, kubeconfig, node string) (*Proxy, error) {
	cfg := filepath.Join(dir, "kube-proxy.yaml")
	if err := os.WriteFile(cfg, []byte(kubeProxyConfig(kubeconfig, node)), 0o644); err != nil {
		return nil, err
	}
	p := &Proxy{binary: filepath.Join(assets, "kube-proxy")}
	proc, err := cluster.StartProcess(p.binary, []string{"--config=" + cfg}, filepath.Join(dir, "kube-proxy.log"))
	if err != nil {
		return nil, err
	}
	p.proc = proc
	err = waitFor(ctx, time.Minute, "kube-proxy", func() error {
		out, err := exec.Command("iptables", "-t", "nat", "-S", "KUBE-SERVICES").CombinedOutput()
		if err != nil {
			return fmt.Errorf("no KUBE-SERVICES chain yet: %w: %s", err, out)
		}
		if !strings.Contains(string(out), cluster.KubernetesServiceIP) {
			return fmt.Errorf("no rule for the kubernetes Service yet")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w (log: %s)", err, proc.Log)
	}
	return p, nil
}

// Stop stops kube-proxy and removes the iptables rules it made.
func (p *Proxy) Stop() error {
	if p.proc == nil {
		return nil
	}
	p.proc.Stop()
	p.proc = nil
	if out, err := exec.Command(p.binary, "--cleanup").CombinedOutput(); err != nil {
		return fmt.Errorf("kube-proxy --cleanup: %w: %s", err, out)
	}
	return nil
}

// RemoveKubeletChains removes what kubelets and kube-proxy leave in the host's iptables once the last of
// them has stopped (kube-proxy --cleanup keeps some): every KUBE-* chain of the mangle, nat and filter
// tables and the jumps to them. The machine is the local stack's: a real cluster's node on the same machine
// is not supported.
func RemoveKubeletChains() error {
	var errs []string
	for _, table := range []string{"mangle", "nat", "filter"} {
		out, err := exec.Command("iptables", "-t", table, "-S").Output()
		if err != nil {
			continue // no iptables: nothing to remove
		}
		var chains []string
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 2 && f[0] == "-N" && strings.HasPrefix(f[1], "KUBE-"):
				chains = append(chains, f[1])
			case len(f) > 2 && f[0] == "-A" && !strings.HasPrefix(f[1], "KUBE-") && strings.Contains(line, "-j KUBE-"):
				// Through a shell: a rule's comment is quoted as the shell reads it.
				del := "iptables -t " + table + " -D" + strings.TrimPrefix(line, "-A")
				if out, err := exec.Command("sh", "-c", del).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Sprintf("%s: %v: %s", line, err, out))
				}
			}
		}
		for _, flag := range []string{"-F", "-X"} {
			for _, c := range chains {
				if out, err := exec.Command("iptables", "-t", table, flag, c).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Sprintf("%s %s %s: %v: %s", table, flag, c, err, out))
				}
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("removing the KUBE-* iptables chains: %s", strings.Join(errs, "; "))
	}
	return nil
}
