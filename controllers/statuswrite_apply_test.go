package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// statusFields returns the JSON names of TrainingJobStatus's fields.
func statusFields() []string {
	var out []string
	typ := reflect.TypeOf(mlv1.TrainingJobStatus{})
	for i := range typ.NumField() {
		out = append(out, strings.Split(typ.Field(i).Tag.Get("json"), ",")[0])
	}
	sort.Strings(out)
	return out
}

// conditionTypes returns the values of the API's Condition* constants, read from its source.
func conditionTypes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "crd", "v1", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			if v, ok := n.(*ast.ValueSpec); ok && len(v.Names) == 1 && len(v.Values) == 1 && strings.HasPrefix(v.Names[0].Name, "Condition") {
				if lit, ok := v.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, _ := strconv.Unquote(lit.Value)
					out = append(out, s)
				}
			}
			return true
		})
	}
	sort.Strings(out)
	return out
}

// fullStatus sets every field of the status and one condition of every type; v makes two of them differ
// everywhere.
func fullStatus(v int32, types []string) mlv1.TrainingJobStatus {
	at := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, int(v), 0, time.UTC))
	s := fmt.Sprint(v)
	st := mlv1.TrainingJobStatus{State: mlv1.State("S" + s), ObservedGeneration: int64(v), Progress: s + "%", CurrentEpoch: v, TotalEpochs: v,
		ETA: s + "m", Metrics: &mlv1.TrainingMetrics{Loss: ptr.To(float64(v))}, Workers: mlv1.WorkerCounts{Active: v},
		Checkpoint:        &mlv1.CheckpointStatus{Latest: "c-" + s, Count: v},
		CheckpointStorage: &mlv1.CheckpointStorage{Type: mlv1.StorageType("T" + s)}, RunID: "r" + s, ClusterName: "c" + s,
		StartTime: &at, CompletionTime: &at, Duration: s + "s", FailureReason: "f" + s, RestartCount: v, Attempt: v, LastFailure: "l" + s,
		LastProgressTime: &at, CurrentStep: int64(v), AvoidedNodes: []mlv1.AvoidedNode{{Name: "n" + s}},
		LastFailureNode: "n" + s, LastFailureTime: &at,
		Inputs:  []mlv1.InputStatus{{Name: "model", Source: "s3://b/" + s, Bytes: int64(v)}},
		MLflow:  &mlv1.MLflowStatus{TrackingURI: "http://m" + s, RunID: "r" + s},
		Best:    &mlv1.BestMetric{Metric: "loss", Value: float64(v), Epoch: v},
		Goodput: &mlv1.GoodputStatus{ProductiveSeconds: float64(v), Category: mlv1.GoodputProductive}}
	for _, c := range types {
		st.Conditions = append(st.Conditions,
			metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: "R" + s, Message: "m" + s, LastTransitionTime: at})
	}
	return st
}

// withParts returns base with the fields and conditions of the owners taken from from.
func withParts(t *testing.T, base, from mlv1.TrainingJobStatus, owners ...statusOwner) mlv1.TrainingJobStatus {
	t.Helper()
	out := statusJSON(base)
	src := statusJSON(from)
	conds := conditionsByType(base.Conditions)
	for _, o := range owners {
		for _, f := range o.Fields {
			out[f] = src[f]
		}
		for _, c := range from.Conditions {
			if slices.Contains(o.Conditions, c.Type) {
				conds[c.Type] = c
			}
		}
	}
	var st mlv1.TrainingJobStatus
	data, _ := json.Marshal(out)
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	st.Conditions = nil
	for _, c := range base.Conditions { // the order as read
		st.Conditions = append(st.Conditions, conds[c.Type])
	}
	return st
}

// applied is what one status apply sent: its field manager and the status's fields and condition types.
type applied struct {
	manager    string
	fields     []string
	conditions []string
}

// recordingClient returns a fake client that records every status apply that succeeded.
func recordingClient(t *testing.T, tj *mlv1.TrainingJob, sent *[]applied) client.Client {
	t.Helper()
	return fake.NewClientBuilder().WithScheme(NewScheme()).WithStatusSubresource(&mlv1.TrainingJob{}).WithObjects(tj).
		WithInterceptorFuncs(interceptor.Funcs{SubResourceApply: func(ctx context.Context, c client.Client, sub string,
			obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			a := applied{}
			for _, o := range opts {
				if m, ok := o.(client.FieldOwner); ok {
					a.manager = string(m)
				}
			}
			data, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			var u struct{ Status mlv1.TrainingJobStatus }
			if err := json.Unmarshal(data, &u); err != nil {
				t.Fatal(err)
			}
			for f := range statusJSON(u.Status) {
				if f != "conditions" {
					a.fields = append(a.fields, f)
				}
			}
			for _, c := range u.Status.Conditions {
				a.conditions = append(a.conditions, c.Type)
			}
			sort.Strings(a.fields)
			sort.Strings(a.conditions)
			err = c.SubResource(sub).Apply(ctx, obj, opts...)
			if err == nil { // a conflict with the fixture's creator is taken over with a second apply
				*sent = append(*sent, a)
			}
			return err
		}}).Build()
}

// TestStatusOwnership: the ownership table gives every status field and every condition type of the API
// exactly one owner, and applyStatus sends each controller's own part only, under its field manager, and
// refuses a status in which a controller changed a field or condition of another.
func TestStatusOwnership(t *testing.T) {
	types := conditionTypes(t)
	owners := map[string][]string{}
	for _, o := range statusOwners {
		for _, f := range o.Fields {
			owners["status."+f] = append(owners["status."+f], o.Manager)
		}
		for _, c := range o.Conditions {
			owners["condition "+c] = append(owners["condition "+c], o.Manager)
		}
	}
	for _, f := range statusFields() {
		if f != "conditions" && len(owners["status."+f]) != 1 {
			t.Errorf("status.%s has owners %v, want exactly one", f, owners["status."+f])
		}
		delete(owners, "status."+f)
	}
	for _, c := range types {
		if len(owners["condition "+c]) != 1 {
			t.Errorf("condition %s has owners %v, want exactly one", c, owners["condition "+c])
		}
		delete(owners, "condition "+c)
	}
	for name := range owners {
		t.Errorf("the table owns %s, which the API does not have", name)
	}

	before, after := fullStatus(1, types), fullStatus(2, types)
	if missing := cmp.Diff(statusFields(), unionKeys(statusJSON(before), nil)); missing != "" {
		t.Fatalf("the fixture does not set every status field (-type +fixture):\n%s", missing)
	}
	for _, o := range statusOwners {
		for _, other := range statusOwners {
			tj := &mlv1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "own"}, Status: before}
			var sent []applied
			c := recordingClient(t, tj, &sent)
			tj.Status = withParts(t, before, after, other)
			written, _, err := applyStatus(context.Background(), c, nil, tj, before, o.Manager)
			if other.Manager != o.Manager {
				if err == nil || written || len(sent) != 0 || !strings.Contains(err.Error(), "does not own") {
					t.Errorf("%s changing %s's part: written %v, %d applies, error %v; want refused", o.Manager, other.Manager, written, len(sent), err)
				}
				continue
			}
			want := applied{
				manager: o.Manager, fields: slices.Sorted(slices.Values(o.Fields)), conditions: slices.Sorted(slices.Values(o.Conditions)),
			}
			if err != nil || len(sent) != 1 {
				t.Fatalf("%s changing its own part: %d applies, error %v", o.Manager, len(sent), err)
			}
			if diff := cmp.Diff(want, sent[0], cmp.AllowUnexported(applied{})); diff != "" {
				t.Errorf("%s sent (-own part +sent):\n%s", o.Manager, diff)
			}
		}
	}
}

// TestOwnershipViolations: what the API server's managedFields say is checked against the table.
func TestOwnershipViolations(t *testing.T) {
	entry := func(manager string, op metav1.ManagedFieldsOperationType, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, Subresource: "status", FieldsV1: metav1.NewFieldsV1(fields)}
	}
	own := entry(statusController, metav1.ManagedFieldsOperationApply,
		`{"f:status":{"f:progress":{},"f:conditions":{"k:{\"type\":\"ProgressReported\"}":{".":{},"f:status":{}}}}}`)
	cases := []struct {
		name  string
		entry metav1.ManagedFieldsEntry
		want  []string
	}{
		{name: "its own fields", entry: own, want: nil},
		{name: "another's field", entry: entry(statusController, metav1.ManagedFieldsOperationApply, `{"f:status":{"f:state":{}}}`),
			want: []string{"trainingjob-status holds status.state"}},
		{name: "another's condition",
			entry: entry(checkpointController, metav1.ManagedFieldsOperationApply, `{"f:status":{"f:conditions":{"k:{\"type\":\"Running\"}":{}}}}`),
			want:  []string{"trainingjob-checkpoint holds condition Running"}},
		{name: "an update", entry: entry(jobController, metav1.ManagedFieldsOperationUpdate, `{"f:status":{"f:state":{}}}`),
			want: []string{"trainingjob (Update) wrote the status: not one of the controllers' applies"}},
		{name: "a manager outside the table", entry: entry("kubectl", metav1.ManagedFieldsOperationApply, `{"f:status":{"f:state":{}}}`),
			want: []string{"kubectl (Apply) wrote the status: not one of the controllers' applies"}},
	}
	for _, tc := range cases {
		tj := &mlv1.TrainingJob{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{tc.entry,
			{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, FieldsV1: metav1.NewFieldsV1(`{"f:spec":{}}`)}}}}
		if diff := cmp.Diff(tc.want, OwnershipViolations(tj)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestChangedParts: the status-written log line (level 2) names the fields a write changed, with their new
// values, and a removed field as nil.
func TestChangedParts(t *testing.T) {
	before := map[string]any{"state": "Running", "progress": "10%", "eta": "5m"}
	mine := map[string]any{"state": "Running", "progress": "20%", "currentEpoch": float64(2)}
	want := map[string]any{"progress": "20%", "currentEpoch": float64(2), "eta": nil}
	if diff := cmp.Diff(want, changedParts(before, mine)); diff != "" {
		t.Errorf("changed (-want +got):\n%s", diff)
	}
}
