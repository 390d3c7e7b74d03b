package builders

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// Checkpoint volumes: a pvc or nfs checkpoint storage is mounted into every worker at
// CheckpointMountPath, and the job's checkpoint directory inside it is
// <mount>/<prefix>/<namespace>/<trainingjob> (CHECKPOINT_DIR).
const (
	CheckpointVolumeName = "checkpoints"
	CheckpointMountPath  = "/checkpoints"
)

// mountedCheckpoints reports whether the job's checkpoint storage is of a type mounted as a volume (pvc or nfs).
func mountedCheckpoints(tj *mlv1.TrainingJob) bool {
	s := tj.CheckpointStorage()
	return s != nil && (s.Type == mlv1.StoragePVC || s.Type == mlv1.StorageNFS)
}

// CheckpointRoot returns where a job's checkpoints live inside its store: [<prefix>/]<namespace>/<name>/<runID>
// (without the run ID for a job created before run IDs).
func CheckpointRoot(tj *mlv1.TrainingJob) string {
	return path.Join(NameRoot(tj), RunID(tj))
}

// NameRoot returns where the checkpoints of every run under the job's name live: [<prefix>/]<namespace>/<name>.
func NameRoot(tj *mlv1.TrainingJob) string {
	prefix := ""
	if s := tj.CheckpointStorage(); s != nil {
		prefix = s.Prefix
	}
	return path.Join(prefix, tj.Namespace, tj.Name)
}

// RunID returns the job's run ID: status.runID once recorded; for a job the operator has not started (no
// state yet), DispatchedRunID of a copy MultiKueue dispatched, else the UID; "" for one an operator before run
// IDs started, so that its checkpoints stay where its workers write them.
func RunID(tj *mlv1.TrainingJob) string {
	switch {
	case tj.Status.RunID != "" && !validRunID(tj.Status.RunID):
		return string(tj.UID) // never a path of its own (admission refuses one: an older API server may not)
	case strings.HasPrefix(tj.Status.RunID, dispatchedPrefix) && tj.Status.RunID != DispatchedRunID(tj):
		// A dispatched run's ID holds only while the job still names that run's Workload: a job whose
		// labels were written to look dispatched and then removed gets a run of its own.
		return string(tj.UID)
	case tj.Status.RunID != "" || tj.Status.State != "":
		return tj.Status.RunID
	}
	if id := DispatchedRunID(tj); id != "" {
		return id
	}
	return string(tj.UID)
}

// DispatchedRunID returns the run ID of a copy MultiKueue made on a worker cluster (the origin label and the
// prebuilt Workload), "" for any other job. It names the manager's Workload, which every copy of that job
// carries and a job created again does not (its name holds the manager job's UID), so the copy made on
// another worker after a cluster is lost resumes the same run from a shared store, and no other run.
func DispatchedRunID(tj *mlv1.TrainingJob) string {
	if !Dispatched(tj) {
		return ""
	}
	sum := sha256.Sum256([]byte(tj.Labels[names.MultiKueueOriginLabel] + "/" + PrebuiltWorkload(tj)))
	return dispatchedPrefix + hex.EncodeToString(sum[:16])
}

const dispatchedPrefix = "mk-"

// Dispatched reports whether the job is a copy MultiKueue made on a worker cluster (PrebuiltWorkload).
func Dispatched(tj *mlv1.TrainingJob) bool {
	return PrebuiltWorkload(tj) != ""
}

// validRunID reports whether id is a run ID: a UID's characters (lower-case letters, digits, dashes).
func validRunID(id string) bool {
	return len(id) <= 64 && strings.Trim(id, "0123456789abcdefghijklmnopqrstuvwxyz-") == ""
}

// CheckpointDir returns the job's checkpoint directory inside a worker, for mounted storage.
func CheckpointDir(tj *mlv1.TrainingJob) string {
	return path.Join(CheckpointMountPath, CheckpointRoot(tj))
}

// CheckpointURI returns the job's checkpoint location in object storage: s3://bucket/root or gs://bucket/root.
func CheckpointURI(tj *mlv1.TrainingJob) string {
	return objectStore(tj.CheckpointStorage()) + "/" + CheckpointRoot(tj)
}

// CheckpointStore returns the object store's scheme and bucket the job's checkpoints are in
// (s3://bucket, gs://bucket), "" for mounted storage.
func CheckpointStore(tj *mlv1.TrainingJob) string {
	if s := tj.CheckpointStorage(); s != nil && (s.Type == mlv1.StorageS3 || s.Type == mlv1.StorageGCS) {
		return objectStore(s)
	}
	return ""
}

// objectStore returns gs://bucket for GCS storage, else s3://bucket.
func objectStore(s *mlv1.CheckpointStorage) string {
	if s.Type == mlv1.StorageGCS {
		return "gs://" + s.GCSBucket
	}
	return "s3://" + s.S3Bucket
}

func checkpointVolume(tj *mlv1.TrainingJob) corev1.Volume {
	s := tj.CheckpointStorage()
	v := corev1.Volume{Name: CheckpointVolumeName}
	if s.Type == mlv1.StorageNFS {
		v.NFS = &corev1.NFSVolumeSource{Server: s.NFS.Server, Path: s.NFS.Path}
	} else {
		v.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ClaimName(tj)}
	}
	return v
}

// checkpointEnv returns the variables that tell the trainer where to write (CHECKPOINT_DIR on a volume,
// CHECKPOINT_URI in object storage, with the storage identity's variables), how often, and what to resume
// from (RESUME_FROM, from the ConfigMap: see ResumeFrom); nil while checkpoints are off.
func checkpointEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	if !tj.CheckpointEnabled() {
		return nil
	}
	freq := *tj.Spec.Checkpoint.Frequency
	env := []corev1.EnvVar{value("CHECKPOINT_URI", CheckpointURI(tj))}
	if mountedCheckpoints(tj) {
		env = []corev1.EnvVar{value("CHECKPOINT_DIR", CheckpointDir(tj))}
	}
	env = append(env, value("CHECKPOINT_FREQUENCY", itoa(freq)), resumeFromEnv(tj))
	if tj.Spec.Checkpoint.OnPreemption {
		env = append(env, value(CheckpointOnSigtermEnv, "1"))
	}
	if m := tj.Spec.Monitoring; m.TensorboardEnabled != nil && *m.TensorboardEnabled {
		env = append(env, value("TENSORBOARD_LOG_DIR", TensorBoardDir(tj)))
	}
	return append(env, storageEnv(tj)...)
}

// TensorBoardDir returns where the workers write TensorBoard event files (monitoring.tensorboardEnabled): the
// tensorboard directory beside the job's checkpoints, which the checkpoint agent's rotation never touches.
func TensorBoardDir(tj *mlv1.TrainingJob) string {
	if mountedCheckpoints(tj) {
		return path.Join(CheckpointDir(tj), "tensorboard")
	}
	return CheckpointURI(tj) + "/tensorboard"
}

// CheckpointOnSigtermEnv (set to 1 with checkpoint.onPreemption) asks the trainer to write a complete
// checkpoint when it gets SIGTERM, then exit: the pods get checkpoint.preemptionGraceSeconds to do it.
const CheckpointOnSigtermEnv = "TRAININGJOB_CHECKPOINT_ON_SIGTERM"

// TerminationGrace returns the workers' time between SIGTERM and SIGKILL: checkpoint.preemptionGraceSeconds
// with onPreemption, else the Kubernetes default (nil).
func TerminationGrace(tj *mlv1.TrainingJob) *int64 {
	c := tj.Spec.Checkpoint
	if !tj.CheckpointEnabled() || !c.OnPreemption {
		return nil
	}
	return ptr.To(int64(*c.PreemptionGraceSeconds))
}

// ResumeFrom returns the checkpoint workers resume from when they start now: the newest complete checkpoint
// the operator has seen (status.checkpoint.latest, from rank 0's checkpoint agent), else
// spec.checkpoint.resumeFrom (pvc:// and nfs:// as the path workers see), else "" (start fresh).
func ResumeFrom(tj *mlv1.TrainingJob) string {
	if !tj.CheckpointEnabled() {
		return ""
	}
	if c := tj.Status.Checkpoint; c != nil && c.Latest != "" {
		return c.Latest
	}
	from := tj.Spec.Checkpoint.ResumeFrom
	for _, scheme := range []string{"pvc://", "nfs://"} {
		if rest, ok := strings.CutPrefix(from, scheme); ok {
			return path.Join(CheckpointMountPath, rest) // where workers see it
		}
	}
	return from
}

// resumeFromEnv returns RESUME_FROM, read from the job's ConfigMap; unset while there is nothing to resume from.
func resumeFromEnv(tj *mlv1.TrainingJob) corev1.EnvVar {
	return configMapKeyEnv(tj, names.ResumeFromKey)
}

// The checkpoint agent (`manager checkpoint-agent`, see package checkpoint) runs as a native sidecar
// (an init container with restartPolicy Always) in every worker pod: it starts before the trainer, stops
// after it, reaches the storage with the pod's own identity, and only rank 0's does any work.
const (
	AgentPortName = "checkpoint"
	AgentPort     = 8082
	// CredentialsPath is where a gcs storage Secret is mounted in the trainer and the agent.
	CredentialsPath = "/var/run/secrets/trainingjob/checkpoint"
	credentialsVol  = "checkpoint-credentials"
)

// DefaultAgentImage is the agent's image: the operator's own.
const DefaultAgentImage = "ghcr.io/trainingjob-operator/trainingjob-operator:v0.1.0"

func agentContainer(tj *mlv1.TrainingJob, opts Options) corev1.Container {
	c := tj.Spec.Checkpoint
	s := tj.CheckpointStorage()
	args := []string{"checkpoint-agent", "--storage-type=" + string(s.Type), "--root=" + CheckpointRoot(tj),
		// On the pod's own address: pods that share a network (a process node) must not collide.
		"--retention=" + itoa(*c.Retention), "--listen=$(POD_IP):" + itoa(AgentPort),
		// The final report, for status.checkpoint after the pods stopped.
		"--termination-log=" + corev1.TerminationMessagePathDefault}
	if c.ResumeFrom != "" {
		args = append(args, "--protect="+c.ResumeFrom)
	}
	if RunID(tj) != "" {
		args = append(args, "--earlier-runs-under="+NameRoot(tj))
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
	image, command := agentImage(opts)
	ctr := corev1.Container{
		Name: names.AgentContainerName, Image: image, Command: command, Args: args, RestartPolicy: ptrTo(corev1.ContainerRestartPolicyAlways),
		// RESUME_FROM: the checkpoint the workers of this pod started from, protected until the operator
		// says (agentapi: PUT /resume-from) that the ConfigMap names a newer one.
		Env:             []corev1.EnvVar{rankEnv(), podIPEnv(), resumeFromEnv(tj)},
		Ports:           []corev1.ContainerPort{{Name: AgentPortName, ContainerPort: AgentPort, Protocol: corev1.ProtocolTCP}},
		SecurityContext: agentSecurityContext(tj),
	}
	if mountedCheckpoints(tj) {
		ctr.VolumeMounts = []corev1.VolumeMount{{Name: CheckpointVolumeName, MountPath: CheckpointMountPath}}
		ctr.Args = append(ctr.Args, "--dir="+CheckpointMountPath)
	}
	// The job's token, which PUT /resume-from must carry: only the operator (which derives it again from
	// its key) and the pod, from the job's token Secret, know it.
	if token := AgentToken(tj, opts); token != "" {
		ctr.Env = append(ctr.Env, tokenEnv(tj, agentapi.TokenEnv, names.AgentTokenKey, token))
	}
	ctr.EnvFrom = storageEnvFrom(tj)
	ctr.VolumeMounts = append(ctr.VolumeMounts, storageMounts(tj)...)
	ctr.Env = append(ctr.Env, storageEnv(tj)...)
	return ctr
}

// SecretKey is key material: fmt, %#v, JSON and YAML print it as <redacted>, so logging a struct that
// holds one (builders.Options) never shows it.
type SecretKey []byte

const redacted = "<redacted>"

func (SecretKey) String() string               { return redacted }
func (SecretKey) GoString() string             { return redacted }
func (SecretKey) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }
func (SecretKey) MarshalText() ([]byte, error) { return []byte(redacted), nil }
func (k SecretKey) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// agentTokenContext separates the agent tokens from anything else the key may ever derive.
const agentTokenContext = "trainingjob-operator/checkpoint-agent-token/v1\x00"

// AgentToken returns the job's checkpoint agent token: hex(HMAC-SHA256(opts.AgentTokenKey, context || the
// job's UID)), the same for the job's life (every attempt, every operator replica and restart that
// holds the same key) and different for every job; "" without a key. The agent container gets it as
// agentapi.TokenEnv; the Job's template stays a pure function of the TrainingJob and Options.
func AgentToken(tj *mlv1.TrainingJob, opts Options) string {
	return jobToken(agentTokenContext, tj, opts)
}

// jobToken returns hex(HMAC-SHA256(opts.AgentTokenKey, context || the job's UID)); "" without a key.
func jobToken(context string, tj *mlv1.TrainingJob, opts Options) string {
	if len(opts.AgentTokenKey) == 0 {
		return ""
	}
	m := hmac.New(sha256.New, opts.AgentTokenKey)
	m.Write([]byte(context + string(tj.UID)))
	return hex.EncodeToString(m.Sum(nil))
}

// agentImage returns the image and command of the operator's own containers in a worker pod (the checkpoint
// agent, the inputs' fetcher): the manager binary.
func agentImage(opts Options) (image string, command []string) {
	image, command = opts.AgentImage, opts.AgentCommand
	if image == "" {
		image = DefaultAgentImage
	}
	if len(command) == 0 {
		command = []string{"/manager"}
	}
	return image, command
}

// Object storage access: the trainer (which writes to CHECKPOINT_URI) and the agent get the same identity.
// With a storage Secret, an s3 Secret's keys become AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY and a gcs
// Secret's service-account.json is mounted and named by GOOGLE_APPLICATION_CREDENTIALS; without one the
// pod's workload identity applies. An s3 endpoint and region become AWS_ENDPOINT_URL_S3 and AWS_REGION,
// which the AWS SDKs read. These are defaults (DefaultEnvNames): spec.env replaces them in the trainer.

func storageEnvFrom(tj *mlv1.TrainingJob) []corev1.EnvFromSource {
	s := tj.CheckpointStorage()
	if s.SecretRef == nil || s.Type != mlv1.StorageS3 {
		return nil
	}
	return []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: *s.SecretRef}}}
}

func storageMounts(tj *mlv1.TrainingJob) []corev1.VolumeMount {
	s := tj.CheckpointStorage()
	if s.SecretRef == nil || s.Type != mlv1.StorageGCS {
		return nil
	}
	return []corev1.VolumeMount{{Name: credentialsVol, MountPath: CredentialsPath, ReadOnly: true}}
}

func storageEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	s := tj.CheckpointStorage()
	var env []corev1.EnvVar
	switch {
	case s.Type == mlv1.StorageGCS && s.SecretRef != nil:
		env = append(env, value("GOOGLE_APPLICATION_CREDENTIALS", CredentialsPath+"/service-account.json"))
	case s.Type == mlv1.StorageS3 && s.Endpoint != "":
		env = append(env, value("AWS_ENDPOINT_URL_S3", s.Endpoint))
	}
	if s.Type == mlv1.StorageS3 && s.Region != "" {
		env = append(env, value("AWS_REGION", s.Region))
	}
	return env
}

// ResumeCheckContainerName is the init container that checks resumeFrom before the workers start.
const ResumeCheckContainerName = "resume-check"

// agentInitContainers returns the resume check (when resumeFrom is set: it fails the pod, naming the URI
// in its termination message, before any worker starts) and the agent sidecar.
func agentInitContainers(tj *mlv1.TrainingJob, opts Options) []corev1.Container {
	agent := agentContainer(tj, opts)
	from := tj.Spec.Checkpoint.ResumeFrom
	if from == "" {
		return []corev1.Container{agent}
	}
	check := *agent.DeepCopy()
	check.Name, check.RestartPolicy, check.Ports = ResumeCheckContainerName, nil, nil
	// The check serves nothing: it does not need the token.
	check.Env = slices.DeleteFunc(check.Env, func(e corev1.EnvVar) bool { return e.Name == agentapi.TokenEnv })
	check.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	check.Args = []string{"checkpoint-agent", "--check-resume-from=" + from, "--storage-type=" + string(tj.CheckpointStorage().Type)}
	for _, a := range agent.Args {
		for _, keep := range []string{"--s3-bucket=", "--gcs-bucket=", "--endpoint=", "--region=", "--dir="} {
			if strings.HasPrefix(a, keep) {
				check.Args = append(check.Args, a)
			}
		}
	}
	return []corev1.Container{check, agent}
}

// storageVolumes returns the volumes object storage access needs (a gcs key); nil when it needs none.
func storageVolumes(tj *mlv1.TrainingJob) []corev1.Volume {
	s := tj.CheckpointStorage()
	if s.SecretRef == nil || s.Type != mlv1.StorageGCS {
		return nil
	}
	return []corev1.Volume{{Name: credentialsVol, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: s.SecretRef.Name},
	}}}
}

func ptrTo[T any](v T) *T { return &v }
