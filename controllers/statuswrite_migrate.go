package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// movedStatusFields are status fields that changed owner between operator versions: the field, and
// the field manager that wrote it before.
var movedStatusFields = []struct{ field, from string }{
	{field: "goodput", from: statusController}, // the JobController's since it accounts goodput (issue 47)
}

// takeOverMovedFields makes each moved field's new owner its field manager, applying its value with
// force, before any controller writes. Otherwise the old owner's next apply would delete the field.
func takeOverMovedFields(mgr ctrl.Manager, namespaces []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = ctrl.LoggerInto(ctx, mgr.GetLogger())
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		if err := takeOverIn(ctx, mgr.GetAPIReader(), mgr.GetClient(), ns); err != nil {
			return err
		}
	}
	return nil
}

// takeOverIn takes over the moved fields of the TrainingJobs in ns, 500 at a time.
func takeOverIn(ctx context.Context, r client.Reader, c client.Client, ns string) error {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(mlv1.GroupVersion.WithKind("TrainingJobList"))
	for {
		if err := r.List(ctx, list, client.InNamespace(ns), client.Limit(500), client.Continue(list.GetContinue())); err != nil {
			return fmt.Errorf("listing TrainingJobs to take over moved status fields: %w", err)
		}
		for i := range list.Items {
			if err := takeOverJob(ctx, r, c, &list.Items[i]); err != nil {
				return err
			}
		}
		if list.GetContinue() == "" {
			return nil
		}
	}
}

// takeOverJob takes over one job's moved fields. The new owner applies them as they are with force,
// then the old owner applies its part without them, which leaves them to the new owner and deletes
// nothing.
func takeOverJob(ctx context.Context, r client.Reader, c client.Client, m *metav1.PartialObjectMetadata) error {
	for _, f := range movedStatusFields {
		if !ownsStatusField(m.ManagedFields, f.from, f.field) {
			continue
		}
		tj := &mlv1.TrainingJob{}
		if err := r.Get(ctx, client.ObjectKeyFromObject(m), tj); err != nil {
			return client.IgnoreNotFound(err)
		}
		to := ownerOfField(f.field)
		v, ok := statusJSON(tj.Status)[f.field]
		if !ok {
			continue
		}
		if _, err := applyPart(ctx, c, tj, map[string]any{f.field: v}, to, client.ForceOwnership); err != nil {
			return fmt.Errorf("taking over %s of %s: %w", f.field, klog.KObj(tj), err)
		}
		if _, err := applyPart(ctx, c, tj, ownerOf(f.from).part(tj.Status), f.from); err != nil {
			return fmt.Errorf("handing over %s of %s: %w", f.field, klog.KObj(tj), err)
		}
		ctrl.LoggerFrom(ctx).Info("took over a status field moved to another controller", "trainingJob", klog.KObj(tj),
			"field", f.field, "from", f.from, "to", to)
	}
	return nil
}

// ownsStatusField reports whether manager's apply entry holds status.field itself, not a deeper key
// of that name.
func ownsStatusField(entries []metav1.ManagedFieldsEntry, manager, field string) bool {
	for _, e := range entries {
		if e.Manager != manager || e.Operation != metav1.ManagedFieldsOperationApply || e.FieldsV1 == nil {
			continue
		}
		var set struct {
			Status map[string]json.RawMessage `json:"f:status"`
		}
		if json.Unmarshal(e.FieldsV1.GetRawBytes(), &set) == nil && set.Status["f:"+field] != nil {
			return true
		}
	}
	return false
}

// ownerOfField returns the manager whose row of statusOwners holds field.
func ownerOfField(field string) string {
	for _, o := range statusOwners {
		for _, f := range o.Fields {
			if f == field {
				return o.Manager
			}
		}
	}
	panic("controllers: no owner of status field " + field) // the table names every field
}
