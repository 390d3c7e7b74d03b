// Package realnode runs real Kubernetes nodes on this machine beside the local control plane: per node a
// containerd (Debian's, with runc) with its own state, socket and CNI bridge, and a kubelet built from the
// pinned Kubernetes module; once per stack a cluster DNS server (CoreDNS serving cluster.local from the
// API server) on an address of its own. hack/node.sh installs and builds the parts. Pods run in real
// containers from images imported from local tarballs (package images): there is no registry.
//
// Everything it starts, mounts and adds to the network (processes, the bridge, the DNS address,
// iptables rules of the CNI plugins) is removed by Stop.
package realnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/trainingjob-operator/trainingjob-operator/internal/local/cluster"
)

// ClusterDNS is the address pods resolve names at (kubelet's clusterDNS): CoreDNS listens on it, an
// address of the host's loopback interface that every pod reaches through its bridge's gateway (the
// kernel delivers a packet for any local address whatever interface it came in on; these VMs' kernels
// have no dummy interfaces).
const ClusterDNS = "10.96.0.10"

// Options configure one real node.
type Options struct {
	// Assets holds kubelet (hack/node.sh builds it with the control plane).
	Assets string
	// Dir is the node's state: containerd's root and state, the kubelet's root, logs, configuration.
	Dir string
	// Index numbers the node on this machine: its pod subnet is 10.244.<Index>.0/24, its bridge
	// tjbr<Index>, its kubelet's port 10250+Index.
	Index int
	// Name is the Node's name.
	Name string
	// Kubeconfig is the kubelet's credentials.
	Kubeconfig string
	// NodeIP is the node's InternalIP: an address of this machine the API server reaches.
	NodeIP string
	// Images are image tarballs imported into the node's containerd before the kubelet starts.
	Images []string
	// PauseImage is the pod sandbox image (one of Images).
	PauseImage string
}

// Node is a running real node.
type Node struct {
	opts       Options
	containerd *cluster.Process
	kubelet    *cluster.Process
}

// Subnet returns the node's pod subnet.
func (o Options) Subnet() string { return fmt.Sprintf("10.244.%d.0/24", o.Index) }

func (o Options) bridge() string { return fmt.Sprintf("tjbr%d", o.Index) }

func (o Options) socket() string { return filepath.Join(o.Dir, "containerd", "containerd.sock") }

// Start starts the node's containerd, imports the images and starts its kubelet. It returns once the
// kubelet runs; the Node turns Ready when the kubelet has registered it and its network is up.
func Start(ctx context.Context, o Options) (*Node, error) {
	// A node starts empty: an earlier run's containers, images and logs are gone with its cluster.
	if err := errors.Join(unmountUnder(o.Dir), os.RemoveAll(o.Dir)); err != nil {
		return nil, fmt.Errorf("clearing %s: %w", o.Dir, err)
	}
	for _, d := range []string{"containerd", "cni", "kubelet", "cni-ipam"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	n := &Node{opts: o}
	if err := createCgroupRoot(o.cgroupRoot()); err != nil {
		return nil, err
	}
	if err := n.startContainerd(ctx); err != nil {
		return nil, errors.Join(err, n.Stop())
	}
	if err := n.importImages(ctx); err != nil {
		return nil, errors.Join(err, n.Stop())
	}
	if err := n.startKubelet(ctx); err != nil {
		return nil, errors.Join(err, n.Stop())
	}
	return n, nil
}

func (n *Node) startContainerd(ctx context.Context) error {
	o := n.opts
	cfg := filepath.Join(o.Dir, "containerd.toml")
	if err := os.WriteFile(cfg, []byte(containerdConfig(o)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "cni", "10-bridge.conflist"), []byte(cniConfig(o)), 0o644); err != nil {
		return err
	}
	p, err := cluster.StartProcess("containerd", []string{"--config", cfg}, filepath.Join(o.Dir, "containerd.log"))
	if err != nil {
		return fmt.Errorf("starting containerd of %s: %w", o.Name, err)
	}
	n.containerd = p
	return waitFor(ctx, 30*time.Second, "containerd of "+o.Name, func() error {
		return n.ctr(ctx, "version").Run()
	})
}

func (n *Node) importImages(ctx context.Context) error {
	for _, img := range n.opts.Images {
		cmd := n.ctr(ctx, "images", "import", "--no-unpack=false", img)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("importing %s into %s: %w\n%s", img, n.opts.Name, err, out)
		}
	}
	return nil
}

// deviceSocket is where every kubelet serves device plugins' registrations: a path the kubelet fixes
// (v1beta1.KubeletSocket), not under its --root-dir, so the nodes of this machine share it. A variable
// for tests only.
var deviceSocket = "/var/lib/kubelet/device-plugins/kubelet.sock"

// kubeletStarts orders the kubelets' starts: each removes the sockets in deviceSocket's folder and then
// listens on deviceSocket, so two starting at once can find it taken ("bind: address already in use")
// and exit ("Failed to start ContainerManager").
var kubeletStarts sync.Mutex

// startKubelet starts the node's kubelet and returns once it serves deviceSocket: the next node's kubelet
// may start then.
func (n *Node) startKubelet(ctx context.Context) error {
	kubeletStarts.Lock()
	defer kubeletStarts.Unlock()
	if err := os.Remove(deviceSocket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s before the kubelet of %s starts: %w", deviceSocket, n.opts.Name, err)
	}
	if err := n.runKubelet(); err != nil {
		return err
	}
	var exited error
	err := waitFor(ctx, time.Minute, "the device plugin socket of the kubelet of "+n.opts.Name, func() error {
		if exited = n.KubeletExited(); exited != nil {
			return nil
		}
		_, err := os.Stat(deviceSocket)
		return err
	})
	return errors.Join(exited, err)
}

// KubeletExited returns why the node's kubelet exited, with the end of its log; nil while it runs (or was
// stopped on purpose).
func (n *Node) KubeletExited() error {
	if n.kubelet == nil {
		return nil
	}
	exited, err := n.kubelet.Exited()
	if !exited {
		return nil
	}
	if err == nil {
		err = errors.New("exit status 0")
	}
	return fmt.Errorf("the kubelet of %s exited (%w); the end of %s:\n%s", n.opts.Name, err, n.kubelet.Log, lastLines(n.kubelet.Log, 3))
}

// lastLines returns the last n lines of the file at path, or why it cannot be read.
func lastLines(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (n *Node) runKubelet() error {
	o := n.opts
	cfg := filepath.Join(o.Dir, "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte(kubeletConfig(o)), 0o644); err != nil {
		return err
	}
	args := []string{"--config=" + cfg, "--kubeconfig=" + o.Kubeconfig, "--hostname-override=" + o.Name,
		"--node-ip=" + o.NodeIP, "--root-dir=" + filepath.Join(o.Dir, "kubelet"), "--cert-dir=" + filepath.Join(o.Dir, "kubelet", "pki"),
		"--node-labels=" + RealNodeLabel + "=true", "--v=1"}
	p, err := cluster.StartProcess(filepath.Join(o.Assets, "kubelet"), args, filepath.Join(o.Dir, "kubelet.log"))
	if err != nil {
		return fmt.Errorf("starting the kubelet of %s: %w", o.Name, err)
	}
	n.kubelet = p
	return nil
}

// RealNodeLabel marks the Nodes this package runs.
const RealNodeLabel = "ml.example.com/real-node"

// StopKubelet stops the node's kubelet alone (its containers keep running, as on a node that lost its
// kubelet), for tests of a lost node.
func (n *Node) StopKubelet() {
	if n.kubelet != nil {
		n.kubelet.Stop()
		n.kubelet = nil
	}
}

// Stop stops the kubelet, every container of the node and containerd, ends whatever of the node outlived
// them (endProcesses: its shims, containers and `runc init`s, as after a lost node), and removes the node's
// bridge, its CNI plugins' iptables rules, its mounts and its cgroups.
func (n *Node) Stop() error {
	n.StopKubelet()
	var errs []error
	var tasks error
	if n.containerd != nil {
		tasks = n.killContainers()
		n.containerd.Stop()
		n.containerd = nil
	}
	// containerd ends only the tasks it lists, and not their shims: a task created while the kubelet
	// stopped, one of a node whose containerd died, a shim whose task was deleted under it, stay.
	if err := n.endProcesses(); err != nil {
		errs = append(errs, tasks, err) // what containerd could not stop, nothing could
	}
	errs = append(errs, unmountUnder(n.opts.Dir))
	// The images and containers' files (gigabytes with the runner's) go; the logs beside them stay.
	errs = append(errs, os.RemoveAll(filepath.Join(n.opts.Dir, "containerd", "root")))
	_ = exec.Command("ip", "link", "delete", n.opts.bridge()).Run() // absent when no pod ever started
	errs = append(errs, removeCgroupRoot(n.opts.cgroupRoot()))
	return errors.Join(errs...)
}

// killContainers stops every task of the node's containerd, so no container outlives the stack.
func (n *Node) killContainers() error {
	ctr := func(args ...string) ([]byte, error) {
		return n.ctr(context.Background(), args...).Output()
	}
	out, err := ctr("tasks", "list", "-q")
	if err != nil {
		return nil // containerd is not answering: Stop's endProcesses ends its shims and containers
	}
	for _, id := range strings.Fields(string(out)) {
		_, _ = ctr("tasks", "kill", "-s", "SIGKILL", id)
	}
	// Deleting a task ends its shim, which containerd does not stop with itself.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := ctr("tasks", "list", "-q")
		left := strings.Fields(string(out))
		if len(left) == 0 {
			return nil
		}
		for _, id := range left {
			_, _ = ctr("tasks", "delete", "-f", id)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("containers of %s still running after SIGKILL", n.opts.Name)
}

// endProcesses ends every process left in the node's cgroups and every shim or runc of its containerd
// (package function endProcesses), once the kubelet and containerd are gone, and removes the state those
// shims kept in /run (removeTaskState).
func (n *Node) endProcesses() error {
	trees, err := cgroupTrees(n.opts.cgroupRoot())
	if err := errors.Join(err, endProcesses(trees, n.opts.Dir, reapTimeout)); err != nil {
		return err
	}
	return removeTaskState(filepath.Join(n.opts.Dir, "containerd", "state"), n.opts.socket(), runcRoot, shimSockets)
}

// ctr returns containerd's client on this node's containerd, in the namespace of Kubernetes' containers.
func (n *Node) ctr(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ctr", append([]string{"--address", n.opts.socket(), "-n", "k8s.io"}, args...)...)
}

// waitFor retries check until it passes or timeout.
func waitFor(ctx context.Context, timeout time.Duration, what string, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not up after %s: %w", what, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// HostIP returns the first IPv4 address of an interface of this machine that is up and not a loopback, a
// bridge or the DNS address of this package: the nodes' InternalIP.
func HostIP() (string, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, i := range ifaces {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 || strings.HasPrefix(i.Name, "tj") {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				return ipn.IP.String(), nil
			}
		}
	}
	return "", errors.New("no IPv4 address on an interface that is up: a real node needs one for its InternalIP")
}

// Pid returns the host PID of a container of this node (containerID as a pod's status gives it,
// containerd://ID), for tests that look at the process: its user, its signals.
func (n *Node) Pid(containerID string) (int, error) {
	out, err := n.ctr(context.Background(), "tasks", "ls").Output()
	if err != nil {
		return 0, fmt.Errorf("listing the tasks of %s: %w", n.opts.Name, err)
	}
	id := strings.TrimPrefix(containerID, "containerd://")
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == id {
			var pid int
			_, err := fmt.Sscan(f[1], &pid)
			return pid, err
		}
	}
	return 0, fmt.Errorf("no task %s on %s", id, n.opts.Name)
}

// KillContainer kills a container of this node with SIGKILL, as the OOM killer or a crash would.
func (n *Node) KillContainer(containerID string) error {
	id := strings.TrimPrefix(containerID, "containerd://")
	out, err := n.ctr(context.Background(), "tasks", "kill", "-s", "SIGKILL", id).CombinedOutput()
	if err != nil {
		return fmt.Errorf("killing container %s on %s: %w: %s", id, n.opts.Name, err, out)
	}
	return nil
}

// Lose makes the node fail as a machine does: its kubelet stops and every container on it dies at once;
// nothing reports them any more. RestartKubelet brings it back.
func (n *Node) Lose() error {
	n.StopKubelet()
	return n.killContainers()
}

// RestartKubelet starts the node's kubelet again after StopKubelet: the node comes back, and the
// kubelet stops the containers of pods that are no longer bound to it.
func (n *Node) RestartKubelet() error {
	if n.kubelet != nil {
		return nil
	}
	return n.startKubelet(context.Background())
}
