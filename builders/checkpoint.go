package builders

import (
	"path"

	corev1 "k8s.io/api/core/v1"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// Checkpoint volumes: a pvc or nfs checkpoint storage is mounted into every worker at
// CheckpointMountPath, and the job's checkpoint directory inside it is
// <mount>/<prefix>/<namespace>/<trainingjob> (CHECKPOINT_DIR).
const (
	CheckpointVolumeName = "checkpoints"
	CheckpointMountPath  = "/checkpoints"
)

// CheckpointEnabled is true when spec.checkpoint.enabled is.
func CheckpointEnabled(tj *mlv1.TrainingJob) bool {
	c := tj.Spec.Checkpoint
	return c != nil && c.Enabled != nil && *c.Enabled && c.Storage != nil
}

// mountedCheckpoints is true for storage types that are mounted as a volume.
func mountedCheckpoints(tj *mlv1.TrainingJob) bool {
	if !CheckpointEnabled(tj) {
		return false
	}
	t := tj.Spec.Checkpoint.Storage.Type
	return t == mlv1.StoragePVC || t == mlv1.StorageNFS
}

// CheckpointDir is the job's checkpoint directory inside a worker, for mounted storage.
func CheckpointDir(tj *mlv1.TrainingJob) string {
	return path.Join(CheckpointMountPath, tj.Spec.Checkpoint.Storage.Prefix, tj.Namespace, tj.Name)
}

func checkpointVolume(tj *mlv1.TrainingJob) corev1.Volume {
	s := tj.Spec.Checkpoint.Storage
	v := corev1.Volume{Name: CheckpointVolumeName}
	if s.Type == mlv1.StorageNFS {
		v.NFS = &corev1.NFSVolumeSource{Server: s.NFS.Server, Path: s.NFS.Path}
	} else {
		v.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: s.ClaimName}
	}
	return v
}

func checkpointEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	if !mountedCheckpoints(tj) {
		return nil
	}
	freq := int32(1)
	if f := tj.Spec.Checkpoint.Frequency; f != nil {
		freq = *f
	}
	return []corev1.EnvVar{value("CHECKPOINT_DIR", CheckpointDir(tj)), value("CHECKPOINT_FREQUENCY", itoa(freq))}
}
