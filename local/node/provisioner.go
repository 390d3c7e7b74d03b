package node

import (
	"context"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// reconcileClaim provisions a hostPath PersistentVolume for every unbound claim, pre-bound to it (its
// claimRef names the claim), so that the persistentvolume-binder controller binds the two and the
// scheduler can place pods that mount the claim. The volume is the claim's directory on this machine
// (ClaimDir), kept when the claim is deleted (reclaim policy Retain).
func (n *Node) reconcileClaim(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := n.client.Get(ctx, req.NamespacedName, pvc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	dir := n.ClaimDir(pvc.Namespace, pvc.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return reconcile.Result{}, err
	}
	pv := claimVolume(pvc, dir)
	if err := n.client.Create(ctx, pv); err != nil && !apierrors.IsAlreadyExists(err) {
		return reconcile.Result{}, fmt.Errorf("provisioning a volume for claim %s: %w", req.NamespacedName, err)
	}
	return reconcile.Result{}, nil
}

// claimVolume is the PersistentVolume provisioned for a claim.
func claimVolume(pvc *corev1.PersistentVolumeClaim, dir string) *corev1.PersistentVolume {
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	modes := pvc.Spec.AccessModes
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-" + string(pvc.UID), Labels: map[string]string{ProcessNodeLabel: "true"}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   modes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              ptr.Deref(pvc.Spec.StorageClassName, ""),
			VolumeMode:                    pvc.Spec.VolumeMode,
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		},
	}
}
