package controllers

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// node returns a node of 8 GPUs with the given labels, Ready unless ready is false.
func node(name string, ready bool, labels map[string]string) *corev1.Node {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}},
			Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}}
}

// TestSchedulableNodes: the nodes a failing attempt's workers could move to, read only when a node may be
// avoided: Ready, not cordoned, matching the workers' node selector, with no taint they do not tolerate, as
// one of the attempt's pods is stored (a toleration admission added counts), each with how many workers
// (of 2, 4 GPUs each) its allocatable GPUs hold.
func TestSchedulableNodes(t *testing.T) {
	gpu := map[string]string{"pool": "gpu"}
	cordoned := node("cordoned", true, gpu)
	cordoned.Spec.Unschedulable = true
	tainted := node("tainted", true, gpu)
	tainted.Spec.Taints = []corev1.Taint{{Key: "maintenance", Effect: corev1.TaintEffectNoSchedule}}
	tolerated := node("tolerated", true, gpu)
	tolerated.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}}
	preferred := node("preferred-off", true, gpu)
	preferred.Spec.Taints = []corev1.Taint{{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule}}
	// The stored pod: the job's node selector, and the GPU toleration admission (ExtendedResourceToleration) added.
	stored := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "n-worker-0-x"},
		Spec: corev1.PodSpec{NodeName: "ready", NodeSelector: gpu, Containers: []corev1.Container{{Name: "trainer",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}}}},
			Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}}}
	small := node("ready", true, gpu) // 4 GPUs: one worker of 4
	small.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("4")
	objs := []client.Object{small, node("not-ready", false, gpu), node("cpu", true, map[string]string{"pool": "cpu"}),
		cordoned, tainted, tolerated, preferred, stored}
	tj := tjtest.NewTJ("ml", "n").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Scheduling = &mlv1.SchedulingSpec{NodeSelector: gpu}
	}).Obj()
	failedOn := tj.DeepCopy()
	failedOn.Status.LastFailureNode, failedOn.Status.AvoidedNodes = "ready", []mlv1.AvoidedNode{{Name: "tolerated"}}
	listed := []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: stored.Name}, Spec: corev1.PodSpec{NodeName: "ready"}}}
	trouble := map[string]string{"x": "is gone"}
	cases := []struct {
		name string
		tj   *mlv1.TrainingJob
		obs  derive.Observed
		want map[string]int32
	}{
		{name: "no node can be avoided: not read", tj: tj, obs: derive.Observed{Pods: listed}, want: nil},
		{name: "a node in trouble", tj: tj, obs: derive.Observed{Pods: listed, NodeTrouble: trouble},
			want: map[string]int32{"preferred-off": 2, "ready": 1, "tolerated": 2}},
		{name: "a worker on the previous failure's node, avoided ones still listed", tj: failedOn, obs: derive.Observed{Pods: listed},
			want: map[string]int32{"preferred-off": 2, "ready": 1, "tolerated": 2}},
		{name: "no worker to read: unknown", tj: tj, obs: derive.Observed{NodeTrouble: trouble}, want: nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newReconciler(objs...)
			got, err := schedulableNodes(context.Background(), r.Client, tc.tj, tc.obs)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("schedulable (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHoldsAll: the node list stops once the nodes read hold every worker even without those avoidance
// could take (the avoided ones and one more, the largest first).
func TestHoldsAll(t *testing.T) {
	for _, tc := range []struct {
		name    string
		nodes   map[string]int32
		without int
		workers int32
		want    bool
	}{
		{name: "none read", nodes: map[string]int32{}, without: 1, workers: 2, want: false},
		{name: "the largest taken away leaves too few", nodes: map[string]int32{"a": 2, "b": 1}, without: 1, workers: 2, want: false},
		{name: "enough without the largest", nodes: map[string]int32{"a": 2, "b": 1, "c": 1}, without: 1, workers: 2, want: true},
		{name: "more taken away than read", nodes: map[string]int32{"a": 8}, without: 3, workers: 1, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := holdsAll(tc.nodes, tc.without, tc.workers); got != tc.want {
				t.Errorf("holdsAll = %t, want %t", got, tc.want)
			}
		})
	}
}
