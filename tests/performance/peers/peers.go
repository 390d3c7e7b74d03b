package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/trainingjob-operator/trainingjob-operator/internal/local"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/cluster"
	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
)

// Kubeflow Trainer v2 on JobSet: a TrainJob on a ClusterTrainingRuntime of torch that builds pods like ours
// (one container, the same image and command). No webhook of either is registered: what JobSet's
// mutating webhook would default is written into the runtime's JobSet template (network, successPolicy,
// startupPolicy, completionMode), and the runtime restarts the gang on a rank's failure as ours does
// (failurePolicy.maxRestarts 3, restartPolicy Never, backoffLimit 0; Trainer's own torch runtime restarts a
// container in place and never the gang).
const trainerRuntime = `apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: bench-torch
  labels:
    trainer.kubeflow.org/framework: torch
spec:
  mlPolicy:
    numNodes: 1
    torch: {}
  template:
    spec:
      network: {enableDNSHostnames: true, publishNotReadyAddresses: true}
      successPolicy: {operator: All}
      startupPolicy: {startupPolicyOrder: AnyOrder}
      failurePolicy: {maxRestarts: 3}
      replicatedJobs:
      - name: node
        replicas: 1
        template:
          metadata:
            labels:
              trainer.kubeflow.org/trainjob-ancestor-step: trainer
          spec:
            completionMode: Indexed
            backoffLimit: 0
            template:
              spec:
                restartPolicy: Never
                containers:
                - name: node
                  image: bench:1
`

func trainer() *operator {
	return &operator{name: "Kubeflow Trainer + JobSet", version: "trainer v2.3.0, jobset v0.12.0",
		published: rate{name: "published (trainer 50/100, jobset 500/500)"},
		users:     []string{"bench-trainer", "bench-jobset"},
		gvr:       schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainjobs"},
		jobLabel:  "jobset.sigs.k8s.io/jobset-name",
		install: func(ctx context.Context, r *run) error {
			if err := installCRDs(ctx, r, "jobset", "trainer"); err != nil {
				return err
			}
			return createYAML(ctx, r, trainerRuntime)
		},
		start: startTrainer,
		object: func(name string, workers int) *unstructured.Unstructured {
			return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
				"metadata": map[string]any{"name": name, "namespace": ns},
				"spec": map[string]any{
					"runtimeRef": map[string]any{"name": "bench-torch", "kind": "ClusterTrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
					"trainer":    map[string]any{"numNodes": int64(workers), "image": "bench:1", "command": []any{"train"}}}}}
		},
		finished: func(u *unstructured.Unstructured) bool { return hasCondition(u, "Complete") },
	}
}

// startTrainer starts JobSet's and Trainer's managers, each with a configuration file: leader election and
// certificate management off, ports of their own, a self-signed serving certificate, the client rate.
func startTrainer(r *run, rt rate) ([]*cluster.Process, error) {
	certDir := filepath.Join(r.dir, "certs")
	if err := local.WriteSelfSigned(certDir); err != nil {
		return nil, err
	}
	// Trainer has no setting for its certificates' directory: it reads controller-runtime's default.
	trainerCerts := filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
	if err := local.WriteSelfSigned(trainerCerts); err != nil {
		return nil, err
	}
	jobset := map[string]any{"apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
		"leaderElection": map[string]any{"leaderElect": false}, "internalCertManagement": map[string]any{"enable": false},
		"webhook": map[string]any{"host": "127.0.0.1", "port": port(), "certDir": certDir},
		"metrics": map[string]any{"bindAddress": benchkit.FreeAddr(), "certDir": certDir},
		"health":  map[string]any{"healthProbeBindAddress": benchkit.FreeAddr()}}
	trainer := map[string]any{"apiVersion": "config.trainer.kubeflow.org/v1alpha1", "kind": "Configuration",
		"leaderElection": map[string]any{"leaderElect": false}, "certManagement": map[string]any{"enable": false},
		"webhook": map[string]any{"host": "127.0.0.1", "port": port()},
		"metrics": map[string]any{"bindAddress": benchkit.FreeAddr(), "secureServing": false},
		"health":  map[string]any{"healthProbeBindAddress": benchkit.FreeAddr()}, "statusServer": map[string]any{"port": port()}}
	if rt.qps > 0 {
		for _, cfg := range []map[string]any{jobset, trainer} {
			cfg["clientConnection"] = map[string]any{"qps": rt.qps, "burst": rt.burst}
		}
	}
	var procs []*cluster.Process
	for _, p := range []struct {
		name, user string
		cfg        map[string]any
	}{
		{name: "jobset", user: "bench-jobset", cfg: jobset},
		{name: "trainer", user: "bench-trainer", cfg: trainer},
	} {
		proc, err := r.startPeer(p.name, p.user, p.cfg)
		if err != nil {
			return procs, err
		}
		procs = append(procs, proc)
	}
	return procs, nil
}

// startPeer starts the peer binary name under its own user with a configuration file.
func (r *run) startPeer(name, user string, cfg map[string]any) (*cluster.Process, error) {
	kc, err := r.cl.UserKubeconfig(name+".kubeconfig", user, "system:masters")
	if err != nil {
		return nil, err
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(r.dir, name+"-config.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return nil, err
	}
	return cluster.StartProcess(filepath.Join(r.c.peers, name), []string{"--kubeconfig=" + kc, "--config=" + path},
		filepath.Join(r.dir, name+".log"))
}

// trainingOperator returns Kubeflow Training Operator v1 with only its PyTorchJob controller. Its certificate
// rotator needs its Secret and its ValidatingWebhookConfiguration to exist (both created empty; the webhook
// is not registered, so no admission call is made). A PyTorchJob of 2 workers is a Master and a Worker;
// restartPolicy ExitCode recreates a rank killed by a signal (v1 restarts only that pod, never the gang).
func trainingOperator() *operator {
	return &operator{name: "Kubeflow Training Operator v1", version: "v1.9.3", published: rate{name: "published (20/30, 1 worker thread)"},
		users:    []string{"bench-training-operator"},
		gvr:      schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "pytorchjobs"},
		jobLabel: "training.kubeflow.org/job-name",
		install: func(ctx context.Context, r *run) error {
			if err := installCRDs(ctx, r, "training-operator"); err != nil {
				return err
			}
			if err := namespace(ctx, r, "kubeflow"); err != nil {
				return err
			}
			cert := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "training-operator-webhook-cert", Namespace: "kubeflow"}}
			if err := r.k.Create(ctx, cert); err != nil {
				return err
			}
			vwc := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
				"metadata": map[string]any{"name": "validator.training-operator.kubeflow.org"}}}
			return r.k.Create(ctx, vwc)
		},
		start: func(r *run, rt rate) ([]*cluster.Process, error) {
			kc, err := r.cl.UserKubeconfig("training-operator.kubeconfig", "bench-training-operator", "system:masters")
			if err != nil {
				return nil, err
			}
			args := []string{"--kubeconfig=" + kc, "--enable-scheme=pytorchjob", "--metrics-bind-address=" + benchkit.FreeAddr(),
				"--health-probe-bind-address=" + benchkit.FreeAddr(), fmt.Sprintf("--webhook-server-port=%d", port())}
			if rt.qps > 0 {
				args = append(args, fmt.Sprintf("--kube-api-qps=%d", rt.qps), fmt.Sprintf("--kube-api-burst=%d", rt.burst))
			}
			p, err := cluster.StartProcess(filepath.Join(r.c.peers, "training-operator"), args, filepath.Join(r.dir, "training-operator.log"))
			return []*cluster.Process{p}, err
		},
		object: func(name string, workers int) *unstructured.Unstructured {
			replica := func(n int) map[string]any {
				return map[string]any{"replicas": int64(n), "restartPolicy": "ExitCode", "template": map[string]any{"spec": map[string]any{
					"containers": []any{map[string]any{"name": "pytorch", "image": "bench:1", "command": []any{"train"}}}}}}
			}
			return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
				"metadata": map[string]any{"name": name, "namespace": ns},
				"spec": map[string]any{"runPolicy": map[string]any{"backoffLimit": int64(3)},
					"pytorchReplicaSpecs": map[string]any{"Master": replica(1), "Worker": replica(workers - 1)}}}}
		},
		finished: func(u *unstructured.Unstructured) bool { return hasCondition(u, "Succeeded") },
	}
}
