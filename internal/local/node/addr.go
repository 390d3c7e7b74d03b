package node

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Pods on a process node share the host's network. Each gets its own loopback address as its pod IP
// (Linux routes all of 127.0.0.0/8 to lo), so two pods can listen on the same port. The address of a pod
// with a host name under a Service subdomain is a hash of its DNS name "<hostname>.<subdomain>.<ns>.svc",
// so any process can compute where a peer will listen before that peer starts, and the node rewrites such
// names in env values and arguments to their addresses: that is how MASTER_ADDR and TF_CONFIG resolve.

// dnsName matches a pod's stable DNS name <hostname>.<subdomain>.<namespace>.svc[.cluster.local].
var dnsName = regexp.MustCompile(`\b([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.` + // hostname
	`([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.` + // subdomain
	`([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.svc(\.cluster\.local)?\b`) // namespace

// PodAddr returns the loopback address of a pod.
func PodAddr(pod *corev1.Pod) netip.Addr {
	if pod.Spec.Hostname != "" && pod.Spec.Subdomain != "" {
		return hashAddr(pod.Spec.Hostname + "." + pod.Spec.Subdomain + "." + pod.Namespace)
	}
	return hashAddr(pod.Namespace + "/" + pod.Name)
}

// hashAddr maps a key into 127.1.0.1–127.250.255.254, leaving 127.0.0.0/16 to the host.
func hashAddr(key string) netip.Addr {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	v := h.Sum32()
	return netip.AddrFrom4([4]byte{127, byte(1 + v%250), byte(v >> 8), byte(1 + (v>>16)%254)})
}

// ResolveNames rewrites every pod DNS name in s to the pod's loopback address.
func ResolveNames(s string) string {
	if !strings.Contains(s, ".svc") {
		return s
	}
	return dnsName.ReplaceAllStringFunc(s, func(name string) string {
		m := dnsName.FindStringSubmatch(name)
		return hashAddr(m[1] + "." + m[3] + "." + m[5]).String()
	})
}

// addrTable remembers which pod holds which address on a node, so that a hash collision between two
// live pods is reported instead of silently sharing an address.
type addrTable map[netip.Addr]string

func (t addrTable) claim(addr netip.Addr, podKey string) error {
	if holder, ok := t[addr]; ok && holder != podKey {
		return fmt.Errorf("pod address %s is already used by pod %s", addr, holder)
	}
	t[addr] = podKey
	return nil
}
