package controllers

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

// A queued TrainingJob is a Kueue external framework (docs/kueue.md). The JobController keeps one
// Workload for the job's whole life, runs the workers only while Kueue admits it, stops them and
// releases the quota on eviction, and reports readiness (waitForPodsReady) and the finish.
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads/status,verbs=update
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=resourceflavors;workloadpriorityclasses,verbs=get
// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=priorityclasses,verbs=get

// ensureWorkload creates the queued job's Workload or keeps its queue, active flag and pod set in
// step, and records what it says in obs.Queue. It marks a finished job's Workload finished.
func (r *JobReconciler) ensureWorkload(ctx context.Context, tj *mlv1.TrainingJob, obs *derive.Observed) error {
	queue, prebuilt := builders.QueueName(tj), builders.PrebuiltWorkload(tj)
	if queue == "" && prebuilt == "" {
		return nil
	}
	wl := &kueue.Workload{}
	found, err := getOptional(ctx, r.Client, client.ObjectKey{Namespace: tj.Namespace, Name: builders.WorkloadName(tj)}, wl)
	if meta.IsNoMatchError(err) {
		return &missingAPIError{fmt.Errorf("queue %q named, but this cluster does not serve Kueue's Workload API "+
			"(kueue.x-k8s.io/v1beta2): install Kueue with TrainingJob.v1.ml.example.com in integrations.externalFrameworks "+
			"(docs/kueue.md), or remove the queue name: %w", queue, err)}
	}
	if err != nil {
		return err
	}
	// A Workload of that name that is not the job's is never finished, synced or released by it: only a
	// Workload made for a dispatched copy is adopted, and only unfinished (adoptWorkload checks it).
	foreign := found && !metav1.IsControlledBy(wl, tj) && (prebuilt == "" || finished(tj))
	switch {
	case foreign && finished(tj):
		return nil
	case foreign:
		return &missingAPIError{fmt.Errorf("the Workload %s exists and is not this job's: delete it, or the job", wl.Name)}
	case finished(tj):
		if found {
			return r.finishWorkload(ctx, tj, wl)
		}
		return nil
	case !found && prebuilt != "":
		// MultiKueue makes it; its creation is watched.
		obs.Queue = &derive.Queue{Name: queue, Workload: prebuilt, Pending: "MultiKueue has not made this Workload on this cluster yet"}
		return nil
	case !found:
		if wl, err = r.createWorkload(ctx, tj); err != nil {
			return err
		}
	case prebuilt != "":
		if err := r.adoptWorkload(ctx, tj, wl); err != nil {
			return err
		}
	default:
		if err := r.syncWorkload(ctx, tj, wl); err != nil {
			return err
		}
	}
	obs.Queue, err = r.observeQueue(ctx, cmp.Or(queue, string(wl.Spec.QueueName)), wl)
	return err
}

// adoptWorkload makes the job the controller of the Workload made for it (builders.PrebuiltWorkload), as
// Kueue's own integrations do: Kueue finds a job's Workload by that owner, and the Workload goes with the job.
// Its spec is MultiKueue's copy of the manager's and stays as it is. A Workload another object controls is
// refused: the job waits and says why.
func (r *JobReconciler) adoptWorkload(ctx context.Context, tj *mlv1.TrainingJob, wl *kueue.Workload) error {
	if metav1.IsControlledBy(wl, tj) {
		// Adopted by an earlier reconcile, which may have failed before the job's own write.
		return r.recordOriginCreated(ctx, tj, wl)
	}
	if owner := metav1.GetControllerOfNoCopy(wl); owner != nil {
		return &missingAPIError{fmt.Errorf("the Workload %s named by %s is controlled by %s %s, not by this job",
			wl.Name, names.PrebuiltWorkloadKey, owner.Kind, owner.Name)}
	}
	if wl.Labels[names.NameLabel] != tj.Name {
		return &missingAPIError{fmt.Errorf("the Workload %s named by %s was not made for this job (its label %s is %q)",
			wl.Name, names.PrebuiltWorkloadKey, names.NameLabel, wl.Labels[names.NameLabel])}
	}
	patch := client.MergeFromWithOptions(wl.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if err := controllerutil.SetControllerReference(tj, wl, r.Scheme); err != nil {
		return fmt.Errorf("setting owner of workload %s: %w", wl.Name, err)
	}
	wl.Labels[names.JobUIDLabel] = string(tj.UID)
	if err := r.Patch(ctx, wl, patch); err != nil {
		return fmt.Errorf("adopting workload %s: %w", wl.Name, err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Adopted the Workload MultiKueue made", "workload", klog.KObj(wl))
	return r.recordOriginCreated(ctx, tj, wl)
}

// recordOriginCreated copies the manager job's creation time from the Workload (names.OriginCreatedAnnotation)
// onto the job, once, over any value written there: its goodput starts there (derive), so the time before this copy existed, a lost
// cluster's included, counts.
func (r *JobReconciler) recordOriginCreated(ctx context.Context, tj *mlv1.TrainingJob, wl *kueue.Workload) error {
	at, ok := wl.Annotations[names.OriginCreatedAnnotation]
	if !ok || tj.Annotations[names.OriginCreatedAnnotation] == at || !builders.Dispatched(tj) {
		// The Workload's value wins over one written on the job (or copied from the manager's job).
		return nil
	}
	patch := client.MergeFrom(tj.DeepCopy())
	if tj.Annotations == nil {
		tj.Annotations = map[string]string{}
	}
	tj.Annotations[names.OriginCreatedAnnotation] = at
	if err := r.Patch(ctx, tj, patch); err != nil {
		return fmt.Errorf("recording the manager job's creation time on %s: %w", klog.KObj(tj), err)
	}
	return nil
}

// ensureDispatchedWorkload keeps only the Workload of a job MultiKueue runs on a worker cluster
// (spec.managedBy), for MultiKueue's admission check to dispatch, and gives an evicted one's quota back
// at once (nothing runs here): Kueue then queues it again and MultiKueue dispatches it anew, to another
// worker when one was lost. A job another controller manages gets nothing.
func (r *JobReconciler) ensureDispatchedWorkload(ctx context.Context, tj *mlv1.TrainingJob) error {
	if ptr.Deref(tj.Spec.ManagedBy, "") != names.MultiKueueController {
		return nil
	}
	var obs derive.Observed
	if err := r.ensureWorkload(ctx, tj, &obs); err != nil {
		return err
	}
	return r.releaseQuota(ctx, tj, &obs)
}

// createWorkload creates the job's Workload, with the priority of the class it names.
func (r *JobReconciler) createWorkload(ctx context.Context, tj *mlv1.TrainingJob) (*kueue.Workload, error) {
	priority, err := r.priority(ctx, tj)
	if err != nil {
		return nil, err
	}
	wl := builders.Workload(tj, r.options(ctx), priority)
	if err := controllerutil.SetControllerReference(tj, wl, r.Scheme); err != nil {
		return nil, fmt.Errorf("setting owner of workload %s: %w", wl.Name, err)
	}
	if err := r.Create(ctx, wl); err != nil {
		return nil, fmt.Errorf("creating workload %s: %w", wl.Name, err)
	}
	r.Recorder.Eventf(tj, wl, corev1.EventTypeNormal, derive.ReasonQueued, "Queue", "workload %s queued in %q", wl.Name, wl.Spec.QueueName)
	ctrl.LoggerFrom(ctx).V(1).Info("Queued the job", "workload", klog.KObj(wl), "queue", wl.Spec.QueueName)
	return wl, nil
}

// priority returns the value of the class builders.PriorityClassRef names, or 0 when none. A
// missing class is an error that names it, so the job says why it waits.
func (r *JobReconciler) priority(ctx context.Context, tj *mlv1.TrainingJob) (int32, error) {
	ref := builders.PriorityClassRef(tj)
	if ref == nil {
		return 0, nil
	}
	var value int32
	var err error
	if ref.Kind == kueue.WorkloadPriorityClassKind {
		c := &kueue.WorkloadPriorityClass{}
		err = r.APIReader.Get(ctx, client.ObjectKey{Name: ref.Name}, c)
		value = c.Value
	} else {
		c := &schedulingv1.PriorityClass{}
		err = r.APIReader.Get(ctx, client.ObjectKey{Name: ref.Name}, c)
		value = c.Value
	}
	if apierrors.IsNotFound(err) {
		return 0, &missingAPIError{fmt.Errorf("the %s %q that sets the job's queue priority does not exist: %w", ref.Kind, ref.Name, err)}
	}
	return value, err
}

// syncWorkload brings the Workload's queue, active flag and pod set in line with the job. Kueue
// allows queue and pod set changes only without quota, so a resized admitted job gets a new
// Workload and queues again.
func (r *JobReconciler) syncWorkload(ctx context.Context, tj *mlv1.TrainingJob, wl *kueue.Workload) error {
	if !wl.DeletionTimestamp.IsZero() {
		// Its workers stop (observeQueue), then the finalizer goes (releaseQuota).
		return nil
	}
	want := builders.Workload(tj, r.options(ctx), ptr.Deref(wl.Spec.Priority, 0))
	reserved := quotaReserved(wl)
	if reserved && builders.PodSetChanged(want.Spec.PodSets, wl.Spec.PodSets) {
		r.Recorder.Eventf(tj, wl, corev1.EventTypeNormal, derive.ReasonQueued, "Requeue",
			"the workers changed (%d now): workload %s is replaced and queued again", tj.Spec.NumWorkers, wl.Name)
		return r.deleteWorkload(ctx, wl)
	}
	patch := client.MergeFromWithOptions(wl.DeepCopy(), client.MergeFromWithOptimisticLock{})
	changed := ptr.Deref(wl.Spec.Active, true) != *want.Spec.Active
	wl.Spec.Active = want.Spec.Active
	if !reserved && (wl.Spec.QueueName != want.Spec.QueueName || builders.PodSetChanged(want.Spec.PodSets, wl.Spec.PodSets)) {
		wl.Spec.QueueName, wl.Spec.PodSets, changed = want.Spec.QueueName, want.Spec.PodSets, true
	}
	if !changed {
		return nil
	}
	if err := r.Patch(ctx, wl, patch); err != nil {
		return fmt.Errorf("updating workload %s of %s: %w", wl.Name, klog.KObj(tj), err)
	}
	return nil
}

func (r *JobReconciler) deleteWorkload(ctx context.Context, wl *kueue.Workload) error {
	if err := r.Delete(ctx, wl, client.Preconditions{UID: &wl.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting workload %s: %w", wl.Name, err)
	}
	return nil
}

// observeQueue reads what Kueue decided: the admission with its flavors' node labels and
// tolerations while admitted, else why the workers wait or stop.
func (r *JobReconciler) observeQueue(ctx context.Context, queue string, wl *kueue.Workload) (*derive.Queue, error) {
	q := &derive.Queue{Name: queue, Workload: wl.Name}
	if c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved); c != nil && c.Status == metav1.ConditionFalse {
		q.Pending = c.Message
	}
	evicted := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadEvicted)
	if evicted != nil && evicted.Status == metav1.ConditionTrue && quotaReserved(wl) {
		q.Evicted = evicted
	}
	stopped := !admitted(wl) || q.Evicted != nil
	preempted := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadPreempted)
	requeued := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadRequeued)
	switch {
	case !stopped:
	case preempted != nil && preempted.Status == metav1.ConditionTrue:
		q.Preempted = preempted
	case requeued != nil && requeued.Reason == kueue.WorkloadEvictedByPreemption:
		q.Preempted = requeued
	}
	if !admitted(wl) || q.Evicted != nil || !wl.DeletionTimestamp.IsZero() {
		return q, nil
	}
	var err error
	q.Admission, err = r.admission(ctx, wl)
	return q, err
}

// admission returns Kueue's PodSetInfo for the workers' pod set (podset.FromAssignment): flavor
// node labels and tolerations, the pod set label and annotation, any topology gate, and admission
// check additions.
func (r *JobReconciler) admission(ctx context.Context, wl *kueue.Workload) (*builders.Admission, error) {
	a := &builders.Admission{ClusterQueue: string(wl.Status.Admission.ClusterQueue), NodeSelector: map[string]string{},
		Labels: map[string]string{names.PodSetLabel: names.WorkerPodSet}, Annotations: map[string]string{names.WorkloadAnnotation: wl.Name}}
	for _, psa := range wl.Status.Admission.PodSetAssignments {
		if psa.Name != names.WorkerPodSet {
			continue
		}
		if psa.TopologyAssignment != nil {
			a.SchedulingGates = []corev1.PodSchedulingGate{{Name: names.TopologyGate}}
			if tr := wl.Spec.PodSets[0].TopologyRequest; tr == nil || (tr.Required == nil && tr.Preferred == nil && tr.Unconstrained == nil) {
				a.Annotations[names.UnconstrainedTopologyAnnotation] = "true"
			}
		}
		seen := map[kueue.ResourceFlavorReference]bool{}
		for _, ref := range psa.Flavors {
			if seen[ref] {
				continue
			}
			seen[ref] = true
			flavor := &kueue.ResourceFlavor{}
			if err := r.APIReader.Get(ctx, client.ObjectKey{Name: string(ref)}, flavor); err != nil {
				return nil, fmt.Errorf("reading resource flavor %s of workload %s: %w", ref, wl.Name, err)
			}
			maps.Copy(a.NodeSelector, flavor.Spec.NodeLabels)
			a.Tolerations = append(a.Tolerations, flavor.Spec.Tolerations...)
		}
	}
	for _, check := range wl.Status.AdmissionChecks {
		for _, u := range check.PodSetUpdates {
			if u.Name == names.WorkerPodSet {
				maps.Copy(a.NodeSelector, u.NodeSelector)
				maps.Copy(a.Labels, u.Labels)
				maps.Copy(a.Annotations, u.Annotations)
				a.Tolerations = append(a.Tolerations, u.Tolerations...)
			}
		}
	}
	return a, nil
}

// releaseQuota gives back an evicted or deleted Workload's quota once the workers are gone and have
// written their SIGTERM checkpoint. It clears the admission, requeues after a preemption as Kueue's
// jobframework does, and drops a deleted Workload's finalizer.
func (r *JobReconciler) releaseQuota(ctx context.Context, tj *mlv1.TrainingJob, obs *derive.Observed) error {
	if obs.Queue == nil || obs.Job != nil && obs.Job.Status.Active > 0 || len(obs.Pods) > 0 {
		return nil
	}
	wl := &kueue.Workload{}
	if found, err := getOptional(ctx, r.Client, client.ObjectKey{Namespace: tj.Namespace, Name: obs.Queue.Workload}, wl); err != nil ||
		!found {
		return err
	}
	if !wl.DeletionTimestamp.IsZero() {
		return r.removeFinalizer(ctx, wl)
	}
	ev := obs.Queue.Evicted
	if ev == nil {
		return nil
	}
	now := metav1.NewTime(r.Clock.Now())
	requeue := ev.Reason == kueue.WorkloadEvictedByPreemption || ev.Reason == kueue.WorkloadEvictedDueToNodeFailures
	meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: kueue.WorkloadRequeued, Status: conditionStatus(requeue),
		Reason: ev.Reason, Message: ev.Message, ObservedGeneration: wl.Generation})
	meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionFalse,
		Reason: kueue.WorkloadQuotaReservedReasonPendingEvaluation, Message: ev.Message, LastTransitionTime: now,
		ObservedGeneration: wl.Generation})
	meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: kueue.WorkloadAdmitted, Status: metav1.ConditionFalse,
		Reason: kueue.WorkloadAdmittedReasonNoReservation, Message: "The workload has no reservation", LastTransitionTime: now,
		ObservedGeneration: wl.Generation})
	wl.Status.Admission = nil
	if err := r.Status().Update(ctx, wl, client.FieldOwner(jobController)); err != nil {
		return fmt.Errorf("releasing the quota of workload %s (%s): %w", wl.Name, ev.Reason, err)
	}
	return nil
}

func conditionStatus(b bool) metav1.ConditionStatus {
	if b {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}

// syncPodsReady keeps the Workload's PodsReady condition for Kueue's waitForPodsReady: true once
// every worker of the admitted attempt is ready or done, false otherwise (WaitForStart, then
// WaitForRecovery).
func (r *JobReconciler) syncPodsReady(ctx context.Context, tj *mlv1.TrainingJob, obs *derive.Observed) error {
	if obs.Queue == nil || obs.Queue.Admission == nil || obs.Job != nil && obs.Job.ResourceVersion == "" {
		// Not admitted, or the Job was just created: nothing is observed yet.
		return nil
	}
	wl := &kueue.Workload{}
	if found, err := getOptional(ctx, r.Client, client.ObjectKey{Namespace: tj.Namespace, Name: obs.Queue.Workload}, wl); err != nil ||
		!found {
		return err
	}
	// Finished workers count as ready, as in Kueue's Job integration: the run is not waiting.
	ready := obs.Job != nil && ptr.Deref(obs.Job.Status.Ready, 0)+obs.Job.Status.Succeeded >= tj.Spec.NumWorkers
	prev := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadPodsReady)
	c, changed := podsReadyCondition(ready, prev)
	if !changed {
		return nil
	}
	c.ObservedGeneration = wl.Generation
	meta.SetStatusCondition(&wl.Status.Conditions, c)
	if err := r.Status().Update(ctx, wl, client.FieldOwner(jobController)); err != nil {
		return fmt.Errorf("setting PodsReady=%s on workload %s: %w", c.Status, wl.Name, err)
	}
	return nil
}

// podsReadyCondition returns the PodsReady condition Kueue's own integrations set. changed is false
// when prev already says the same; a ready Workload keeps its reason.
func podsReadyCondition(ready bool, prev *metav1.Condition) (c metav1.Condition, changed bool) {
	c = metav1.Condition{Type: kueue.WorkloadPodsReady, Status: conditionStatus(ready)}
	switch {
	case ready && prev != nil && prev.Reason == kueue.WorkloadWaitForRecovery:
		c.Reason, c.Message = kueue.WorkloadRecovered, "At least one pod has failed, but all pods are ready again"
	case ready:
		c.Reason, c.Message = kueue.WorkloadStarted, "All pods reached readiness and the workload is running"
	case prev == nil || prev.Reason == kueue.WorkloadWaitForStart:
		c.Reason, c.Message = kueue.WorkloadWaitForStart, "Not all pods are ready or succeeded"
	default:
		c.Reason, c.Message = kueue.WorkloadWaitForRecovery, "At least one pod has failed, waiting for recovery"
	}
	return c, prev == nil || prev.Status != c.Status || (prev.Reason != c.Reason && !ready)
}

// finishWorkload marks a finished job's Workload finished, so Kueue frees its quota, and drops its
// finalizer.
func (r *JobReconciler) finishWorkload(ctx context.Context, tj *mlv1.TrainingJob, wl *kueue.Workload) error {
	if meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadFinished) == nil {
		reason := kueue.WorkloadFinishedReasonSucceeded
		if tj.Status.State == mlv1.StateFailed {
			reason = kueue.WorkloadFinishedReasonFailed
		}
		meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: kueue.WorkloadFinished, Status: metav1.ConditionTrue,
			Reason: reason, Message: derive.ConditionMessage(tj.Status, string(tj.Status.State)), ObservedGeneration: wl.Generation})
		if err := r.Status().Update(ctx, wl, client.FieldOwner(jobController)); err != nil {
			return fmt.Errorf("finishing workload %s: %w", wl.Name, err)
		}
	}
	return r.removeFinalizer(ctx, wl)
}

func (r *JobReconciler) removeFinalizer(ctx context.Context, wl *kueue.Workload) error {
	if !controllerutil.ContainsFinalizer(wl, names.ResourceInUseFinalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(wl.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(wl, names.ResourceInUseFinalizer)
	if err := r.Patch(ctx, wl, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the finalizer of workload %s: %w", wl.Name, err)
	}
	return nil
}

// releaseDeleted drops the Workload finalizers of a TrainingJob that is gone or being deleted, so
// they do not block the deletion. The workers go with the job by owner references.
func (r *JobReconciler) releaseDeleted(ctx context.Context, key client.ObjectKey) error {
	if !r.kueueServed {
		return nil
	}
	var list kueue.WorkloadList
	if err := r.List(ctx, &list, client.InNamespace(key.Namespace), client.MatchingLabels{names.NameLabel: key.Name}); err != nil {
		return fmt.Errorf("listing the workloads of %s: %w", key, err)
	}
	for i := range list.Items {
		if wl := &list.Items[i]; !wl.DeletionTimestamp.IsZero() {
			if err := r.removeFinalizer(ctx, wl); err != nil {
				return err
			}
		}
	}
	return nil
}

func quotaReserved(wl *kueue.Workload) bool {
	return meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved) && wl.Status.Admission != nil
}

func admitted(wl *kueue.Workload) bool {
	return quotaReserved(wl) && meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted)
}

// queueRecheck is how often a queued job is rechecked when the operator does not watch Workloads
// because Kueue's API was not served at start.
const queueRecheck = 15 * time.Second
