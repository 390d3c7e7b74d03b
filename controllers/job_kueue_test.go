package controllers

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// admittedWorkload returns a Workload as Kueue leaves it once admitted in cq with flavor a100.
func admittedWorkload(mutate func(*kueue.Workload)) *kueue.Workload {
	wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "wl"},
		Spec: kueue.WorkloadSpec{PodSets: []kueue.PodSet{{Name: names.WorkerPodSet, Count: 2}}},
		Status: kueue.WorkloadStatus{
			Admission: &kueue.Admission{ClusterQueue: "cq", PodSetAssignments: []kueue.PodSetAssignment{{Name: names.WorkerPodSet,
				Flavors: map[corev1.ResourceName]kueue.ResourceFlavorReference{corev1.ResourceCPU: "a100", "nvidia.com/gpu": "a100"}}}},
			Conditions: []metav1.Condition{{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue, Reason: "QuotaReserved"},
				{Type: kueue.WorkloadAdmitted, Status: metav1.ConditionTrue, Reason: "Admitted"}},
		}}
	if mutate != nil {
		mutate(wl)
	}
	return wl
}

// TestObserveQueue: what the JobController reads of a Workload: the admission with the flavor's node
// labels and tolerations (once however many resources name the flavor), the topology gate, admission
// checks' updates; nothing to run while Kueue waits or evicts, with its words.
func TestObserveQueue(t *testing.T) {
	flavor := &kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "a100"}, Spec: kueue.ResourceFlavorSpec{
		NodeLabels:  map[string]string{"pool": "a100"},
		Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}}}
	baseLabels := map[string]string{names.PodSetLabel: names.WorkerPodSet}
	cases := []struct {
		name string
		wl   *kueue.Workload
		want *derive.Queue
	}{
		{name: "admitted", wl: admittedWorkload(nil),
			want: &derive.Queue{Name: "lq", Workload: "wl", Admission: &builders.Admission{ClusterQueue: "cq",
				NodeSelector: map[string]string{"pool": "a100"}, Tolerations: flavor.Spec.Tolerations, Labels: baseLabels,
				Annotations: map[string]string{names.WorkloadAnnotation: "wl"}}}},
		{name: "topology and an admission check",
			wl: admittedWorkload(func(wl *kueue.Workload) {
				wl.Status.Admission.PodSetAssignments[0].TopologyAssignment = &kueue.TopologyAssignment{Levels: []string{corev1.LabelHostname}}
				wl.Status.AdmissionChecks = []kueue.AdmissionCheckState{{Name: "prov", PodSetUpdates: []kueue.PodSetUpdate{{Name: names.WorkerPodSet,
					NodeSelector: map[string]string{"provisioned": "yes"}}}}}
			}),
			want: &derive.Queue{Name: "lq", Workload: "wl", Admission: &builders.Admission{ClusterQueue: "cq",
				NodeSelector: map[string]string{"pool": "a100", "provisioned": "yes"}, Tolerations: flavor.Spec.Tolerations, Labels: baseLabels,
				Annotations:     map[string]string{names.WorkloadAnnotation: "wl", names.UnconstrainedTopologyAnnotation: "true"},
				SchedulingGates: []corev1.PodSchedulingGate{{Name: names.TopologyGate}}}}},
		{name: "pending",
			wl: &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "wl"},
				Status: kueue.WorkloadStatus{Conditions: []metav1.Condition{{
					Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionFalse, Reason: "Pending", Message: "insufficient unused quota",
				}}}},
			want: &derive.Queue{Name: "lq", Workload: "wl", Pending: "insufficient unused quota"}},
		{name: "evicted",
			wl: admittedWorkload(func(wl *kueue.Workload) {
				wl.Status.Conditions = append(wl.Status.Conditions,
					metav1.Condition{Type: kueue.WorkloadEvicted, Status: metav1.ConditionTrue, Reason: "Preempted", Message: "to make room"},
					metav1.Condition{Type: kueue.WorkloadPreempted, Status: metav1.ConditionTrue, Reason: "InClusterQueue", Message: "to make room"})
			}),
			want: &derive.Queue{Name: "lq", Workload: "wl",
				Evicted: &metav1.Condition{Type: kueue.WorkloadEvicted, Status: metav1.ConditionTrue, Reason: "Preempted", Message: "to make room"},
				Preempted: &metav1.Condition{
					Type: kueue.WorkloadPreempted, Status: metav1.ConditionTrue, Reason: "InClusterQueue", Message: "to make room",
				}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newReconciler(flavor)
			r.APIReader = r.Client
			got, err := r.observeQueue(context.Background(), "lq", tc.wl)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestReleaseQuota: an evicted Workload's quota is released only once the workers are gone, as Kueue's
// job integrations do: admission cleared, QuotaReserved and Admitted false, Requeued after a preemption.
func TestReleaseQuota(t *testing.T) {
	evicted := metav1.Condition{
		Type: kueue.WorkloadEvicted, Status: metav1.ConditionTrue, Reason: kueue.WorkloadEvictedByPreemption, Message: "to make room",
	}
	wl := admittedWorkload(func(wl *kueue.Workload) { wl.Status.Conditions = append(wl.Status.Conditions, evicted) })
	r := newReconciler()
	r.Client = fake.NewClientBuilder().WithScheme(r.Scheme).WithObjects(wl).WithStatusSubresource(&kueue.Workload{}).Build()
	obs := &derive.Observed{Queue: &derive.Queue{Name: "lq", Workload: "wl", Evicted: &evicted}, Pods: []corev1.Pod{{}}}
	job := tjtest.NewTJ("ml", "x").Obj()
	if err := r.releaseQuota(context.Background(), job, obs); err != nil {
		t.Fatal(err)
	}
	got := &kueue.Workload{}
	if err := r.Get(context.Background(), client.ObjectKeyFromObject(wl), got); err != nil || got.Status.Admission == nil {
		t.Fatalf("released while a worker still stops: %v %+v", err, got.Status.Admission)
	}
	obs.Pods = nil
	if err := r.releaseQuota(context.Background(), job, obs); err != nil {
		t.Fatal(err)
	}
	if err := r.Get(context.Background(), client.ObjectKeyFromObject(wl), got); err != nil {
		t.Fatal(err)
	}
	var conds []string
	for _, c := range got.Status.Conditions {
		conds = append(conds, c.Type+"="+string(c.Status))
	}
	want := []string{"QuotaReserved=False", "Admitted=False", "Evicted=True", "Requeued=True"}
	if diff := cmp.Diff(want, conds); diff != "" || got.Status.Admission != nil {
		t.Errorf("admission %v, conditions (-want +got):\n%s", got.Status.Admission, diff)
	}
}

// TestPodsReadySequence: the PodsReady condition through a start, a gang restart and a finish, as
// syncPodsReady writes it: one write per change of meaning, never back to Started after a recovery.
func TestPodsReadySequence(t *testing.T) {
	var prev *metav1.Condition
	var got []string
	for _, ready := range []bool{false, false, true, true, false, false, true, true} {
		c, changed := podsReadyCondition(ready, prev)
		if !changed {
			continue
		}
		prev, got = &c, append(got, c.Reason)
	}
	want := []string{kueue.WorkloadWaitForStart, kueue.WorkloadStarted, kueue.WorkloadWaitForRecovery, kueue.WorkloadRecovered}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PodsReady reasons written (-want +got):\n%s", diff)
	}
}
