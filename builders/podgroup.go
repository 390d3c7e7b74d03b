package builders

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// Gang scheduling: a PodGroup asks the scheduler to place all workers together or none, so two jobs that
// each fit alone never deadlock holding half their GPUs each. Volcano and the scheduler-plugins
// coscheduler each define one; the pods name theirs by an annotation (Volcano) or a label (coscheduler).
const (
	VolcanoSchedulerName      = "volcano"
	CoschedulingSchedulerName = "scheduler-plugins-scheduler"
	VolcanoGroupAnnotation    = "scheduling.k8s.io/group-name"
	CoschedulingGroupLabel    = "scheduling.x-k8s.io/pod-group"
)

// PodGroup APIs.
var (
	VolcanoPodGroup      = schema.GroupVersionKind{Group: "scheduling.volcano.sh", Version: "v1beta1", Kind: "PodGroup"}
	CoschedulingPodGroup = schema.GroupVersionKind{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Kind: "PodGroup"}
)

// GangScheduler returns the PodGroup API the workers' scheduler reads: scheduling.gang.scheduler, else the
// one schedulerName implies; "" when the job is not gang-scheduled.
func GangScheduler(tj *mlv1.TrainingJob) mlv1.GangScheduler {
	s := tj.Spec.Scheduling
	switch {
	case s == nil:
		return ""
	case s.Gang != nil:
		return s.Gang.Scheduler
	case s.SchedulerName == VolcanoSchedulerName:
		return mlv1.GangVolcano
	case s.SchedulerName == CoschedulingSchedulerName:
		return mlv1.GangCoscheduling
	}
	return ""
}

// PodGroupKind returns the PodGroup API of the job's gang scheduler; ok is false without one.
func PodGroupKind(tj *mlv1.TrainingJob) (schema.GroupVersionKind, bool) {
	switch GangScheduler(tj) {
	case mlv1.GangVolcano:
		return VolcanoPodGroup, true
	case mlv1.GangCoscheduling:
		return CoschedulingPodGroup, true
	}
	return schema.GroupVersionKind{}, false
}

// PodGroup builds the workers' PodGroup: minMember = numWorkers, minResources = what all workers request,
// the workers' priority class; nil when the job is not gang-scheduled.
func PodGroup(tj *mlv1.TrainingJob, opts Options) *unstructured.Unstructured {
	gvk, ok := PodGroupKind(tj)
	if !ok {
		return nil
	}
	spec := map[string]any{"minMember": int64(tj.Spec.NumWorkers), "minResources": minResources(tj, opts)}
	if s := tj.Spec.Scheduling; s.Priority != "" && gvk == VolcanoPodGroup {
		spec["priorityClassName"] = s.Priority
	}
	if g := tj.Spec.Scheduling.Gang; g != nil && g.ScheduleTimeoutSeconds != nil && gvk == CoschedulingPodGroup {
		spec["scheduleTimeoutSeconds"] = int64(*g.ScheduleTimeoutSeconds)
	}
	pg := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	pg.SetGroupVersionKind(gvk)
	pg.SetName(names.PodGroupName(tj))
	pg.SetNamespace(tj.Namespace)
	pg.SetLabels(names.Labels(tj))
	return pg
}

// minResources returns what numWorkers workers request together (a request, else its limit, as the
// scheduler counts it), as strings.
func minResources(tj *mlv1.TrainingJob, opts Options) map[string]any {
	r := Resources(tj, opts)
	per := corev1.ResourceList{}
	for name, q := range r.Limits {
		per[name] = q
	}
	for name, q := range r.Requests {
		per[name] = q
	}
	out := map[string]any{}
	for name, q := range per {
		total := resource.Quantity{Format: q.Format}
		for range tj.Spec.NumWorkers {
			total.Add(q)
		}
		out[string(name)] = total.String()
	}
	return out
}

// podLabels returns the pods' labels: the attempt's, and the coscheduler's group.
func podLabels(tj *mlv1.TrainingJob) map[string]string {
	l := names.AttemptLabels(tj)
	if GangScheduler(tj) == mlv1.GangCoscheduling {
		l[CoschedulingGroupLabel] = names.PodGroupName(tj)
	}
	return l
}

// podAnnotations returns the pods' annotations: Volcano's group; nil otherwise.
func podAnnotations(tj *mlv1.TrainingJob) map[string]string {
	if GangScheduler(tj) == mlv1.GangVolcano {
		return map[string]string{VolcanoGroupAnnotation: names.PodGroupName(tj)}
	}
	return nil
}

// schedulerName returns scheduling.schedulerName, else the gang scheduler's ("" for none).
func schedulerName(tj *mlv1.TrainingJob) string {
	if s := tj.Spec.Scheduling; s != nil && s.SchedulerName != "" {
		return s.SchedulerName
	}
	switch GangScheduler(tj) {
	case mlv1.GangVolcano:
		return VolcanoSchedulerName
	case mlv1.GangCoscheduling:
		return CoschedulingSchedulerName
	}
	return ""
}
