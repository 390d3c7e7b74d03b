package controllers

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// The status ownership table: which controller writes each status field and condition, and the
// checks that hold the writes to it (applyStatus sends only the owner's part; OwnershipViolations
// reads what the API server recorded).

// statusOwners is who writes each status field (by its JSON name) and each condition type.
var statusOwners = []statusOwner{
	{Manager: jobController,
		Fields: []string{"state", "observedGeneration", "workers", "checkpointStorage", "runID", "clusterName", "startTime", "completionTime",
			"duration", "failureReason", "restartCount", "attempt", "lastFailure", "avoidedNodes", "lastFailureNode",
			"lastFailureTime", "inputs", "goodput"},
		Conditions: []string{mlv1.ConditionCreated, mlv1.ConditionRunning, mlv1.ConditionCompleted, mlv1.ConditionFailed,
			mlv1.ConditionSuspended, mlv1.ConditionRestarting, mlv1.ConditionCheckpointClaimBound, mlv1.ConditionInputsReady}},
	{Manager: statusController,
		Fields: []string{"progress", "currentEpoch", "totalEpochs", "eta", "metrics", "lastProgressTime", "currentStep",
			"best"},
		Conditions: []string{mlv1.ConditionProgressReported, mlv1.ConditionSuccessPolicyMet, mlv1.ConditionStalled}},
	{Manager: checkpointController,
		Fields:     []string{"checkpoint"},
		Conditions: []string{mlv1.ConditionCheckpointStorageReady}},
	{Manager: trackingController,
		Fields:     []string{"mlflow"},
		Conditions: []string{mlv1.ConditionExperimentTracked}},
}

// statusOwner is one writer of the status: its field manager, and the fields and condition types it
// owns.
type statusOwner struct {
	Manager    string
	Fields     []string
	Conditions []string
}

// ownerOf returns manager's row of statusOwners.
func ownerOf(manager string) statusOwner {
	for _, o := range statusOwners {
		if o.Manager == manager {
			return o
		}
	}
	panic("controllers: no status owner " + manager) // a programming error: the table names every controller
}

// part returns st as JSON, reduced to the owner's fields and conditions.
func (o statusOwner) part(st mlv1.TrainingJobStatus) map[string]any {
	all := statusJSON(st)
	out := map[string]any{}
	for _, f := range o.Fields {
		if v, ok := all[f]; ok {
			out[f] = v
		}
	}
	var conds []any
	for _, c := range st.Conditions {
		if slices.Contains(o.Conditions, c.Type) {
			conds = append(conds, conditionJSON(c))
		}
	}
	if len(conds) > 0 {
		out["conditions"] = conds
	}
	return out
}

// strayChanges names what differs between old and st outside the owner's fields and conditions.
func (o statusOwner) strayChanges(old, st mlv1.TrainingJobStatus) []string {
	a, b := statusJSON(old), statusJSON(st)
	var out []string
	for _, f := range unionKeys(a, b) {
		if f != "conditions" && !slices.Contains(o.Fields, f) && !apiequality.Semantic.DeepEqual(a[f], b[f]) {
			out = append(out, "status."+f)
		}
	}
	oc, nc := conditionsByType(old.Conditions), conditionsByType(st.Conditions)
	for _, t := range unionKeys(oc, nc) {
		if !slices.Contains(o.Conditions, t) && !apiequality.Semantic.DeepEqual(oc[t], nc[t]) {
			out = append(out, "condition "+t)
		}
	}
	return out
}

// OwnershipViolations checks tj's recorded managedFields against statusOwners. It names every
// status field and condition held by a manager other than its owner, and every status write that
// was not an apply by a table manager.
func OwnershipViolations(tj *mlv1.TrainingJob) []string {
	var out []string
	for _, e := range tj.ManagedFields {
		if e.Subresource != "status" || e.FieldsV1 == nil {
			continue
		}
		owner, known := statusOwner{}, false
		for _, o := range statusOwners {
			if o.Manager == e.Manager {
				owner, known = o, true
			}
		}
		if !known || e.Operation != metav1.ManagedFieldsOperationApply {
			out = append(out, fmt.Sprintf("%s (%s) wrote the status: not one of the controllers' applies", e.Manager, e.Operation))
			continue
		}
		fields, conds, err := statusPaths(e.FieldsV1.GetRawBytes())
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", e.Manager, err))
		}
		for _, f := range fields {
			if !slices.Contains(owner.Fields, f) {
				out = append(out, fmt.Sprintf("%s holds status.%s", e.Manager, f))
			}
		}
		for _, c := range conds {
			if !slices.Contains(owner.Conditions, c) {
				out = append(out, fmt.Sprintf("%s holds condition %s", e.Manager, c))
			}
		}
	}
	return out
}

// statusPaths returns the top-level status fields and condition types of a managedFields entry's
// fieldsV1.
func statusPaths(raw []byte) (fields, conds []string, err error) {
	var set map[string]map[string]json.RawMessage
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, nil, fmt.Errorf("fieldsV1: %w", err)
	}
	for key, sub := range set["f:status"] {
		switch key {
		case ".":
		case "f:conditions":
			var items map[string]json.RawMessage
			if err := json.Unmarshal(sub, &items); err != nil {
				return nil, nil, fmt.Errorf("fieldsV1 conditions: %w", err)
			}
			for item := range items {
				var k struct{ Type string }
				if strings.HasPrefix(item, "k:") && json.Unmarshal([]byte(item[2:]), &k) == nil {
					conds = append(conds, k.Type)
				}
			}
		default:
			fields = append(fields, strings.TrimPrefix(key, "f:"))
		}
	}
	sort.Strings(fields)
	sort.Strings(conds)
	return fields, conds, nil
}
