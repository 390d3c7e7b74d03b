package derive

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/text"
)

// Reasons of the CheckpointStorageReady condition.
const (
	ReasonSynced           = "Synced"
	ReasonStorageError     = "StorageError"
	ReasonAgentUnreachable = "AgentUnreachable"
)

// ReasonEarlierRuns is the reason of the event that says a new run found earlier runs' checkpoints.
const ReasonEarlierRuns = "EarlierRunsFound"

// ApplyAgentError sets CheckpointStorageReady to Unknown with why the agent cannot be read, until the
// agent first answers. Once it has reported, a failed read (the pod stopping, a restart) leaves its last
// report in place.
func ApplyAgentError(st *mlv1.TrainingJobStatus, err error, now metav1.Time) {
	if c := meta.FindStatusCondition(st.Conditions, mlv1.ConditionCheckpointStorageReady); c != nil && c.Status != metav1.ConditionUnknown {
		return
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: mlv1.ConditionCheckpointStorageReady, Status: metav1.ConditionUnknown,
		Reason: ReasonAgentUnreachable, Message: text.Cut("rank 0's checkpoint agent has not answered yet: "+err.Error(), 1024),
		ObservedGeneration: st.ObservedGeneration, LastTransitionTime: now})
}

// Place is where a job's checkpoints are, which the agents' reports (the pods' word) must name.
type Place struct {
	// NameRoot is where the runs of the job's name live in its store (builders.NameRoot): an earlier run
	// a report names must be one of them.
	NameRoot string
	// RunRoot is where this run's checkpoints live in its store (builders.CheckpointRoot): the latest
	// checkpoint a report names must be directly in it.
	RunRoot string
	// Store is the object store's scheme and bucket a report names first (builders.CheckpointStore),
	// "" for mounted storage.
	Store string
	// Mount is where mounted storage is in a worker (builders.CheckpointMountPath): a report names
	// <Mount>/<RunRoot>/checkpoint-.... MountRoots are host directories a process node mounts volumes
	// from (the local stack's): there the path begins under one of them.
	Mount      string
	MountRoots []string
}

// ApplyCheckpoints puts an agent's report into the status. It is pure. A report whose latest checkpoint
// is not one of the run's own (InRun) is not taken: a pod that is not the job's, or a trainer that
// wrote elsewhere, does not choose what the workers resume from.
func ApplyCheckpoints(st *mlv1.TrainingJobStatus, place Place, a agentapi.Status, now metav1.Time) {
	if a.Time.IsZero() || a.Latest != "" && !InRun(a.Latest, place) {
		return // the agent has not synced yet, or names another run's checkpoint
	}
	nameRoot := place.NameRoot
	if a.Error != "" {
		// The error comes from the job's storage server, as the pod's agent tells it: bounded, it fits the
		// condition and the event's note (1 KiB), which then say the same.
		set(st, mlv1.ConditionCheckpointStorageReady, false, ReasonStorageError, text.Cut(a.Error, 1024), now)
	} else {
		set(st, mlv1.ConditionCheckpointStorageReady, true, ReasonSynced, "rank 0's checkpoint agent lists and rotates the checkpoints", now)
	}
	earlier := earlierRuns(a.EarlierRuns, nameRoot)
	if a.Latest == "" && len(earlier) == 0 && st.Checkpoint == nil {
		return
	}
	c := &mlv1.CheckpointStatus{Latest: a.Latest, LatestEpoch: int32(a.LatestEpoch), Count: int32(a.Count), SizeBytes: a.SizeBytes,
		EarlierRuns: earlier}
	if o := st.Checkpoint; o != nil {
		c.ResumedFrom, c.ResumedFromMessage = o.ResumedFrom, o.ResumedFromMessage
		c.ResumedFromTime, c.ResumedAttempt = o.ResumedFromTime, o.ResumedAttempt
		if len(o.EarlierRuns) > 0 {
			c.EarlierRuns = o.EarlierRuns // found once per run: an agent's later word does not change them
		}
	}
	if !a.LastTime.IsZero() {
		c.LastTime = &metav1.MicroTime{Time: a.LastTime.Truncate(time.Microsecond)}
	}
	st.Checkpoint = c
}

// maxEarlierRun bounds an earlier run's checkpoint in the status (the agent's report is the pod's word).
const maxEarlierRun = 1024

// earlierRuns returns the checkpoints of the earlier runs an agent reported, as the status holds them: at
// most checkpoint.MaxEarlierRuns, each a checkpoint's path or URI of valid UTF-8 within maxEarlierRun
// bytes; others are left out.
func earlierRuns(runs []agentapi.EarlierRun, nameRoot string) []string {
	var out []string
	for _, r := range runs {
		if len(r.Latest) <= maxEarlierRun && utf8.ValidString(r.Latest) && underName(r.Latest, nameRoot) &&
			len(out) < maxEarlierRuns && !slices.Contains(out, r.Latest) {
			out = append(out, r.Latest)
		}
	}
	return out
}

// InRun reports whether uri names a checkpoint directly in the run's directory: <store>/<run
// root>/checkpoint-<position>[/] in an object store, <mount>/<run root>/checkpoint-<position>[/] on
// mounted storage (mountedAt); valid UTF-8 of at most maxEarlierRun bytes, with no control character and no "." or
// ".." element.
func InRun(uri string, place Place) bool {
	root := strings.Trim(place.RunRoot, "/")
	if root == "" || len(uri) > maxEarlierRun || !utf8.ValidString(uri) || strings.ContainsFunc(uri, unicode.IsControl) ||
		strings.Contains(uri+"/", "/../") || strings.Contains(uri+"/", "/./") {
		return false
	}
	var rest string
	if place.Store != "" {
		var ok bool
		if rest, ok = strings.CutPrefix(uri, strings.TrimRight(place.Store, "/")+"/"+root+"/"); !ok {
			return false
		}
	} else {
		i := strings.Index(uri, "/"+root+"/")
		if i < 0 || strings.Contains(uri, "//") || !mountedAt(uri[:i], place) {
			return false
		}
		rest = uri[i+len(root)+2:]
	}
	rest = strings.TrimSuffix(rest, "/")
	_, ok := agentapi.PositionOf(rest)
	return ok && !strings.Contains(rest, "/")
}

// mountedAt reports whether dir is where the run's mounted storage is: the worker's mount path, or a
// directory under one of a process node's roots. A path elsewhere in the pod (another volume, a shared
// claim's other job) is not the run's, whatever follows it.
func mountedAt(dir string, place Place) bool {
	if place.Mount != "" && dir == strings.TrimRight(place.Mount, "/") {
		return true
	}
	for _, r := range place.MountRoots {
		if r = strings.TrimRight(r, "/"); r != "" && strings.HasPrefix(dir, r+"/") {
			return true
		}
	}
	return false
}

// underName reports whether uri names a checkpoint of a run of the job's name: .../<nameRoot>/checkpoint-...
// or .../<nameRoot>/<run>/checkpoint-..., with no control character and no "." or ".." element (the agent
// says where it is mounted or its bucket; what follows is the job's).
func underName(uri, nameRoot string) bool {
	if nameRoot == "" || strings.ContainsFunc(uri, unicode.IsControl) {
		return false
	}
	i := strings.LastIndex(uri, "/"+strings.Trim(nameRoot, "/")+"/")
	if i < 0 {
		return false
	}
	rest := strings.Split(uri[i+len(nameRoot)+2:], "/")
	if len(rest) > 2 || slices.ContainsFunc(rest, func(e string) bool { return e == "" || e == "." || e == ".." }) {
		return false
	}
	_, ok := agentapi.PositionOf(rest[len(rest)-1])
	return ok && !strings.Contains(uri, "/../") && !strings.Contains(uri, "/./")
}

// maxEarlierRuns is status.checkpoint.earlierRuns' bound (checkpoint.MaxEarlierRuns).
const maxEarlierRuns = 3

// EarlierRunsFound returns the message of the event that says a new run found earlier runs' checkpoints
// under its name, and whether there is one to say: when status.checkpoint.earlierRuns first names one.
func EarlierRunsFound(tj *mlv1.TrainingJob, old, st mlv1.TrainingJobStatus) (string, bool) {
	if old.Checkpoint != nil && len(old.Checkpoint.EarlierRuns) > 0 || st.Checkpoint == nil || len(st.Checkpoint.EarlierRuns) == 0 {
		return "", false
	}
	runs := st.Checkpoint.EarlierRuns
	msg := fmt.Sprintf("checkpoints of %d earlier run(s) of this name are kept; the newest: %s", len(runs), runs[0])
	if c := tj.Spec.Checkpoint; c != nil && c.ResumeFrom != "" {
		from := c.ResumeFrom
		return msg + "; this run resumes from spec.checkpoint.resumeFrom " + from, true
	}
	return msg + "; this run starts fresh: to continue one, create the job with spec.checkpoint.resumeFrom naming it", true
}

// FinalReport returns the report a stopped checkpoint agent of rank 0 left as its termination message (its
// last sync, after the trainer ended), the newest among the pods; ok is false when there is none. It
// covers what cannot be read from a running agent any more: the end of a run or of an attempt.
func FinalReport(pods []corev1.Pod) (agentapi.Status, bool) {
	var last *corev1.ContainerStateTerminated
	for i := range pods {
		if pods[i].Labels[names.RankLabel] != "0" {
			continue
		}
		for _, cs := range pods[i].Status.InitContainerStatuses {
			t := cs.State.Terminated
			if cs.Name == names.AgentContainerName && t != nil && t.Message != "" && (last == nil || last.FinishedAt.Before(&t.FinishedAt)) {
				last = t
			}
		}
	}
	var a agentapi.Status
	if last == nil || json.Unmarshal([]byte(last.Message), &a) != nil {
		return a, false
	}
	return a, true
}

// ApplyFinalReport applies a stopped agent's final report unless the status already knows a newer
// checkpoint.
func ApplyFinalReport(st *mlv1.TrainingJobStatus, place Place, a agentapi.Status, now metav1.Time) {
	if st.Checkpoint != nil &&
		(int32(a.LatestEpoch) < st.Checkpoint.LatestEpoch || agentapi.Newer(st.Checkpoint.Latest, a.Latest) && a.Latest != "") {
		return
	}
	ApplyCheckpoints(st, place, a, now)
}

// ApplyResumeFrom restores status.checkpoint from RESUME_FROM when the ConfigMap names a checkpoint
// newer than the status knows (the status write that should have come with it was lost): RESUME_FROM is
// only ever set from the status, so what it names existed and was the newest. fromSpec, what RESUME_FROM
// is before any checkpoint of the job (spec.checkpoint.resumeFrom), is not one of the job's own, nor is
// anything outside the run's directory (InRun: the ConfigMap is in the tenant's namespace).
func ApplyResumeFrom(st *mlv1.TrainingJobStatus, resumeFrom, fromSpec string, place Place) {
	epoch, ok := agentapi.EpochOf(resumeFrom)
	if !ok || resumeFrom == fromSpec || !InRun(resumeFrom, place) ||
		st.Checkpoint != nil && !agentapi.Newer(resumeFrom, st.Checkpoint.Latest) {
		return
	}
	c := checkpointCopy(st)
	c.Latest, c.LatestEpoch = resumeFrom, int32(epoch)
	st.Checkpoint = c
}

// checkpointCopy returns a copy of status.checkpoint to change, empty when there is none.
func checkpointCopy(st *mlv1.TrainingJobStatus) *mlv1.CheckpointStatus {
	if st.Checkpoint == nil {
		return &mlv1.CheckpointStatus{}
	}
	return st.Checkpoint.DeepCopy()
}

// Increase returns how much a cumulative count of the agent grew; a restarted agent counts from 0 again.
func Increase(prev, now int) int {
	if now < prev {
		return now
	}
	return now - prev
}

// ApplyResumed records what the current attempt's workers resumed from (RESUME_FROM as settled for the
// attempt), for which attempt, and says what it is: a checkpoint written mid-epoch is one written at
// preemption. When it is the newest checkpoint the status knows, its writing time is kept
// (resumedFromTime: the goodput's lost work is measured from it), also once newer ones are written.
func ApplyResumed(st *mlv1.TrainingJobStatus, from string) {
	if from == "" && st.Checkpoint == nil {
		return
	}
	c := checkpointCopy(st)
	if c.ResumedFrom != from || c.ResumedAttempt != st.Attempt {
		c.ResumedFromTime = nil
	}
	c.ResumedFrom, c.ResumedFromMessage, c.ResumedAttempt = from, ResumedMessage(from), st.Attempt
	if c.ResumedFromTime == nil && from != "" && from == c.Latest && c.LastTime != nil {
		c.ResumedFromTime = c.LastTime.DeepCopy()
	}
	st.Checkpoint = c
}

// ResumedMessage returns a description of a checkpoint the workers resumed from; "" for none.
func ResumedMessage(from string) string {
	p, ok := agentapi.PositionOf(from)
	switch {
	case from == "":
		return ""
	case !ok:
		return "resumed from " + from
	case p.Step > 0:
		return fmt.Sprintf("resumed from the checkpoint written at preemption, epoch %d step %d", p.Epoch+1, p.Step)
	}
	return fmt.Sprintf("resumed from the checkpoint of epoch %d", p.Epoch)
}
