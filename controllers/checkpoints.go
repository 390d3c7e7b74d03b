package controllers

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
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

// The StatusController writes RESUME_FROM into the job's ConfigMap as soon as it reads a newer checkpoint.
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;update

// ConditionCheckpointStorage is True while rank 0's checkpoint agent reaches the storage; False names
// the storage error (unreachable, credentials) without failing the job.
const ConditionCheckpointStorage = "CheckpointStorageReady"

// observeCheckpoints reads rank 0's checkpoint agent into status.checkpoint and the checkpoint series, and
// moves RESUME_FROM with it. An agent that does not answer yet leaves all as they are.
func (r *StatusReconciler) observeCheckpoints(ctx context.Context, tj *mlv1.TrainingJob, ip string, st *mlv1.TrainingJobStatus, s *scrapeState, now time.Time) {
	var a checkpoint.AgentStatus
	err := r.get(ctx, ip, builders.AgentPort, "/status", func(body io.Reader) error { return json.NewDecoder(body).Decode(&a) })
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
	r.syncResumeFrom(ctx, tj, st, ip)
}

// syncResumeFrom brings the ConfigMap's RESUME_FROM to the newest checkpoint in st, then tells rank 0's
// agent what it names now (PUT /resume-from), so the agent may rotate away what no starting worker can be
// told any more. The agent protects every checkpoint it reported until then; telling it at once keeps
// that extra protection to moments, so rotation keeps exactly `retention` checkpoints. Any failure here
// leaves the protection in place until the next read.
func (r *StatusReconciler) syncResumeFrom(ctx context.Context, tj *mlv1.TrainingJob, st *mlv1.TrainingJobStatus, ip string) {
	cm := &corev1.ConfigMap{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: tj.Namespace, Name: builders.ConfigMapName(tj)}, cm); err != nil {
		return
	}
	next := &mlv1.TrainingJob{Spec: tj.Spec, Status: *st}
	if want := builders.ResumeFrom(next); want != "" && cm.Data[builders.ResumeFromKey] != want {
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[builders.ResumeFromKey] = want
		if err := r.Update(ctx, cm); err != nil {
			return // a conflict or a stale cache: the next read tries again
		}
	}
	path := "/resume-from?" + url.Values{"uri": {cm.Data[builders.ResumeFromKey]}}.Encode()
	_ = r.call(ctx, http.MethodPut, ip, builders.AgentPort, path, func(io.Reader) error { return nil })
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
