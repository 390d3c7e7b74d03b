package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestOwnsStatusField: a status field is found at its place in a manager's managedFields entry, not where a
// key of the same name sits deeper down (a custom metric named goodput).
func TestOwnsStatusField(t *testing.T) {
	entry := func(manager, raw string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationApply, Subresource: "status",
			FieldsV1: metav1.NewFieldsV1(raw)}
	}
	for _, tc := range []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		want    bool
	}{
		{name: "the field", entries: []metav1.ManagedFieldsEntry{
			entry(statusController, `{"f:status":{"f:goodput":{".":{},"f:category":{}}}}`)}, want: true},
		{name: "a custom metric of that name", entries: []metav1.ManagedFieldsEntry{
			entry(statusController, `{"f:status":{"f:metrics":{".":{},"f:custom":{".":{},"f:goodput":{}}}}}`)}, want: false},
		{name: "a longer name", entries: []metav1.ManagedFieldsEntry{
			entry(statusController, `{"f:status":{"f:goodputX":{}}}`)}, want: false},
		{name: "another manager's", entries: []metav1.ManagedFieldsEntry{
			entry(jobController, `{"f:status":{"f:goodput":{}}}`)}, want: false},
		{name: "no fields", entries: []metav1.ManagedFieldsEntry{{Manager: statusController}}, want: false},
	} {
		if got := ownsStatusField(tc.entries, statusController, "goodput"); got != tc.want {
			t.Errorf("%s: ownsStatusField = %t, want %t", tc.name, got, tc.want)
		}
	}
}
