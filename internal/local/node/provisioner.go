package node

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The provisioning node is the local stack's storage driver: it installs a default StorageClass, and
// provisions a hostPath PersistentVolume (the claim's directory on this machine, shared by every process
// node like network storage) for every unbound claim of a class of its provisioner, or of no class (as an
// administrator's static volumes would). A class may limit the access modes it supports with the
// parameter "accessModes" (comma-separated), as real drivers do; a claim asking for another mode gets a
// ProvisioningFailed Warning event, as an external provisioner gives, and is retried.
const (
	// Provisioner is the provisioner name of the local stack's StorageClasses.
	Provisioner = "ml.example.com/process-node-hostpath"
	// DefaultStorageClass is the StorageClass the provisioning node installs as the cluster's default.
	DefaultStorageClass = "local-hostpath"
	// AccessModesParameter lists the access modes a class of Provisioner supports (default: all).
	AccessModesParameter = "accessModes"
	provisionRetry       = 5 * time.Second
)

// ensureDefaultStorageClass installs DefaultStorageClass, annotated as the cluster's default.
func (n *Node) ensureDefaultStorageClass(ctx context.Context) error {
	sc := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: DefaultStorageClass, Annotations: map[string]string{
			"storageclass.kubernetes.io/is-default-class": "true",
		}},
		Provisioner:       Provisioner,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimRetain),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
	}
	if err := n.client.Create(ctx, sc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("installing the default StorageClass: %w", err)
	}
	return nil
}

// reconcileClaim provisions a volume, pre-bound to the claim (its claimRef names the claim), so that
// the persistentvolume-binder controller binds the two and the scheduler can place pods that mount it.
// The volume is kept when the claim is deleted (reclaim policy Retain).
func (n *Node) reconcileClaim(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := n.client.Get(ctx, req.NamespacedName, pvc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	class, err := n.claimClass(ctx, pvc)
	if class == nil || err != nil {
		return reconcile.Result{}, err // another provisioner's claim, or the class cannot be read yet
	}
	if unsupported := unsupportedModes(class, pvc); unsupported != "" {
		n.recorder.Eventf(pvc, nil, corev1.EventTypeWarning, "ProvisioningFailed", "Provision",
			"failed to provision volume with StorageClass %q: access mode %s is not supported (the class supports %s)",
			class.Name, unsupported, class.Parameters[AccessModesParameter])
		return reconcile.Result{RequeueAfter: provisionRetry}, nil
	}
	dir := n.ClaimDir(pvc.Namespace, pvc.Name)
	if err := claimDir(dir); err != nil {
		return reconcile.Result{}, err
	}
	pv := claimVolume(pvc, dir)
	if err := n.client.Create(ctx, pv); err != nil && !apierrors.IsAlreadyExists(err) {
		return reconcile.Result{}, fmt.Errorf("provisioning a volume for claim %s: %w", req.NamespacedName, err)
	}
	return reconcile.Result{}, nil
}

// claimClass returns the claim's StorageClass when this node provisions it: one of Provisioner, or an empty
// class for a claim of no class. It is nil for another provisioner's claim.
func (n *Node) claimClass(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (*storagev1.StorageClass, error) {
	name := ptr.Deref(pvc.Spec.StorageClassName, "")
	if name == "" {
		return &storagev1.StorageClass{Provisioner: Provisioner}, nil
	}
	class := &storagev1.StorageClass{}
	if err := n.client.Get(ctx, client.ObjectKey{Name: name}, class); err != nil {
		return nil, client.IgnoreNotFound(err) // the binder reports a missing class
	}
	if class.Provisioner != Provisioner {
		return nil, nil
	}
	return class, nil
}

// unsupportedModes names the first access mode the claim asks for that its class does not support.
func unsupportedModes(class *storagev1.StorageClass, pvc *corev1.PersistentVolumeClaim) string {
	modes, ok := class.Parameters[AccessModesParameter]
	if !ok {
		return ""
	}
	supported := strings.Split(modes, ",")
	for _, m := range pvc.Spec.AccessModes {
		if !slices.Contains(supported, string(m)) {
			return string(m)
		}
	}
	return ""
}

// claimVolume returns the PersistentVolume provisioned for a claim.
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

// claimDir creates a claim's directory writable by every user, as hostPath provisioners do (a hostPath
// volume has no fsGroup support): a container running as non-root (the images' user 65532) writes its
// checkpoints there. A process node runs pods as its own user and never noticed; a real node did.
func claimDir(dir string) error {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	return os.Chmod(dir, 0o777) // the umask cut MkdirAll's mode
}
