package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// +kubebuilder:rbac:groups=ml.example.com,resources=trainingjobs/status,verbs=patch

// applyStatus writes manager's part of tj.Status with server-side apply when it differs from old,
// and refuses a change to a field manager does not own. When written, tj carries the new
// resourceVersion.
//
// A 409 from one of our managers is requeued with backoff; one from a manager outside the table,
// such as an older operator, is taken over once with force.
func applyStatus(ctx context.Context, c client.Client, writes *statusWrites, tj *mlv1.TrainingJob, old mlv1.TrainingJobStatus,
	manager string) (written bool, res reconcile.Result, err error) {
	if apiequality.Semantic.DeepEqual(old, tj.Status) {
		// Most reconciles: nothing to compare field by field.
		return false, reconcile.Result{}, nil
	}
	owner := ownerOf(manager)
	if stray := owner.strayChanges(old, tj.Status); len(stray) > 0 {
		return false, reconcile.Result{}, fmt.Errorf("%s changed status fields of %s it does not own: %s", manager, klog.KObj(tj),
			strings.Join(stray, ", "))
	}
	mine, before := owner.part(tj.Status), owner.part(old)
	key := budgetKey(manager, client.ObjectKeyFromObject(tj))
	if apiequality.Semantic.DeepEqual(mine, before) {
		writes.budgetOf().leave(key)
		return false, reconcile.Result{}, nil
	}
	class := "urgent"
	if routineWrite(manager, old, tj.Status) {
		class = "routine"
	}
	if ok, wait := writes.budgetOf().admit(key, class == "routine"); !ok {
		metrics.StatusWrites.WithLabelValues(manager, class, "deferred").Inc()
		ctrl.LoggerFrom(ctx).V(1).Info("Status write deferred by the write budget", "manager", manager, "class", class, "wait", wait)
		return false, reconcile.Result{RequeueAfter: wait}, nil
	}
	metrics.StatusWrites.WithLabelValues(manager, class, "written").Inc()
	rv, err := applyPart(ctx, c, tj, mine, manager)
	if apierrors.IsConflict(err) && !conflictsWithOurs(err) {
		ctrl.LoggerFrom(ctx).Info("taking over status fields written by another manager", "conflict", err.Error())
		rv, err = applyPart(ctx, c, tj, mine, manager, client.ForceOwnership)
	}
	switch {
	case apierrors.IsConflict(err):
		ctrl.LoggerFrom(ctx).V(1).Info("status field owned by another controller; computing again", "conflict", err.Error())
		return false, reconcile.Result{Requeue: true}, nil //nolint:staticcheck // the rate limiter's backoff
	case err != nil:
		return false, reconcile.Result{}, fmt.Errorf("applying status of %s: %w", klog.KObj(tj), err)
	}
	tj.ResourceVersion = rv
	writes.wrote(tj)
	if log := ctrl.LoggerFrom(ctx).V(2); log.Enabled() {
		log.Info("status written", "manager", manager, "class", class, "changed", changedParts(before, mine))
	}
	return true, reconcile.Result{}, nil
}

// changedParts returns the fields of mine that differ from before, with their new values; nil means
// removed.
func changedParts(before, mine map[string]any) map[string]any {
	out := map[string]any{}
	for _, k := range unionKeys(before, mine) {
		if !apiequality.Semantic.DeepEqual(before[k], mine[k]) {
			out[k] = mine[k]
		}
	}
	return out
}

// applyPart applies part as tj's status under manager, and returns the resulting resourceVersion.
func applyPart(ctx context.Context, c client.Client, tj *mlv1.TrainingJob, part map[string]any, manager string,
	opts ...client.SubResourceApplyOption) (string, error) {
	u := &unstructured.Unstructured{Object: map[string]any{"status": part}}
	u.SetGroupVersionKind(mlv1.GroupVersion.WithKind("TrainingJob"))
	u.SetNamespace(tj.Namespace)
	u.SetName(tj.Name)
	err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), append(opts, client.FieldOwner(manager))...)
	return u.GetResourceVersion(), err
}

// statusJSON returns st as the API server stores it: a map by JSON name.
func statusJSON(st mlv1.TrainingJobStatus) map[string]any {
	data, err := json.Marshal(st)
	if err != nil {
		panic(err) // a status is plain data
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		panic(err)
	}
	if w, ok := out["workers"].(map[string]any); ok && len(w) == 0 {
		delete(out, "workers") // a struct is never omitted by omitempty: no counts is no field
	}
	return out
}

func conditionJSON(c metav1.Condition) map[string]any {
	data, _ := json.Marshal(c)
	var out map[string]any
	_ = json.Unmarshal(data, &out)
	return out
}

func conditionsByType(conds []metav1.Condition) map[string]metav1.Condition {
	out := map[string]metav1.Condition{}
	for _, c := range conds {
		out[c.Type] = c
	}
	return out
}

func unionKeys[V any](a, b map[string]V) []string {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// conflictManager finds the managers a 409 of server-side apply names: `conflict with "name" ...`.
var conflictManager = regexp.MustCompile(`conflicts? with "([^"]+)"`)

// conflictsWithOurs reports whether the apply conflict names one of the table's managers.
func conflictsWithOurs(err error) bool {
	for _, m := range conflictManager.FindAllStringSubmatch(err.Error(), -1) {
		for _, o := range statusOwners {
			if o.Manager == m[1] {
				return true
			}
		}
	}
	return false
}

// cacheLag is how long a reconcile that found the cache behind its own last write waits before it
// looks again; the watch event usually comes within milliseconds.
const cacheLag = 20 * time.Millisecond

// statusWrites remembers, by UID, the resourceVersion of this process's last write of each object,
// so a reconcile on a lagging cache waits instead of writing a conflict. Records older than a
// minute are ignored. Setup shares one across the four controllers; a nil one remembers nothing.
type statusWrites struct {
	m      sync.Map
	writes atomic.Int64 // counts writes, to sweep m now and then
	// budget is the status-write budget the four controllers share (writeBudget); nil: none.
	budget *writeBudget
}

// budgetKey is the key of a controller's writes of a job in the budget.
func budgetKey(manager string, job client.ObjectKey) string {
	return manager + "/" + job.Namespace + "/" + job.Name
}

// sweepEvery is how many writes pass between sweeps of records older than a minute, so deleted jobs
// leave nothing behind.
const sweepEvery = 1024

// forget gives up the turns the four controllers reserved for a job that is gone.
func (v *statusWrites) forget(key client.ObjectKey) {
	for _, o := range statusOwners {
		v.budgetOf().leave(budgetKey(o.Manager, key))
	}
}

// budgetOf returns v's budget; nil (none) when v is nil.
func (v *statusWrites) budgetOf() *writeBudget {
	if v == nil {
		return nil
	}
	return v.budget
}

type writtenVersion struct {
	rv string
	at time.Time
}

func (v *statusWrites) wrote(obj client.Object) {
	if v == nil || obj.GetUID() == "" {
		// Not from an API server: a test's object.
		return
	}
	now := time.Now()
	v.m.Store(obj.GetUID(), writtenVersion{obj.GetResourceVersion(), now})
	if v.writes.Add(1)%sweepEvery == 0 {
		v.m.Range(func(uid, w any) bool {
			if now.Sub(w.(writtenVersion).at) > time.Minute {
				v.m.CompareAndDelete(uid, w)
			}
			return true
		})
	}
}

// behind reports whether obj, read from the cache, is older than this process's last write of it.
func (v *statusWrites) behind(obj client.Object) bool {
	if v == nil {
		return false
	}
	w, ok := v.m.Load(obj.GetUID())
	if !ok {
		return false
	}
	c, err := resourceversion.CompareResourceVersion(obj.GetResourceVersion(), w.(writtenVersion).rv)
	if err != nil || c >= 0 || time.Since(w.(writtenVersion).at) > time.Minute {
		v.m.CompareAndDelete(obj.GetUID(), w)
		return false
	}
	return true
}
