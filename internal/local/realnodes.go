package local

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/trainingjob-operator/trainingjob-operator/internal/local/cluster"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/images"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/realnode"
)

// realNodeControllers are what real nodes need of kube-controller-manager besides LocalControllers:
// EndpointSlices, from which the cluster DNS answers for a headless Service's pods and kube-proxy routes a
// Service's address, Deployments (the operator's own, installed in-cluster) and DaemonSets (the chart's
// node cache pruner).
var realNodeControllers = []string{"endpointslice", "deployment", "replicaset", "daemonset"}

// controllers returns the kube-controller-manager controllers of this stack.
func (s *Stack) controllers() []string {
	if s.opts.RealNodes > 0 {
		return append(append([]string{}, cluster.LocalControllers...), realNodeControllers...)
	}
	return cluster.LocalControllers
}

// agentCommand returns the checkpoint agent's command: the manager found on a process node's PATH, or the
// image's /manager on a real node (the operator's default).
func agentCommand(o Options) []string {
	if o.RealNodes > 0 {
		return nil
	}
	return []string{"manager"}
}

// supervisorCommand returns the supervisor's command: the one found on a process node's PATH (bin/), or the
// image's /supervisor on a real node (the operator's default).
func supervisorCommand(o Options) []string {
	if o.RealNodes > 0 {
		return nil
	}
	return []string{"supervisor"}
}

// RealNodeName returns the name of the real node i.
func RealNodeName(i int) string { return fmt.Sprintf("real-node-%d", i) }

// startRealNodes starts the cluster DNS and Options.RealNodes real nodes, and waits until they are Ready.
func (s *Stack) startRealNodes(ctx context.Context) error {
	o := s.opts
	if o.RealNodes == 0 {
		return nil
	}
	ip, err := realnode.HostIP()
	if err != nil {
		return err
	}
	if s.dns, err = realnode.StartDNS(ctx, o.NodeAssets, o.Dir, s.Cluster.Kubeconfig); err != nil {
		return fmt.Errorf("starting the cluster DNS: %w", err)
	}
	// The nodes start side by side: most of a start is importing the images (a gigabyte of the runner's
	// root filesystem to unpack per node).
	s.RealNodes = map[string]*realnode.Node{}
	var mu sync.Mutex
	var g errgroup.Group
	for i := 0; i < o.RealNodes; i++ {
		name := RealNodeName(i)
		g.Go(func() error {
			n, err := realnode.Start(ctx, realnode.Options{Assets: o.NodeAssets, Dir: filepath.Join(o.Dir, name), Index: i, Name: name,
				Kubeconfig: s.Cluster.Kubeconfig, NodeIP: ip, Images: o.Images, PauseImage: images.Pause})
			if n != nil {
				mu.Lock()
				s.RealNodes[name] = n // stopped with the stack, started or not
				mu.Unlock()
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if s.proxy, err = realnode.StartProxy(ctx, o.NodeAssets, o.Dir, s.Cluster.Kubeconfig, RealNodeName(0)); err != nil {
		return fmt.Errorf("starting kube-proxy: %w", err)
	}
	return s.WaitForRealNodes(ctx)
}

// WaitForRealNodes waits until every real node is registered and Ready (kubelet logs in
// Dir/real-node-*/kubelet.log say why one is not).
func (s *Stack) WaitForRealNodes(ctx context.Context) error {
	return s.waitForReady(ctx, realnode.RealNodeLabel, "real", s.opts.RealNodes, 2*time.Minute)
}

// stopRealNodes stops the real nodes and their containers, kube-proxy, then the cluster DNS.
func (s *Stack) stopRealNodes() error {
	var errs []error
	for name, n := range s.RealNodes {
		errs = append(errs, n.Stop())
		delete(s.RealNodes, name)
	}
	// kube-proxy stops before the chains go: running, it puts back the jumps to its chains between their
	// removal and the chains' own (CHAIN_DEL "Device or resource busy").
	if s.proxy != nil {
		errs = append(errs, s.proxy.Stop())
		s.proxy = nil
	}
	if s.opts.RealNodes > 0 {
		errs = append(errs, realnode.RemoveKubeletChains())
	}
	if s.dns != nil {
		errs = append(errs, s.dns.Stop())
		s.dns = nil
	}
	return errors.Join(errs...)
}
