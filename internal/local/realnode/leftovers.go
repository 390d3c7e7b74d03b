package realnode

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Leftovers lists what real nodes left on the machine after they and the cluster DNS and kube-proxy were
// stopped: processes (containerd, its shims, runc, kubelet, kube-proxy, coredns), bridges, the DNS address, KUBE-*
// iptables chains, the nodes' cgroups. Empty when Stop removed everything.
func Leftovers() []string {
	var left []string
	// pgrep matches the command name, cut to 15 bytes (containerd-shim), whole; runc init is runc:[2:INIT].
	for _, name := range []string{"containerd", "containerd-shim", "runc", "kubelet", "kube-proxy", "coredns"} {
		pattern := name
		if name == "runc" {
			pattern = "runc(:.*)?"
		}
		out, _ := exec.Command("pgrep", "-x", pattern).Output()
		var pids []string
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && running(pid) { // a zombie holds nothing; init reaps it
				pids = append(pids, f)
			}
		}
		if len(pids) > 0 {
			left = append(left, "process "+name+": "+strings.Join(pids, ","))
		}
	}
	ifaces, _ := net.Interfaces()
	for _, i := range ifaces {
		if strings.HasPrefix(i.Name, "tjbr") {
			left = append(left, "bridge "+i.Name)
		}
		if addrs, _ := i.Addrs(); i.Name == "lo" {
			for _, a := range addrs {
				if strings.HasPrefix(a.String(), ClusterDNS+"/") {
					left = append(left, "address "+a.String()+" on lo")
				}
			}
		}
	}
	for _, table := range []string{"mangle", "nat", "filter"} {
		out, _ := exec.Command("iptables", "-t", table, "-S").Output()
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "-N KUBE-") {
				left = append(left, "iptables "+table+" chain "+strings.TrimPrefix(line, "-N "))
			}
		}
	}
	cgroups, _ := filepath.Glob(filepath.Join(cgroupFS, "*", "trainingjob-*"))
	for _, c := range cgroups {
		if fi, err := os.Stat(c); err == nil && fi.IsDir() {
			left = append(left, "cgroup "+c)
		}
	}
	return left
}
