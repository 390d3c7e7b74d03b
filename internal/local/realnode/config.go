package realnode

import (
	"fmt"
	"path/filepath"
)

// containerdConfig returns containerd 1.6's configuration for a node: its own root, state and socket, the
// local pause image, and the CNI configuration of the node's bridge. restrict_oom_score_adj: these
// machines refuse any write that lowers a process's OOM score, which runc otherwise does for every
// sandbox ("can't get final child's PID from pipe: EOF").
func containerdConfig(o Options) string {
	d := filepath.Join(o.Dir, "containerd")
	return fmt.Sprintf(`version = 2
root = %q
state = %q
oom_score = 0

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
`, filepath.Join(d, "root"), filepath.Join(d, "state"), o.socket(), o.socket()+".ttrpc", o.PauseImage, filepath.Join(o.Dir, "cni"))
}

// cniNetwork names the node's CNI network (and so its iptables rules).
func (o Options) cniNetwork() string { return fmt.Sprintf("tj-node-%d", o.Index) }

// cniConfig returns a bridge network of the node's subnet: pods get addresses on it and the host is their
// gateway, which routes between the nodes' bridges. Nothing is masqueraded: a pod sees the other pods'
// own addresses, as on a cluster's pod network (and there is no outside network to reach).
func cniConfig(o Options) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": %q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, o.cniNetwork(), o.bridge(), filepath.Join(o.Dir, "cni-ipam"), o.Subnet())
}

// kubeletConfig returns the kubelet's configuration, as the field notes of these machines found it works:
// cgroup v1 allowed, cgroupfs, swap tolerated, its own cgroup root and ports so that several kubelets
// share the machine, anonymous access for the API server's log and exec requests, and eviction
// thresholds low enough that a shared disk does not evict the pods.
func kubeletConfig(o Options) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%s
cgroupsPerQOS: true
failSwapOn: false
containerRuntimeEndpoint: unix://%s
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
address: %s
port: %d
healthzPort: %d
readOnlyPort: 0
clusterDNS: [%s]
clusterDomain: cluster.local
podCIDR: %s
resolvConf: /etc/resolv.conf
podLogsDir: %s
serializeImagePulls: false
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
nodeStatusUpdateFrequency: 2s
syncFrequency: 10s
fileCheckFrequency: 10s
`, o.cgroupRoot(), o.socket(), o.NodeIP, 10250+o.Index, 10350+o.Index, ClusterDNS, o.Subnet(), o.podLogsDir())
}

// Corefile serves cluster.local from the API server (pods' own names, headless Services' records) and
// forwards every other name to the machine's resolvers.
func Corefile(kubeconfig string) string {
	return fmt.Sprintf(`.:53 {
    bind %s
    errors
    health 127.0.0.1:18080
    ready 127.0.0.1:18181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %s
        pods verified
        fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
    cache 5
    loop
}
`, ClusterDNS, kubeconfig)
}
