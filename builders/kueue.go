package builders

import (
	"maps"
	"slices"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// A TrainingJob is a Kueue external framework (docs/kueue.md): it has one Workload for its whole life,
// built here, with one pod set (the workers). Its Jobs carry no queue label and are never charged.

// QueueName returns the Kueue LocalQueue that admits the job: the TrainingJob's kueue.x-k8s.io/queue-name
// label (Kueue's convention, what a platform's policies and Kueue's tools set), else
// spec.scheduling.queueName; "" when the job is not queued.
func QueueName(tj *mlv1.TrainingJob) string {
	if q := tj.Labels[names.QueueLabel]; q != "" {
		return q
	}
	if s := tj.Spec.Scheduling; s != nil {
		return s.QueueName
	}
	return ""
}

// ManagedByOperator reports whether spec.managedBy is unset or names this operator. A TrainingJob managed
// by another controller (MultiKueue) is left alone.
func ManagedByOperator(tj *mlv1.TrainingJob) bool {
	m := ptr.Deref(tj.Spec.ManagedBy, "")
	return m == "" || m == names.ControllerName
}

// PrebuiltWorkload returns the Workload another made for the job (names.PrebuiltWorkloadKey, the annotation
// else the label, as Kueue reads them: MultiKueue, on the worker cluster it dispatched the job to), "" when
// the job's Workload is the operator's own.
//
// Only a copy MultiKueue made counts (its origin label), and only a name a Workload can have: a key on any
// other job is ignored, so a typo does not stop a running job nor a long value fill its status.
func PrebuiltWorkload(tj *mlv1.TrainingJob) string {
	wl := tj.Annotations[names.PrebuiltWorkloadKey]
	if wl == "" {
		wl = tj.Labels[names.PrebuiltWorkloadKey]
	}
	if tj.Labels[names.MultiKueueOriginLabel] == "" || len(validation.IsDNS1123Subdomain(wl)) > 0 {
		return ""
	}
	return wl
}

// WorkloadName returns the name of the job's Workload: the prebuilt one, else the operator's own.
func WorkloadName(tj *mlv1.TrainingJob) string {
	if wl := PrebuiltWorkload(tj); wl != "" {
		return wl
	}
	return names.WorkloadName(tj)
}

// PriorityClassRef returns the class that sets the Workload's priority: the WorkloadPriorityClass of the
// job's kueue.x-k8s.io/priority-class label, else the PriorityClass of spec.scheduling.priority; nil
// when the job names neither (priority 0).
func PriorityClassRef(tj *mlv1.TrainingJob) *kueue.PriorityClassRef {
	if c := tj.Labels[names.PriorityClassLabel]; c != "" {
		return &kueue.PriorityClassRef{Group: kueue.WorkloadPriorityClassGroup, Kind: kueue.WorkloadPriorityClassKind, Name: c}
	}
	if s := tj.Spec.Scheduling; s != nil && s.Priority != "" {
		return &kueue.PriorityClassRef{Group: kueue.PodPriorityClassGroup, Kind: kueue.PodPriorityClassKind, Name: s.Priority}
	}
	return nil
}

// Workload builds the job's Workload: queue, priority (the value of PriorityClassRef's class, which the
// controller reads), active unless the user suspends the job, and one pod set of numWorkers workers
// with the workers' pod template (what Kueue charges, and the topology request it places by).
func Workload(tj *mlv1.TrainingJob, opts Options, priority int32) *kueue.Workload {
	labels := names.Labels(tj)
	labels[names.JobUIDLabel] = string(tj.UID)
	wl := &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Name: names.WorkloadName(tj), Namespace: tj.Namespace, Labels: labels,
			Finalizers: []string{names.ResourceInUseFinalizer}},
		Spec: kueue.WorkloadSpec{
			QueueName: kueue.LocalQueueName(QueueName(tj)),
			PodSets:   []kueue.PodSet{WorkerPodSet(tj, opts)},
			Active:    ptr.To(!tj.Suspended()),
		},
	}
	if ref := PriorityClassRef(tj); ref != nil {
		wl.Spec.PriorityClassRef, wl.Spec.Priority = ref, ptr.To(priority)
	}
	if !ManagedByOperator(tj) {
		wl.Annotations = map[string]string{names.OriginCreatedAnnotation: tj.CreationTimestamp.UTC().Format(time.RFC3339)}
	}
	return wl
}

// WorkerPodSet returns the workers' pod set: the Job's pod template without what changes between attempts,
// and the topology request of Kueue's pod annotations (spec.workerPod.annotations) with the rank label,
// so Kueue's topology-aware scheduling places ranks in order.
func WorkerPodSet(tj *mlv1.TrainingJob, opts Options) kueue.PodSet {
	tmpl := *Job(tj, opts).Spec.Template.DeepCopy()
	delete(tmpl.Labels, names.AttemptLabel)
	return kueue.PodSet{
		Name: names.WorkerPodSet, Count: tj.Spec.NumWorkers, Template: tmpl, TopologyRequest: topologyRequest(tmpl.Annotations),
	}
}

func topologyRequest(annotations map[string]string) *kueue.PodSetTopologyRequest {
	req := &kueue.PodSetTopologyRequest{PodIndexLabel: ptr.To(names.RankLabel)}
	if v, ok := annotations[names.RequiredTopologyAnnotation]; ok {
		req.Required = ptr.To(v)
	} else if v, ok := annotations[names.PreferredTopologyAnnotation]; ok {
		req.Preferred = ptr.To(v)
	} else if v, err := strconv.ParseBool(annotations[names.UnconstrainedTopologyAnnotation]); err == nil {
		req.Unconstrained = ptr.To(v) // the CRD admits only true and false
	}
	return req
}

// PodSetChanged reports whether the Workload's pod set (got) no longer describes the workers (want):
// another count (an elastic job resized), other requests, node selection or tolerations (edited while
// suspended), or another topology request. Kueue lets a pod set change only while its Workload holds no
// quota.
func PodSetChanged(want, got []kueue.PodSet) bool {
	if len(want) != len(got) {
		return true
	}
	w, g := want[0], got[0]
	if w.Count != g.Count || !apiequality.Semantic.DeepEqual(w.TopologyRequest, g.TopologyRequest) {
		return true
	}
	ws, gs := w.Template.Spec, g.Template.Spec
	return !apiequality.Semantic.DeepEqual(requests(ws), requests(gs)) || !maps.Equal(ws.NodeSelector, gs.NodeSelector) ||
		!apiequality.Semantic.DeepEqual(ws.Tolerations, gs.Tolerations) || !apiequality.Semantic.DeepEqual(ws.Affinity, gs.Affinity)
}

// requests returns what Kueue charges for a pod: each container's and init container's requests (and
// limits), and the pod's overhead.
func requests(spec corev1.PodSpec) []corev1.ResourceList {
	var r []corev1.ResourceList
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		r = append(r, c.Resources.Requests, c.Resources.Limits)
	}
	return append(r, spec.Overhead)
}

// Admission is what Kueue's admission adds to the workers' pods (Kueue's PodSetInfo): the flavor's node
// labels and tolerations, the pod set's label, the Workload's annotation and, under topology-aware
// scheduling, the gate Kueue's topology ungater removes once it has chosen each pod's node. The
// controller reads it from the Workload's admission and the ResourceFlavors it names.
type Admission struct {
	ClusterQueue    string
	NodeSelector    map[string]string
	Tolerations     []corev1.Toleration
	Labels          map[string]string
	Annotations     map[string]string
	SchedulingGates []corev1.PodSchedulingGate
}

// AdmittedJob returns Job with the admission's placement in the pod template. The job's own node selector
// and labels win where both name a key (admission refused such a conflict: Kueue's flavor matched the
// job's nodeSelector). The spec hash covers the admission: a Job built for another admission is stale.
func AdmittedJob(tj *mlv1.TrainingJob, opts Options, a *Admission) *batchv1.Job {
	job := Job(tj, opts)
	if a == nil {
		return job
	}
	t := &job.Spec.Template
	t.Spec.NodeSelector = merged(a.NodeSelector, t.Spec.NodeSelector)
	t.Labels = merged(a.Labels, t.Labels)
	t.Annotations = merged(a.Annotations, t.Annotations)
	for _, tol := range a.Tolerations {
		if !slices.ContainsFunc(t.Spec.Tolerations, func(x corev1.Toleration) bool { return x.MatchToleration(&tol) }) {
			t.Spec.Tolerations = append(t.Spec.Tolerations, tol)
		}
	}
	t.Spec.SchedulingGates = append(t.Spec.SchedulingGates, a.SchedulingGates...)
	job.Spec.Suspend = ptr.To(tj.Suspended())
	job.Annotations[names.SpecHashAnnotation] = SpecHash(job)
	return job
}

// merged returns base overlaid with own; own itself when base is empty (nil when both are nil).
func merged(base, own map[string]string) map[string]string {
	if len(base) == 0 {
		return own
	}
	out := maps.Clone(base)
	maps.Copy(out, own)
	return out
}
