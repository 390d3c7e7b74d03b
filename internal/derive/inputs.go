package derive

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/inputs"
	"github.com/trainingjob-operator/trainingjob-operator/internal/text"
)

// Reasons of the InputsReady condition.
const (
	ReasonFetching     = "Fetching"
	ReasonFetched      = "Fetched"
	ReasonReused       = "Reused"
	ReasonInputsFailed = "InputsFailed"
)

// applyInputs keeps status.inputs and InputsReady from rank 0's fetch-inputs init container of the
// current attempt: Fetching while it runs, its reports once it ended well, the source's error when it
// failed (which fails the run: inputsFailedPhase, and exitFailure when the Job failed first).
func applyInputs(tj *mlv1.TrainingJob, st *mlv1.TrainingJobStatus, obs Observed, now metav1.Time) {
	fetched := builders.FetchedInputs(tj)
	if len(fetched) == 0 {
		return
	}
	_, cs := Rank0Fetcher(obs.Pods)
	switch {
	case obs.InputsClaim != nil && obs.InputsClaim.Status.Phase != corev1.ClaimBound && cs == nil:
		reason, msg := notBound(obs.InputsClaim, obs.InputsClaimEvent)
		if len(obs.InputsClaim.Spec.AccessModes) > 0 && obs.InputsClaim.Spec.AccessModes[0] == corev1.ReadWriteMany {
			msg += "; with more than one worker the input cache needs a StorageClass that offers ReadWriteMany " +
				"(inputs.storageClassName), or inputs.cache: PerNode where the operator keeps a cache on each node"
		}
		set(st, mlv1.ConditionInputsReady, false, reason, "input cache "+msg, now)
	case fetchFailure(cs) != "":
		set(st, mlv1.ConditionInputsReady, false, ReasonInputsFailed, text.Cut(fetchFailure(cs), 1024), now)
	case cs == nil || cs.State.Waiting != nil:
		if meta.FindStatusCondition(st.Conditions, mlv1.ConditionInputsReady) == nil {
			set(st, mlv1.ConditionInputsReady, false, ReasonFetching, "waiting for rank 0 to fetch "+describeSources(fetched), now)
		}
	case cs.State.Running != nil:
		set(st, mlv1.ConditionInputsReady, false, ReasonFetching,
			"rank 0 is "+FetchingText(fetched, obs.InputsProgress)+" into the input cache", now)
		if len(obs.InputsProgress) > 0 {
			st.Inputs = nil
			for _, p := range obs.InputsProgress {
				st.Inputs = append(st.Inputs, mlv1.InputStatus{Name: p.Name, Source: p.Source, Bytes: p.Total, FetchedBytes: p.Done})
			}
		}
	case cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0:
		applyReports(st, cs.State.Terminated, now)
	}
}

// applyReports turns the fetcher's reports (its termination message) into status.inputs and InputsReady.
func applyReports(st *mlv1.TrainingJobStatus, t *corev1.ContainerStateTerminated, now metav1.Time) {
	var reps []inputs.Report
	if err := json.Unmarshal([]byte(t.Message), &reps); err != nil {
		return // not a report: nothing to say yet
	}
	st.Inputs = nil
	var parts []string
	reason := ReasonReused
	for _, r := range reps {
		st.Inputs = append(st.Inputs, mlv1.InputStatus{Name: r.Name, Source: r.Source, Bytes: r.Bytes, Files: int32(r.Files),
			FetchedBytes: r.Fetched, ReadyTime: &metav1.Time{Time: t.FinishedAt.Time}})
		if r.Fetched > 0 {
			reason = ReasonFetched
		}
		parts = append(parts, fmt.Sprintf("%s %s: %s in %d files (%s read)", r.Name, r.Source, bytesText(r.Bytes), r.Files, bytesText(r.Fetched)))
	}
	set(st, mlv1.ConditionInputsReady, true, reason, strings.Join(parts, "; "), now)
}

// Rank0Fetcher returns rank 0's pod and its fetch-inputs status, nils when there is none.
func Rank0Fetcher(pods []corev1.Pod) (*corev1.Pod, *corev1.ContainerStatus) {
	for i := range pods {
		if pods[i].Labels[names.RankLabel] != "0" || !pods[i].DeletionTimestamp.IsZero() {
			continue
		}
		for j := range pods[i].Status.InitContainerStatuses {
			if cs := &pods[i].Status.InitContainerStatuses[j]; cs.Name == names.InputsContainerName {
				return &pods[i], cs
			}
		}
	}
	return nil, nil
}

// FetchingText returns what rank 0 fetches, with the bytes so far when it reported them: "fetching dataset
// s3://datasets/squad 1.2 GiB of 3.4 GiB".
func FetchingText(fetched []builders.Input, progress []inputs.Status) string {
	if len(progress) == 0 {
		return "fetching " + describeSources(fetched)
	}
	var parts []string
	for _, p := range progress {
		if p.Done >= p.Total && p.Total > 0 {
			parts = append(parts, fmt.Sprintf("%s %s %s (done)", p.Name, p.Source, bytesText(p.Total)))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s %s of %s", p.Name, p.Source, bytesText(p.Done), bytesText(p.Total)))
	}
	return "fetching " + strings.Join(parts, ", ")
}

func describeSources(in []builders.Input) string {
	var parts []string
	for _, i := range in {
		parts = append(parts, i.Name+" "+i.Source.URI)
	}
	return strings.Join(parts, " and ")
}

// bytesText returns n bytes as a size for people: 1.2 GiB, 340 MiB, 12 KiB, 800 B.
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// fetchFailure returns what rank 0's fetcher said when it ended with an error of its own (exit codes 1-127: a
// source that cannot be fetched, or transient errors that outlasted the retries), now or in its last run
// (restartPolicy OnFailure restarts it in place); "" when it did not.
func fetchFailure(cs *corev1.ContainerStatus) string {
	if cs == nil {
		return ""
	}
	for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
		if t != nil && t.ExitCode > 0 && t.ExitCode < 128 {
			return strings.TrimSpace(t.Message)
		}
	}
	return ""
}

// inputsFailedPhase returns the Failed phase once rank 0's fetcher failed (false before): with restartPolicy
// OnFailure the kubelet would otherwise run it again and again (the Job fails only at its backoffLimit)
// while nothing trains.
func inputsFailedPhase(obs Observed) (phase, bool) {
	_, cs := Rank0Fetcher(obs.Pods)
	if msg := fetchFailure(cs); msg != "" {
		return phase{mlv1.StateFailed, ReasonInputsFailed, "a model or dataset source cannot be fetched: rank 0's fetch-inputs: " + msg}, true
	}
	return phase{}, false
}

// InputsFault returns the InputsReady reason when it names a fault the input cache's claim waits on (a
// provisioner's warning), "" otherwise: a fetch's own failure is told by the Failed transition.
func InputsFault(st mlv1.TrainingJobStatus) string {
	c := meta.FindStatusCondition(st.Conditions, mlv1.ConditionInputsReady)
	if c == nil || c.Status == metav1.ConditionTrue || c.Reason == ReasonClaimPending || c.Reason == ReasonFetching ||
		c.Reason == ReasonInputsFailed {
		return ""
	}
	return c.Reason
}
