package controllers

import (
	"context"
	"encoding/json"
	"io"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// ConditionCheckpointStorage is True while rank 0's checkpoint agent reaches the storage; False names
// the storage error (unreachable, credentials) without failing the job.
const ConditionCheckpointStorage = "CheckpointStorageReady"

// observeCheckpoints reads rank 0's checkpoint agent into status.checkpoint and the checkpoint series. An
// agent that does not answer yet leaves both as they are. The request tells the agent what RESUME_FROM
// names now (the ConfigMap as this manager sees it, never ahead of it), so the agent knows which older
// checkpoints no restarting worker can be told to resume from any more.
func (r *StatusReconciler) observeCheckpoints(ctx context.Context, tj *mlv1.TrainingJob, ip string, st *mlv1.TrainingJobStatus, s *scrapeState, now time.Time) {
	cm := &corev1.ConfigMap{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: tj.Namespace, Name: builders.ConfigMapName(tj)}, cm); err != nil {
		return // acknowledging nothing is never unsafe, but there is no ConfigMap to be ahead of yet
	}
	path := "/status?" + url.Values{"resumeFrom": {cm.Data[builders.ResumeFromKey]}}.Encode()
	var a checkpoint.AgentStatus
	err := r.get(ctx, ip, builders.AgentPort, path, func(body io.Reader) error { return json.NewDecoder(body).Decode(&a) })
	if err != nil {
		return
	}
	ApplyCheckpoints(st, a, metav1.NewTime(now))
	l := []string{tj.Namespace, tj.Name}
	metrics.CheckpointSize.WithLabelValues(l...).Set(float64(a.SizeBytes))
	r.mu.Lock()
	prev := s.agent
	s.agent = a
	r.mu.Unlock()
	metrics.CheckpointsCreated.WithLabelValues(l...).Add(float64(increase(prev.Created, a.Created)))
	metrics.CheckpointsDeleted.WithLabelValues(l...).Add(float64(increase(prev.Deleted, a.Deleted)))
}

// ApplyCheckpoints puts an agent's report into the status. It is pure.
func ApplyCheckpoints(st *mlv1.TrainingJobStatus, a checkpoint.AgentStatus, now metav1.Time) {
	if a.Time.IsZero() {
		return // the agent has not synced yet
	}
	if a.Error != "" {
		set(st, ConditionCheckpointStorage, false, "StorageError", a.Error, now)
	} else {
		set(st, ConditionCheckpointStorage, true, "Synced", "rank 0's checkpoint agent lists and rotates the checkpoints", now)
	}
	if a.Latest == "" && st.Checkpoint == nil {
		return
	}
	c := &mlv1.CheckpointStatus{Latest: a.Latest, LatestEpoch: int32(a.LatestEpoch), Count: int32(a.Count), SizeBytes: a.SizeBytes}
	if !a.LastTime.IsZero() {
		c.LastTime = &metav1.Time{Time: a.LastTime.Truncate(time.Second)}
	}
	st.Checkpoint = c
}

// applyFinalCheckpoints applies the report a stopped checkpoint agent of rank 0 left as its termination
// message (its last sync, after the trainer ended), unless the status already knows a newer checkpoint.
// It covers what the StatusController cannot read any more: the end of a run.
func applyFinalCheckpoints(st *mlv1.TrainingJobStatus, pods []corev1.Pod, now metav1.Time) {
	var last *corev1.ContainerStateTerminated
	for i := range pods {
		if pods[i].Labels[builders.RankLabel] != "0" {
			continue
		}
		for _, cs := range pods[i].Status.InitContainerStatuses {
			t := cs.State.Terminated
			if cs.Name == builders.AgentContainerName && t != nil && t.Message != "" && (last == nil || last.FinishedAt.Before(&t.FinishedAt)) {
				last = t
			}
		}
	}
	var a checkpoint.AgentStatus
	if last == nil || json.Unmarshal([]byte(last.Message), &a) != nil {
		return
	}
	if st.Checkpoint != nil && int32(a.LatestEpoch) < st.Checkpoint.LatestEpoch {
		return
	}
	ApplyCheckpoints(st, a, now)
}

// increase is how much a cumulative count of the agent grew; a restarted agent counts from 0 again.
func increase(prev, now int) int {
	if now < prev {
		return now
	}
	return now - prev
}
