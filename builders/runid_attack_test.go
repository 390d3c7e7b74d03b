package builders

import (
	"strings"
	"testing"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestAttackRunIDOutOfTheJobsRoot: status.runID is "set once to the job's UID", but the CRD only bounds its
// length (64) and RunID takes whatever the status holds. A status edit (kubectl edit --subresource=status,
// a GitOps tool restoring an old status, a hostile script) that sets it to a relative path moves the job's
// checkpoints, RESUME_FROM's root and the agent's rotation into another team's directory (the CRD's pattern
// refuses one; an API server that does not check it must not either). One that clears it moves the run
// back to <ns>/<name>, the layout of a job started before run IDs: that is kept, by design.
func TestAttackRunIDOutOfTheJobsRoot(t *testing.T) {
	tj := tjtest.NewTJ("team-a", "train").Checkpoints(&mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "shared"}).Obj()
	tj.UID = "0b9c6f7e-3f47-4a8e-9d3c-2f1d9a7b5c11"
	tj.Status.State = mlv1.StateRunning
	for _, runID := range []string{"../../team-b/secret-model/" + string(tj.UID), "../..", "a/b", "."} {
		tj.Status.RunID = runID
		root, uri := CheckpointRoot(tj), CheckpointURI(tj)
		if len(runID) > 64 {
			t.Fatalf("runID %q over the CRD's maxLength", runID)
		}
		if !strings.HasPrefix(root, NameRoot(tj)+"/") {
			t.Errorf("status.runID %q (%d chars): checkpoint root %q, URI %q, outside %s/<run>",
				runID, len(runID), root, uri, NameRoot(tj))
		}
	}
}
