package integration

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestCheckpointLayoutAcrossUpgrade: a new job's checkpoints live under its run ID (its UID, recorded in
// status.runID), so a job created again under the name starts fresh; a job an operator before run IDs
// started (its status written, no runID) keeps <namespace>/<name>, where its checkpoints are, after the
// upgrade, and the agent looks for earlier runs only under a run ID.
func TestCheckpointLayoutAcrossUpgrade(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	checkpointed := func(name string) *mlv1.TrainingJob {
		return tjtest.NewTJ(ns, name).Workers(1).GPUs(0).Image("busybox:1.36", "train").With(func(tj *mlv1.TrainingJob) {
			tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true),
				Storage: &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "checkpoints"}}
		}).Obj()
	}
	// The job an older operator started: created and its status written before this operator runs.
	old := checkpointed("before")
	if err := env.Client.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the older operator's status", func(ctx context.Context) error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(old), old); err != nil {
			return err
		}
		old.Status.State = mlv1.StatePending
		return env.Client.Status().Update(ctx, old)
	})
	startOperator(t, ns)
	fresh := checkpointed("after")
	if err := env.Client.Create(ctx, fresh); err != nil {
		t.Fatal(err)
	}

	type layout struct{ RunID, Dir, EarlierRunsUnder string }
	observed := func(tj *mlv1.TrainingJob) layout {
		job := getJob(t, tj)
		var got layout
		eventually(t, "status.runID written", func(ctx context.Context) error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tj), tj); err != nil {
				return err
			}
			got.RunID = tj.Status.RunID
			if tj.Status.State == mlv1.StatePending && tj.Name == "after" && got.RunID == "" {
				return errors.New("no status.runID yet")
			}
			return nil
		})
		pod := job.Spec.Template.Spec
		for _, c := range pod.Containers {
			if c.Name == names.ContainerName {
				got.Dir = envValue(c.Env, "CHECKPOINT_DIR")
			}
		}
		for _, c := range pod.InitContainers {
			if c.Name == names.AgentContainerName {
				got.EarlierRunsUnder = argValue(c, "--earlier-runs-under=")
			}
		}
		return got
	}
	tests := []struct {
		name string
		tj   *mlv1.TrainingJob
		want layout
	}{
		{name: "started before run IDs", tj: old, want: layout{Dir: "/checkpoints/" + ns + "/before"}},
		{name: "created after", tj: fresh, want: layout{RunID: string(fresh.UID), Dir: "/checkpoints/" + ns + "/after/" + string(fresh.UID),
			EarlierRunsUnder: ns + "/after"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, observed(tt.tj)); diff != "" {
				t.Errorf("layout (-want +got):\n%s", diff)
			}
		})
	}
}

func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func argValue(c corev1.Container, prefix string) string {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, prefix); ok {
			return v
		}
	}
	return ""
}
