//go:build frameworks

package frameworks

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/node"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestPreemption: with checkpoint.onPreemption, rank 0's pod is evicted while it trains; the real
// PyTorch trainers (the DDP example and the default runner) answer SIGTERM with a checkpoint of their last
// consistent step (checkpoint-epoch-<E>-step-<S>), the restart is not counted, the next attempt resumes
// from that checkpoint (skipping the batches it holds) and the ranks still end with the same weights.
func TestPreemption(t *testing.T) {
	for _, tc := range []struct {
		name string
		job  func(*tjtest.TJ) *tjtest.TJ
		// midEpoch: the trainer checkpoints mid-epoch (checkpoint-epoch-<E>-step-<S>) and logs its resume;
		// XGBoost checkpoints the boosting rounds done (a round is its epoch, with no partial state).
		midEpoch bool
	}{{
		name: "pytorch_ddp.py", midEpoch: true,
		job: func(b *tjtest.TJ) *tjtest.TJ {
			return b.Epochs(3).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Image = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
				tj.Spec.Command = []string{"python3", "examples/python/pytorch_ddp.py", "--samples=60000", "--epoch-delay=0.2"}
			})
		},
	}, {
		name: "default runner", midEpoch: true,
		job: func(b *tjtest.TJ) *tjtest.TJ {
			return b.NoCommand().Epochs(2).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Model, tj.Spec.Dataset = "cnn", "synthetic"
				tj.Spec.Hyperparameters.AdditionalParams = map[string]string{"samples": "8192", "epochDelaySeconds": "0.2"}
			})
		},
	}, {
		name: "xgboost_dist.py",
		job: func(b *tjtest.TJ) *tjtest.TJ {
			return b.Framework(mlv1.FrameworkXGBoost).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Image = "python:3.12-slim"
				tj.Spec.Command = []string{"python3", "examples/python/xgboost_dist.py", "--rounds=12", "--round-delay=0.5"}
			})
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			create(t, tc.job(tjtest.NewTJ(ns, "preempted").Workers(2).GPUs(0)).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Frequency: ptr.To[int32](5), OnPreemption: true,
					PreemptionGraceSeconds: ptr.To[int32](60)}
			}).Obj())
			stacktest.Eventually(t, 3*time.Minute, "rank 0 training", func() error {
				tj := &mlv1.TrainingJob{}
				if err := stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "preempted"}, tj); err != nil {
					return err
				}
				if tj.Status.State != mlv1.StateRunning || tj.Status.CurrentEpoch < 1 && tj.Status.CurrentStep < 20 {
					return fmt.Errorf("%s at epoch %d step %d", tj.Status.State, tj.Status.CurrentEpoch, tj.Status.CurrentStep)
				}
				return nil
			})
			stacktest.EvictRank(t, stack.Client, ns, "preempted", 0)
			done := waitFinished(t, ns, "preempted", 5*time.Minute)
			assertResumedAtPreemption(t, done, tc.midEpoch)
			assertSameChecksum(t, rankLogs(t, ns, "preempted", 2), 2)
		})
	}
}

// assertResumedAtPreemption: one restart, not counted, and status.checkpoint says the attempt resumed from
// the checkpoint rank 0's logs (of both attempts) say it wrote at SIGTERM (midEpoch: one written mid-epoch,
// and the resume logged with its step).
func assertResumedAtPreemption(t *testing.T, tj *mlv1.TrainingJob, midEpoch bool) {
	t.Helper()
	c := tj.Status.Checkpoint
	if tj.Status.RestartCount != 0 || tj.Status.Attempt != 1 || c == nil || c.ResumedFrom == "" ||
		midEpoch && !strings.Contains(c.ResumedFromMessage, "resumed from the checkpoint written at preemption, epoch") {
		t.Fatalf("restartCount %d, attempt %d, status.checkpoint %+v: "+
			"want an uncounted restart (attempt 1) resuming from the checkpoint written at preemption",
			tj.Status.RestartCount, tj.Status.Attempt, c)
	}
	all := node.AllLogs(stack.DataRoot, tj.Namespace, tj.Name+"-worker-0-*", names.ContainerName)
	base := regexp.QuoteMeta(path.Base(c.ResumedFrom))
	want := []string{`SIGTERM: checkpoint \S*/` + base + ` written at preemption`}
	if midEpoch {
		want = append(want, `resumed from \S*/`+base+` \(epoch \d+, step [1-9]`)
	}
	for _, re := range want {
		if !regexp.MustCompile(re).MatchString(all) {
			t.Errorf("rank 0's logs do not match %q:\n%s", re, all)
		}
	}
}
