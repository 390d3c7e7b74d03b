package derive

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// Queue is what the JobController observed of a queued job's Kueue Workload (docs/kueue.md).
type Queue struct {
	// Name is the LocalQueue, Workload the Workload's name.
	Name, Workload string
	// Admission is Kueue's admission while the Workload is admitted and not evicted; nil otherwise: no
	// worker may run.
	Admission *builders.Admission
	// Pending is Kueue's word on why the Workload waits (its QuotaReserved condition's message).
	Pending string
	// Evicted is Kueue's Evicted condition while the workers are being stopped for it (a preemption, a
	// deactivation, a timeout); the quota is released once they are gone.
	Evicted *metav1.Condition
	// Preempted is the Workload's Preempted condition when its last eviction was a preemption and it has
	// not been admitted since: its reason says where (InClusterQueue, InCohortReclamation, ...).
	Preempted *metav1.Condition
}

// Kueue's reasons the status repeats.
const (
	ReasonQueued    = "Queued"
	ReasonPreempted = "Preempted"
	ReasonEvicted   = "Evicted"
)

// queuePhase returns the phase of a queued job that Kueue has not admitted, or whose admission Kueue took
// back: it waits Suspended and says why in Kueue's words.
func queuePhase(q *Queue) phase {
	switch {
	case q.Evicted != nil && q.Preempted != nil:
		return phase{mlv1.StateSuspended, ReasonPreempted,
			fmt.Sprintf("%s: %s; stopping the workers (a checkpoint at SIGTERM), then queued again in %q",
				q.Preempted.Reason, q.Preempted.Message, q.Name)}
	case q.Evicted != nil:
		return phase{mlv1.StateSuspended, ReasonEvicted,
			fmt.Sprintf("Kueue evicted the workload (%s: %s); stopping the workers, then queued again in %q",
				q.Evicted.Reason, q.Evicted.Message, q.Name)}
	case q.Preempted != nil:
		return phase{mlv1.StateSuspended, ReasonPreempted, fmt.Sprintf("%s: %s; waiting in queue %q to be admitted again%s",
			q.Preempted.Reason, q.Preempted.Message, q.Name, pendingSuffix(q.Pending))}
	}
	return phase{mlv1.StateSuspended, ReasonQueued,
		fmt.Sprintf("waiting for queue %q (Kueue) to admit workload %s%s", q.Name, q.Workload, pendingSuffix(q.Pending))}
}

func pendingSuffix(p string) string {
	if p == "" {
		return ""
	}
	return ": " + p
}

// waitsForQueue reports whether the job is queued and Kueue does not let its workers run now.
func waitsForQueue(obs Observed) bool { return obs.Queue != nil && obs.Queue.Admission == nil }
