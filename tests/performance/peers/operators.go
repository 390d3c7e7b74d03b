package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/cluster"
	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
)

// rate is a client rate limit (requests per second and burst) an operator runs at; published is its own
// default, tuned the bench's common one. kcm is kube-controller-manager's (0: its default, 20 with a
// burst of 30): its Job controller creates the pods of ours and of JobSet's Jobs, so a platform that tunes
// the operator's rate tunes it too.
type rate struct {
	name       string
	qps, burst int
	kcm        int
}

// tunedRate is the one client rate every operator and kube-controller-manager get in the tuned runs:
// above what 1,000 jobs need.
var tunedRate = rate{name: "tuned (1000/2000, kube-controller-manager too)", qps: 1000, burst: 2000, kcm: 1000}

// operator is one operator under test: how to install and start it, the job a user submits to it (2
// workers of the same image and command), how its pods name their job, and when it calls a job finished.
type operator struct {
	name, version string
	// published is the operator's own default client rate (qps 0: no client-side limit).
	published rate
	// users are the API users whose writes are the operator's (its processes' identities).
	users []string
	gvr   schema.GroupVersionResource
	// jobLabel is the pod label that holds the job's name.
	jobLabel string
	install  func(ctx context.Context, r *run) error
	start    func(r *run, rt rate) ([]*cluster.Process, error)
	object   func(name string, workers int) *unstructured.Unstructured
	finished func(u *unstructured.Unstructured) bool
}

func operators() []*operator { return []*operator{ours(), trainer(), trainingOperator()} }

func ours() *operator {
	return &operator{name: "trainingjob-operator", version: "this commit", published: rate{name: "published (no client limit)"},
		users: []string{"bench-trainingjob-operator"}, gvr: mlv1.GroupVersion.WithResource("trainingjobs"), jobLabel: names.NameLabel,
		install: func(context.Context, *run) error { return nil }, // cluster.Start installs the CRD and its admission policies
		start: func(r *run, rt rate) ([]*cluster.Process, error) {
			kc, err := r.cl.UserKubeconfig("ours.kubeconfig", "bench-trainingjob-operator", "system:masters")
			if err != nil {
				return nil, err
			}
			args := []string{"--kubeconfig=" + kc, "--metrics-bind-address=" + benchkit.FreeAddr(), "--metrics-insecure-http",
				"--health-probe-bind-address=0"}
			if rt.qps > 0 {
				args = append(args, fmt.Sprintf("--kube-api-qps=%d", rt.qps), fmt.Sprintf("--kube-api-burst=%d", rt.burst))
			}
			p, err := cluster.StartProcess(r.c.manager, args, filepath.Join(r.dir, "ours.log"))
			return []*cluster.Process{p}, err
		},
		object: func(name string, workers int) *unstructured.Unstructured {
			tj := &mlv1.TrainingJob{TypeMeta: metav1.TypeMeta{APIVersion: mlv1.GroupVersion.String(), Kind: "TrainingJob"},
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: mlv1.TrainingJobSpec{Model: "m", Dataset: "d", NumWorkers: int32(workers), GPUsPerWorker: ptr.To[int32](0), Image: "bench:1",
					Command: []string{"train"}, Checkpoint: &mlv1.CheckpointSpec{Enabled: ptr.To(false)},
					Monitoring:    &mlv1.MonitoringSpec{Enabled: ptr.To(false)},
					FailurePolicy: &mlv1.FailurePolicy{RestartStrategy: mlv1.RestartRecreate}}}
			if strings.HasPrefix(name, inPlacePrefix) { // under the supervisor, which in place needs
				tj.Spec.Monitoring.Enabled, tj.Spec.FailurePolicy.RestartStrategy = ptr.To(true), mlv1.RestartInPlace
			}
			return toUnstructured(tj)
		},
		finished: func(u *unstructured.Unstructured) bool {
			s, _, _ := unstructured.NestedString(u.Object, "status", "state")
			return s == string(mlv1.StateCompleted)
		},
	}
}

func toUnstructured(o runtime.Object) *unstructured.Unstructured {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		panic(err) // typed objects always convert
	}
	return &unstructured.Unstructured{Object: m}
}

// hasCondition reports whether the object's status holds the condition type with status True.
func hasCondition(u *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ && m["status"] == "True" {
			return true
		}
	}
	return false
}

// createYAML creates the object of a YAML document.
func createYAML(ctx context.Context, r *run, doc string) error {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		return err
	}
	return r.k.Create(ctx, u)
}

// installCRDs creates the CRDs hack/peers.sh copied for the peers and waits until they are served.
func installCRDs(ctx context.Context, r *run, peers ...string) error {
	for _, p := range peers {
		if err := local.ApplyCRDs(ctx, r.cl.Config, filepath.Join(r.c.peers, "crds", p)); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

// namespace creates a namespace the peer needs (its own, for its secrets).
func namespace(ctx context.Context, r *run, name string) error {
	return r.k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
}
