package derive

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

func TestClaimCondition(t *testing.T) {
	pending := builders.CheckpointClaim(tjtest.NewTJ("ml", "a").Checkpoints(&mlv1.CheckpointStorage{
		Type: mlv1.StoragePVC, Size: ptr.To(resource.MustParse("5Gi")), StorageClassName: ptr.To("efs")}).Obj())
	bound := pending.DeepCopy()
	bound.Status.Phase, bound.Spec.VolumeName = corev1.ClaimBound, "pv-1"
	event := func(typ, reason, msg string) *corev1.Event {
		return &corev1.Event{Type: typ, Reason: reason, Message: msg}
	}
	const what = `claim a-checkpoints (ReadWriteMany, 5Gi, StorageClass "efs") is not bound: `
	cases := []struct {
		name string
		obs  Observed
		want *metav1.Condition
	}{
		{name: "no claim managed", obs: Observed{}, want: nil},
		{
			name: "bound",
			obs:  Observed{Claim: bound},
			want: &metav1.Condition{Type: mlv1.ConditionCheckpointClaimBound, Status: metav1.ConditionTrue, Reason: "Bound",
				Message: "claim a-checkpoints is bound to volume pv-1"},
		},
		{
			name: "pending, nothing said yet",
			obs:  Observed{Claim: pending},
			want: &metav1.Condition{Type: mlv1.ConditionCheckpointClaimBound, Status: metav1.ConditionFalse,
				Reason: ReasonClaimPending, Message: what + "no event explains it yet"},
		},
		{
			name: "waiting for the first consumer",
			obs: Observed{Claim: pending,
				ClaimEvent: event("Normal", "WaitForFirstConsumer", "waiting for first consumer to be created before binding")},
			want: &metav1.Condition{Type: mlv1.ConditionCheckpointClaimBound, Status: metav1.ConditionFalse, Reason: ReasonClaimPending,
				Message: what + "WaitForFirstConsumer: waiting for first consumer to be created before binding"},
		},
		{
			name: "no storage class and no volume (a Normal event of the binder)",
			obs: Observed{Claim: pending,
				ClaimEvent: event("Normal", "FailedBinding", "no persistent volumes available for this claim and no storage class is set")},
			want: &metav1.Condition{Type: mlv1.ConditionCheckpointClaimBound, Status: metav1.ConditionFalse, Reason: "FailedBinding",
				Message: what + "FailedBinding: no persistent volumes available for this claim and no storage class is set"},
		},
		{
			name: "driver refuses",
			obs:  Observed{Claim: pending, ClaimEvent: event("Warning", "ProvisioningFailed", "access mode ReadWriteMany is not supported\n")},
			want: &metav1.Condition{Type: mlv1.ConditionCheckpointClaimBound, Status: metav1.ConditionFalse, Reason: "ProvisioningFailed",
				Message: what + "ProvisioningFailed: access mode ReadWriteMany is not supported"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var st mlv1.TrainingJobStatus
			SetClaimCondition(&st, tc.obs, t0)
			got := meta.FindStatusCondition(st.Conditions, mlv1.ConditionCheckpointClaimBound)
			if tc.want != nil {
				tc.want.LastTransitionTime = t0
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("condition (-want +got):\n%s", diff)
			}
			if fault := ClaimFault(st); (fault != "") != (got != nil && got.Status == metav1.ConditionFalse && got.Reason != ReasonClaimPending) {
				t.Errorf("ClaimFault = %q for %+v", fault, got)
			}
		})
	}
}
