package builders

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

func TestQueueNameAndPriority(t *testing.T) {
	cases := []struct {
		name      string
		tj        *mlv1.TrainingJob
		wantQueue string
		wantRef   *kueue.PriorityClassRef
	}{
		{name: "not queued", tj: tjtest.NewTJ("ml", "a").Obj(), wantQueue: "", wantRef: nil},
		{name: "spec", tj: tjtest.NewTJ("ml", "a").Queue("lq").Obj(), wantQueue: "lq", wantRef: nil},
		{name: "Kueue's label", tj: tjtest.NewTJ("ml", "a").Label(names.QueueLabel, "lq").Obj(), wantQueue: "lq", wantRef: nil},
		{
			name:      "the label wins",
			tj:        tjtest.NewTJ("ml", "a").Queue("spec").Label(names.QueueLabel, "label").Obj(),
			wantQueue: "label",
			wantRef:   nil,
		},
		{
			name:      "a PriorityClass",
			tj:        tjtest.NewTJ("ml", "a").Queue("lq").With(func(tj *mlv1.TrainingJob) { tj.Spec.Scheduling.Priority = "high" }).Obj(),
			wantQueue: "lq",
			wantRef:   &kueue.PriorityClassRef{Group: kueue.PodPriorityClassGroup, Kind: kueue.PodPriorityClassKind, Name: "high"},
		},
		{
			name: "a WorkloadPriorityClass wins",
			tj: tjtest.NewTJ("ml", "a").Queue("lq").Label(names.PriorityClassLabel, "urgent").
				With(func(tj *mlv1.TrainingJob) { tj.Spec.Scheduling.Priority = "high" }).Obj(),
			wantQueue: "lq",
			wantRef:   &kueue.PriorityClassRef{Group: kueue.WorkloadPriorityClassGroup, Kind: kueue.WorkloadPriorityClassKind, Name: "urgent"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff([]any{tc.wantQueue, tc.wantRef}, []any{QueueName(tc.tj), PriorityClassRef(tc.tj)}); diff != "" {
				t.Errorf("queue, priority class (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWorkload(t *testing.T) {
	tj := tjtest.NewTJ("ml", "a").Workers(4).GPUs(0).Queue("lq").Label(names.PriorityClassLabel, "urgent").With(func(tj *mlv1.TrainingJob) {
		tj.UID = "uid-1"
		tj.Status.Attempt = 3
		tj.Spec.Resources = &mlv1.Resources{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}
		tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{Annotations: map[string]string{names.RequiredTopologyAnnotation: "example.com/block"}}
	}).Obj()
	wl := Workload(tj, Options{}, 1000)
	ps := wl.Spec.PodSets[0]
	got := []any{wl.Name, wl.Labels[names.JobUIDLabel], wl.Labels[names.NameLabel], wl.Finalizers, string(wl.Spec.QueueName), *wl.Spec.Active,
		wl.Spec.PriorityClassRef.Name, *wl.Spec.Priority, string(ps.Name), ps.Count, ps.Template.Labels[names.AttemptLabel],
		ps.Template.Spec.Containers[0].Resources.Requests.Cpu().String(), *ps.TopologyRequest.Required, *ps.TopologyRequest.PodIndexLabel}
	want := []any{names.WorkloadName(tj), "uid-1", "a", []string{names.ResourceInUseFinalizer}, "lq", true,
		"urgent", int32(1000), names.WorkerPodSet, int32(4), "", "500m", "example.com/block", names.RankLabel}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	suspended := Workload(tjtest.NewTJ("ml", "a").Queue("lq").Suspend(true).Obj(), Options{}, 0)
	if *suspended.Spec.Active || suspended.Spec.Priority != nil {
		t.Errorf("a suspended job's workload: active %v, priority %v; want inactive and no priority",
			*suspended.Spec.Active, suspended.Spec.Priority)
	}
	// The pod set is the same for every attempt: a gang restart keeps the Workload as it is.
	next := tj.DeepCopy()
	next.Status.Attempt++
	if PodSetChanged(wl.Spec.PodSets, Workload(next, Options{}, 1000).Spec.PodSets) {
		t.Errorf("the pod set changed with the attempt")
	}
}

func TestPodSetChanged(t *testing.T) {
	base := tjtest.NewTJ("ml", "a").Workers(2).Queue("lq").Obj()
	cases := []struct {
		name   string
		change func(*mlv1.TrainingJob)
		want   bool
	}{
		{name: "nothing", change: func(*mlv1.TrainingJob) {}, want: false},
		{
			name:   "hyperparameters",
			change: func(tj *mlv1.TrainingJob) { tj.Spec.Hyperparameters = &mlv1.Hyperparameters{Epochs: ptr.To[int32](99)} },
			want:   false,
		},
		{name: "resized", change: func(tj *mlv1.TrainingJob) { tj.Spec.NumWorkers = 3 }, want: true},
		{
			name: "requests",
			change: func(tj *mlv1.TrainingJob) {
				tj.Spec.Resources = &mlv1.Resources{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}
			},
			want: true,
		},
		{
			name:   "node selector",
			change: func(tj *mlv1.TrainingJob) { tj.Spec.Scheduling.NodeSelector = map[string]string{"pool": "a100"} },
			want:   true,
		},
		{
			name: "topology",
			change: func(tj *mlv1.TrainingJob) {
				tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{Annotations: map[string]string{names.PreferredTopologyAnnotation: "rack"}}
			},
			want: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tj := base.DeepCopy()
			tc.change(tj)
			if got := PodSetChanged(Workload(tj, Options{}, 0).Spec.PodSets, Workload(base, Options{}, 0).Spec.PodSets); got != tc.want {
				t.Errorf("PodSetChanged = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAdmittedJob(t *testing.T) {
	tj := tjtest.NewTJ("ml", "a").Queue("lq").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Scheduling.NodeSelector = map[string]string{"pool": "mine"}
		tj.Spec.Scheduling.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}
	}).Obj()
	queued := AdmittedJob(tj, Options{}, nil)
	a := &Admission{NodeSelector: map[string]string{"flavor": "a100", "pool": "theirs"},
		Tolerations: []corev1.Toleration{
			{Key: "gpu", Operator: corev1.TolerationOpExists}, {Key: "spot", Operator: corev1.TolerationOpExists},
		},
		Labels:          map[string]string{names.PodSetLabel: names.WorkerPodSet},
		Annotations:     map[string]string{names.WorkloadAnnotation: "wl"},
		SchedulingGates: []corev1.PodSchedulingGate{{Name: names.TopologyGate}}}
	job := AdmittedJob(tj, Options{}, a)
	p := job.Spec.Template
	got := []any{*queued.Spec.Suspend, *job.Spec.Suspend, p.Spec.NodeSelector, len(p.Spec.Tolerations), p.Labels[names.PodSetLabel],
		p.Labels[names.NameLabel], p.Annotations[names.WorkloadAnnotation], p.Spec.SchedulingGates[0].Name,
		job.Annotations[names.SpecHashAnnotation] == queued.Annotations[names.SpecHashAnnotation], job.Labels[names.QueueLabel]}
	want := []any{true, false, map[string]string{"flavor": "a100", "pool": "mine"}, 2, names.WorkerPodSet,
		"a", "wl", names.TopologyGate, false, ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
