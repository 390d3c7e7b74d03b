package builders

import (
	"path"
	"sort"
	"strings"

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

// CheckpointRoot is where a job's checkpoints live inside its store: [<prefix>/]<namespace>/<name>.
func CheckpointRoot(tj *mlv1.TrainingJob) string {
	prefix := ""
	if c := tj.Spec.Checkpoint; c != nil && c.Storage != nil {
		prefix = c.Storage.Prefix
	}
	return path.Join(prefix, tj.Namespace, tj.Name)
}

// CheckpointDir is the job's checkpoint directory inside a worker, for mounted storage.
func CheckpointDir(tj *mlv1.TrainingJob) string {
	return path.Join(CheckpointMountPath, CheckpointRoot(tj))
}

// CheckpointURI is the job's checkpoint location in object storage: s3://bucket/root or gs://bucket/root.
func CheckpointURI(tj *mlv1.TrainingJob) string {
	s := tj.Spec.Checkpoint.Storage
	if s.Type == mlv1.StorageGCS {
		return "gs://" + s.GCSBucket + "/" + CheckpointRoot(tj)
	}
	return "s3://" + s.S3Bucket + "/" + CheckpointRoot(tj)
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

// checkpointEnv tells the trainer where to write (CHECKPOINT_DIR on a volume, CHECKPOINT_URI in object
// storage), how often, and what to resume from (RESUME_FROM, spec.checkpoint.resumeFrom).
func checkpointEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	if !CheckpointEnabled(tj) {
		return nil
	}
	freq := int32(1)
	if f := tj.Spec.Checkpoint.Frequency; f != nil {
		freq = *f
	}
	where := value("CHECKPOINT_URI", CheckpointURI(tj))
	if mountedCheckpoints(tj) {
		where = value("CHECKPOINT_DIR", CheckpointDir(tj))
	}
	env := []corev1.EnvVar{where, value("CHECKPOINT_FREQUENCY", itoa(freq))}
	if r := tj.Spec.Checkpoint.ResumeFrom; r != "" {
		env = append(env, value("RESUME_FROM", r))
	}
	return env
}

// The checkpoint agent (`manager checkpoint-agent`, see package checkpoint) runs as a native sidecar
// (an init container with restartPolicy Always) in every worker pod: it starts before the trainer, stops
// after it, reaches the storage with the pod's own identity, and only rank 0's does any work.
const (
	AgentContainerName = "checkpoint-agent"
	AgentPortName      = "checkpoint"
	AgentPort          = 8082
	// AgentCredentialsPath is where a gcs storage Secret is mounted in the agent.
	AgentCredentialsPath = "/var/run/secrets/trainingjob/checkpoint"
	agentCredentialsVol  = "checkpoint-credentials"
)

// DefaultAgentImage is the agent's image: the operator's own.
const DefaultAgentImage = "ghcr.io/trainingjob-operator/trainingjob-operator:v0.1.0"

func agentContainer(tj *mlv1.TrainingJob, opts Options) corev1.Container {
	c := tj.Spec.Checkpoint
	s := c.Storage
	args := []string{"checkpoint-agent", "--storage-type=" + string(s.Type), "--root=" + CheckpointRoot(tj),
		// On the pod's own address: pods that share a network (a process node) must not collide.
		"--retention=" + itoa(ptrOr(c.Retention, 3)), "--listen=$(POD_IP):" + itoa(AgentPort)}
	if c.ResumeFrom != "" {
		args = append(args, "--protect="+c.ResumeFrom)
	}
	for flag, v := range map[string]string{"s3-bucket": s.S3Bucket, "gcs-bucket": s.GCSBucket, "endpoint": s.Endpoint, "region": s.Region} {
		if v != "" {
			args = append(args, "--"+flag+"="+v)
		}
	}
	if opts.AgentInterval > 0 {
		args = append(args, "--interval="+opts.AgentInterval.String())
	}
	sort.Strings(args[1:]) // deterministic, so the Job's spec hash is stable
	image, command := opts.AgentImage, opts.AgentCommand
	if image == "" {
		image = DefaultAgentImage
	}
	if len(command) == 0 {
		command = []string{"/manager"}
	}
	ctr := corev1.Container{
		Name: AgentContainerName, Image: image, Command: command, Args: args, RestartPolicy: ptrTo(corev1.ContainerRestartPolicyAlways),
		Env:   []corev1.EnvVar{rankEnv(), podIPEnv()},
		Ports: []corev1.ContainerPort{{Name: AgentPortName, ContainerPort: AgentPort, Protocol: corev1.ProtocolTCP}},
	}
	if mountedCheckpoints(tj) {
		ctr.VolumeMounts = []corev1.VolumeMount{{Name: CheckpointVolumeName, MountPath: CheckpointMountPath}}
		ctr.Args = append(ctr.Args, "--dir="+CheckpointMountPath)
	}
	if s.SecretRef != nil && s.Type == mlv1.StorageS3 {
		ctr.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: *s.SecretRef}}}
	}
	if s.SecretRef != nil && s.Type == mlv1.StorageGCS {
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: agentCredentialsVol, MountPath: AgentCredentialsPath, ReadOnly: true})
		ctr.Env = append(ctr.Env, value("GOOGLE_APPLICATION_CREDENTIALS", AgentCredentialsPath+"/service-account.json"))
	}
	return ctr
}

// ResumeCheckContainerName is the init container that checks resumeFrom before the workers start.
const ResumeCheckContainerName = "resume-check"

// agentInitContainers are the resume check (when resumeFrom is set: it fails the pod, naming the URI in
// its termination message, before any worker starts) and the agent sidecar.
func agentInitContainers(tj *mlv1.TrainingJob, opts Options) []corev1.Container {
	agent := agentContainer(tj, opts)
	from := tj.Spec.Checkpoint.ResumeFrom
	if from == "" {
		return []corev1.Container{agent}
	}
	check := *agent.DeepCopy()
	check.Name, check.RestartPolicy, check.Ports = ResumeCheckContainerName, nil, nil
	check.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	check.Args = []string{"checkpoint-agent", "--check-resume-from=" + from, "--storage-type=" + string(tj.Spec.Checkpoint.Storage.Type)}
	for _, a := range agent.Args {
		for _, keep := range []string{"--s3-bucket=", "--gcs-bucket=", "--endpoint=", "--region=", "--dir="} {
			if strings.HasPrefix(a, keep) {
				check.Args = append(check.Args, a)
			}
		}
	}
	return []corev1.Container{check, agent}
}

// agentVolumes are the volumes the agent needs besides the checkpoint volume.
func agentVolumes(tj *mlv1.TrainingJob) []corev1.Volume {
	s := tj.Spec.Checkpoint.Storage
	if s.SecretRef == nil || s.Type != mlv1.StorageGCS {
		return nil
	}
	return []corev1.Volume{{Name: agentCredentialsVol, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: s.SecretRef.Name}}}}
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

func ptrTo[T any](v T) *T { return &v }
