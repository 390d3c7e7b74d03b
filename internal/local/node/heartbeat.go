package node

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Labels of a process node.
const (
	// ProcessNodeLabel marks Nodes run by a process node.
	ProcessNodeLabel = "ml.example.com/process-node"
	leaseNamespace   = "kube-node-lease"
	leaseSeconds     = 40
)

// register creates the Node (or takes over one left by an earlier run) and reports it Ready.
func (n *Node) register(ctx context.Context) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.opts.Name, Labels: map[string]string{
		corev1.LabelHostname: n.opts.Name, corev1.LabelOSStable: runtime.GOOS, corev1.LabelArchStable: runtime.GOARCH,
		ProcessNodeLabel: "true",
	}}, Spec: corev1.NodeSpec{Unschedulable: n.opts.Unschedulable}}
	if err := n.client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("registering node %s: %w", n.opts.Name, err)
	}
	return n.renew(ctx)
}

// heartbeat keeps the Node Ready and its lease fresh until ctx is done, as the kubelet does, so the node
// lifecycle controller neither taints it nor evicts its pods.
func (n *Node) heartbeat(ctx context.Context) error {
	t := time.NewTicker(n.opts.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := n.renew(ctx); err != nil && ctx.Err() == nil {
				n.opts.Log.Error(err, "node heartbeat failed", "node", n.opts.Name)
			}
		}
	}
}

func (n *Node) renew(ctx context.Context) error {
	if err := n.updateNode(ctx); err != nil {
		return err
	}
	return n.renewLease(ctx)
}

// updateNode writes the Node's status (capacity, Ready with a fresh heartbeat) and removes the taints
// that a node that is not ready gets.
func (n *Node) updateNode(ctx context.Context) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := n.reader.Get(ctx, client.ObjectKey{Name: n.opts.Name}, node); err != nil {
			return err
		}
		if kept := withoutNotReadyTaints(node.Spec.Taints); len(kept) != len(node.Spec.Taints) {
			node.Spec.Taints = kept
			if err := n.client.Update(ctx, node); err != nil {
				return err
			}
		}
		node.Status = n.nodeStatus(node.Status)
		return n.client.Status().Update(ctx, node)
	})
}

func withoutNotReadyTaints(taints []corev1.Taint) []corev1.Taint {
	var kept []corev1.Taint
	for _, t := range taints {
		if t.Key != corev1.TaintNodeNotReady && t.Key != corev1.TaintNodeUnreachable {
			kept = append(kept, t)
		}
	}
	return kept
}

func (n *Node) nodeStatus(old corev1.NodeStatus) corev1.NodeStatus {
	now := metav1.Now()
	alloc := n.allocatable()
	s := corev1.NodeStatus{
		Capacity: alloc, Allocatable: alloc, Phase: corev1.NodeRunning, DeclaredFeatures: DeclaredFeatures,
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: hostIP}, {Type: corev1.NodeHostName, Address: n.opts.Name},
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: n.kubeletPort}},
		NodeInfo: corev1.NodeSystemInfo{
			OperatingSystem: runtime.GOOS, Architecture: runtime.GOARCH, KubeletVersion: "process-node",
			ContainerRuntimeVersion: "process://", KernelVersion: kernelVersion(),
		},
	}
	conds := []struct {
		t      corev1.NodeConditionType
		status corev1.ConditionStatus
		reason string
	}{
		{corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"},
		{corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"},
		{corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"},
		{corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"},
	}
	for _, c := range conds {
		transition := now
		for _, o := range old.Conditions {
			if o.Type == c.t && o.Status == c.status {
				transition = o.LastTransitionTime
			}
		}
		s.Conditions = append(s.Conditions, corev1.NodeCondition{
			Type: c.t, Status: c.status, Reason: c.reason, Message: "process node " + strings.ToLower(c.reason),
			LastHeartbeatTime: now, LastTransitionTime: transition,
		})
	}
	return s
}

// allocatable returns the host's CPUs and memory, 110 pods, and the node's GPUs.
func (n *Node) allocatable() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(hostMemory(), resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
		n.gpus.resource:       *resource.NewQuantity(int64(n.gpus.count()), resource.DecimalSI),
	}
}

func (n *Node) renewLease(ctx context.Context) error {
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: leaseNamespace, Name: n.opts.Name}
	err := n.reader.Get(ctx, key, lease)
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(n.opts.Name), LeaseDurationSeconds: ptr.To[int32](leaseSeconds), RenewTime: &now,
			},
		}
		return client.IgnoreAlreadyExists(n.client.Create(ctx, lease))
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	return n.client.Update(ctx, lease)
}

// hostMemory returns MemTotal from /proc/meminfo, in bytes.
func hostMemory() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

func kernelVersion() string {
	data, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(data))
}

// DeclaredFeatures are the features the node declares, as a kubelet 1.36 does those of its gates (the
// scheduler places a pod that needs one only on a node that declares it): the process node restarts all of
// a pod's containers on a container's exit code (RestartAllContainers, podrun.go).
var DeclaredFeatures = []string{"RestartAllContainersOnContainerExits"}
