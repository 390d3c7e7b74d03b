package derive

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// ReasonClaimPending is the CheckpointClaimBound reason while the claim waits and nothing says it cannot
// bind (the volume is being provisioned, or binding waits for the first pod).
const ReasonClaimPending = "Pending"

// SetClaimCondition sets CheckpointClaimBound from the observed claim: True once bound; else False with
// the reason of the claim's newest event when it reports a fault (a Warning, or the binder's
// FailedBinding: no volume and no StorageClass), and its text. Unobserved, the condition is kept as is.
func SetClaimCondition(st *mlv1.TrainingJobStatus, obs Observed, now metav1.Time) {
	c := obs.Claim
	if c == nil {
		return
	}
	if c.Status.Phase == corev1.ClaimBound {
		set(st, mlv1.ConditionCheckpointClaimBound, true, "Bound", fmt.Sprintf("claim %s is bound to volume %s", c.Name, c.Spec.VolumeName), now)
		return
	}
	reason, msg := notBound(c, obs.ClaimEvent)
	set(st, mlv1.ConditionCheckpointClaimBound, false, reason, msg, now)
}

// notBound returns why a claim is not bound: its newest event's reason when that is a warning or
// FailedBinding (else Pending), and a message naming the claim, what it asks for and the event.
func notBound(c *corev1.PersistentVolumeClaim, e *corev1.Event) (reason, msg string) {
	reason, why := ReasonClaimPending, "no event explains it yet"
	if e != nil {
		why = e.Reason + ": " + strings.TrimSpace(e.Message)
		if e.Type == corev1.EventTypeWarning || e.Reason == "FailedBinding" {
			reason = e.Reason
		}
	}
	return reason, fmt.Sprintf("claim %s (%s) is not bound: %s", c.Name, describeClaim(c), why)
}

// describeClaim returns what a claim asks for, for example "ReadWriteMany, 20Gi, default StorageClass".
func describeClaim(c *corev1.PersistentVolumeClaim) string {
	modes := make([]string, len(c.Spec.AccessModes))
	for i, m := range c.Spec.AccessModes {
		modes[i] = string(m)
	}
	class := "default StorageClass"
	if c.Spec.StorageClassName != nil {
		class = fmt.Sprintf("StorageClass %q", *c.Spec.StorageClassName)
	}
	size := c.Spec.Resources.Requests[corev1.ResourceStorage]
	return fmt.Sprintf("%s, %s, %s", strings.Join(modes, ","), size.String(), class)
}

// ClaimFault returns the CheckpointClaimBound reason when the claim cannot bind, "" otherwise.
func ClaimFault(st mlv1.TrainingJobStatus) string {
	c := meta.FindStatusCondition(st.Conditions, mlv1.ConditionCheckpointClaimBound)
	if c == nil || c.Status == metav1.ConditionTrue || c.Reason == ReasonClaimPending {
		return ""
	}
	return c.Reason
}
