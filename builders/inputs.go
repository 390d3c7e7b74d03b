package builders

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/inputs"
)

// The model and dataset inputs (docs/inputs.md). A fetched source (s3, gs, hf, https) is copied by rank
// 0's init container InputsContainerName into the job's input cache, the claim InputsCacheName mounted at
// InputsCachePath, under model/ or dataset/; every rank waits for it there. A pvc or nfs source is
// mounted read-only at /inputs/model or /inputs/dataset. MODEL_DIR and DATASET_DIR name where they are.
//
// With the PerNode cache (InputsCacheMode) the volume InputsCacheVolume is instead the job's own directory
// (NodeCacheKey) in the operator's node cache directory, a hostPath: no container of the pod sees
// another job's directory. Its directories are pruned by the node cache pruner (`manager
// prune-node-cache`, a DaemonSet of the chart), never from a job's pod.
const (
	InputsCacheVolume = "inputs-cache"
	InputsCachePath   = "/inputs/cache"
	InputsRoot        = "/inputs"
	// inputsCredentialsVolume holds a gs:// source's service-account.json (inputs.secretRef).
	inputsCredentialsVolume = "inputs-credentials"
	inputsCredentialsPath   = "/var/run/secrets/trainingjob-inputs"
)

// inputsResources bound the fetcher's memory (a listing of DefaultMaxFiles objects and the stores'
// buffers fit): a source that lists without end cannot press the node's memory.
var inputsResources = corev1.ResourceRequirements{
	Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
	Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
}

// InputsPort is where rank 0's fetcher serves its progress (GET /status) while it runs.
const InputsPort int32 = 8083

// DefaultInputsCacheSize is the input cache's capacity when inputs.cacheSize is unset.
var DefaultInputsCacheSize = resource.MustParse("50Gi")

// Input is the model or the dataset with its parsed source.
type Input struct {
	// Name is model or dataset.
	Name   string
	Source inputs.Source
}

// Inputs returns the job's model and dataset sources that are not plain names; a source that does not parse
// (admission refuses it) is left out.
func Inputs(tj *mlv1.TrainingJob) []Input {
	var out []Input
	for _, in := range [][2]string{{"model", tj.Spec.Model}, {"dataset", tj.Spec.Dataset}} {
		if src, err := inputs.Parse(in[1]); err == nil && src.Kind != inputs.Name {
			out = append(out, Input{Name: in[0], Source: src})
		}
	}
	return out
}

// FetchedInputs returns the inputs the init container fetches into the cache.
func FetchedInputs(tj *mlv1.TrainingJob) []Input {
	var out []Input
	for _, in := range Inputs(tj) {
		if in.Source.Fetched() {
			out = append(out, in)
		}
	}
	return out
}

// InputsCacheMode returns the job's input cache: inputs.cache, else the operator's default, else Shared.
func InputsCacheMode(tj *mlv1.TrainingJob, opts Options) mlv1.InputsCache {
	if in := tj.Spec.Inputs; in != nil && in.Cache != "" {
		return in.Cache
	}
	if opts.InputsCache != "" {
		return opts.InputsCache
	}
	return mlv1.InputsCacheShared
}

// SharedInputsCache reports whether a source is fetched and kept in the job's claim (InputsCacheClaim).
func SharedInputsCache(tj *mlv1.TrainingJob, opts Options) bool {
	return len(FetchedInputs(tj)) > 0 && InputsCacheMode(tj, opts) == mlv1.InputsCacheShared
}

// NodeCacheKey returns the job's directory in a node's input cache: NAMESPACE_NAME_UID (neither a namespace
// nor a name holds "_"), so that an administrator reading the node sees whose it is, and a job created
// again under the same name gets a directory of its own. A job of an inputs.cacheGroup has the group's:
// NAMESPACE_GROUP_HASH, HASH a digest of what decides the fetched bytes and who may read them (the fetched
// sources, endpoint, region, hubEndpoint, secretRef, the pods' ServiceAccount), so that no job finds a copy
// it could not have fetched.
func NodeCacheKey(tj *mlv1.TrainingJob) string {
	in := tj.Spec.Inputs
	if in == nil || in.CacheGroup == "" {
		return tj.Namespace + "_" + tj.Name + "_" + string(tj.UID)
	}
	parts := []string{in.Endpoint, in.Region, in.HubEndpoint, "", ""}
	if in.SecretRef != nil {
		parts[3] = in.SecretRef.Name
	}
	if wp := tj.Spec.WorkerPod; wp != nil {
		parts[4] = wp.ServiceAccountName // the fetcher's identity where no secretRef is given (IRSA, workload identity)
	}
	for _, f := range FetchedInputs(tj) {
		parts = append(parts, f.Name, f.Source.URI)
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return tj.Namespace + "_" + in.CacheGroup + "_" + hex.EncodeToString(sum[:8])
}

// InputsCacheClaim returns the input cache the operator creates (owned by the job) when a source is
// fetched: ReadWriteMany when more than one worker mounts it, inputs.cacheSize (default
// DefaultInputsCacheSize), inputs.storageClassName.
func InputsCacheClaim(tj *mlv1.TrainingJob) *corev1.PersistentVolumeClaim {
	size, class := DefaultInputsCacheSize, (*string)(nil)
	if in := tj.Spec.Inputs; in != nil {
		if in.CacheSize != nil {
			size = *in.CacheSize
		}
		class = in.StorageClassName
	}
	return jobClaim(tj, names.InputsCacheName(tj), size, class)
}

// InputDir returns where a worker finds an input: MODEL_DIR or DATASET_DIR.
func InputDir(in Input) string {
	switch {
	case in.Source.Fetched():
		return path.Join(InputsCachePath, in.Name)
	case in.Source.Kind == inputs.NFS:
		return path.Join(InputsRoot, in.Name) // the export's path is what is mounted
	}
	return path.Join(InputsRoot, in.Name, in.Source.Path)
}

// inputsEnv returns MODEL_DIR and DATASET_DIR for the inputs that are sources.
func inputsEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	var env []corev1.EnvVar
	for _, in := range Inputs(tj) {
		name := "MODEL_DIR"
		if in.Name == "dataset" {
			name = "DATASET_DIR"
		}
		env = append(env, value(name, InputDir(in)))
	}
	return env
}

// inputsVolumes returns the volumes of the input cache (with a gs:// source's credentials) and of the mounted sources.
func inputsVolumes(tj *mlv1.TrainingJob, opts Options) []corev1.Volume {
	var vols []corev1.Volume
	if len(FetchedInputs(tj)) > 0 {
		vols = append(vols, inputsCacheVolume(tj, opts))
		if in := tj.Spec.Inputs; in != nil && in.SecretRef != nil && hasKind(tj, inputs.GCS) {
			vols = append(vols, corev1.Volume{Name: inputsCredentialsVolume, VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: in.SecretRef.Name,
					Items: []corev1.KeyToPath{{Key: gcsCredentialsKey, Path: gcsCredentialsKey}}}}})
		}
	}
	for _, in := range Inputs(tj) {
		v := corev1.Volume{Name: in.Name + "-source"}
		switch in.Source.Kind {
		case inputs.PVC:
			v.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: in.Source.Host, ReadOnly: true}
		case inputs.NFS:
			v.NFS = &corev1.NFSVolumeSource{Server: in.Source.Host, Path: in.Source.ExportPath(), ReadOnly: true}
		default:
			continue
		}
		vols = append(vols, v)
	}
	return vols
}

// inputsCacheVolume returns the cache volume: the job's claim (Shared) or the job's own directory in the
// node's cache, created by the kubelet when missing (PerNode).
func inputsCacheVolume(tj *mlv1.TrainingJob, opts Options) corev1.Volume {
	v := corev1.Volume{Name: InputsCacheVolume}
	if InputsCacheMode(tj, opts) == mlv1.InputsCachePerNode {
		v.HostPath = &corev1.HostPathVolumeSource{Path: path.Join(opts.InputsNodeCacheDir, NodeCacheKey(tj)),
			Type: ptrTo(corev1.HostPathDirectoryOrCreate)}
		return v
	}
	v.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: names.InputsCacheName(tj)}
	return v
}

// inputsMounts returns the trainer's mounts of the cache and the mounted sources, all read-only.
func inputsMounts(tj *mlv1.TrainingJob) []corev1.VolumeMount {
	var mounts []corev1.VolumeMount
	if len(FetchedInputs(tj)) > 0 {
		mounts = append(mounts, corev1.VolumeMount{Name: InputsCacheVolume, MountPath: InputsCachePath, ReadOnly: true})
	}
	for _, in := range Inputs(tj) {
		if !in.Source.Fetched() {
			mounts = append(mounts, corev1.VolumeMount{Name: in.Name + "-source", MountPath: path.Join(InputsRoot, in.Name), ReadOnly: true})
		}
	}
	return mounts
}

// gcsCredentialsKey is the key of inputs.secretRef that holds a gs:// source's credentials, the only one
// of that Secret's keys in the fetcher's credentials volume.
const gcsCredentialsKey = "service-account.json"

// inputsSecretEnv returns the variables of the keys of inputs.secretRef the fetcher reads for the job's
// kinds of source, each optional: s3's AWS keys, hf's HF_TOKEN. The Secret's other keys never reach the
// fetcher.
func inputsSecretEnv(tj *mlv1.TrainingJob, secret string) []corev1.EnvVar {
	var keys []string
	if hasKind(tj, inputs.S3) {
		keys = append(keys, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
	}
	if hasKind(tj, inputs.Hub) {
		keys = append(keys, "HF_TOKEN")
	}
	env := make([]corev1.EnvVar, 0, len(keys))
	for _, k := range keys {
		env = append(env, corev1.EnvVar{Name: k, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: k, Optional: ptrTo(true)}}})
	}
	return env
}

// InputsBudget returns the most the job's fetched inputs may take in its cache, and the limit's name for
// the fetcher's error: inputs.cacheSize (default DefaultInputsCacheSize), and with a PerNode cache no more
// than the operator's InputsNodeCacheMaxSize.
func InputsBudget(tj *mlv1.TrainingJob, opts Options) (resource.Quantity, string) {
	size, limit := DefaultInputsCacheSize.DeepCopy(), "inputs.cacheSize (default "+DefaultInputsCacheSize.String()+")"
	if in := tj.Spec.Inputs; in != nil && in.CacheSize != nil {
		size, limit = in.CacheSize.DeepCopy(), "inputs.cacheSize "+in.CacheSize.String()
	}
	if most := opts.InputsNodeCacheMaxSize; most != nil && InputsCacheMode(tj, opts) == mlv1.InputsCachePerNode && most.Cmp(size) < 0 {
		size, limit = most.DeepCopy(), "the operator's node cache limit per job (--inputs-node-cache-max-size) "+most.String()
	}
	return size, limit
}

func hasKind(tj *mlv1.TrainingJob, k inputs.Kind) bool {
	for _, in := range FetchedInputs(tj) {
		if in.Source.Kind == k {
			return true
		}
	}
	return false
}

// inputsInitContainer returns the init container that fetches the job's sources into the cache (`manager
// fetch-inputs`, the operator's image); none when no source is fetched. Rank 0 copies what the cache lacks
// and reports it in its termination message; the other ranks wait until rank 0 has done it for their
// attempt. With a PerNode cache every rank fetches, one at a time on a node, so the first on each node
// copies and the others find it there. The credentials (inputs.secretRef) go to it alone.
func inputsInitContainer(tj *mlv1.TrainingJob, opts Options) []corev1.Container {
	fetched := FetchedInputs(tj)
	if len(fetched) == 0 {
		return nil
	}
	image, command := agentImage(opts)
	// The progress endpoint on the pod's own address: pods that share a network (a process node) must not collide.
	budget, limit := InputsBudget(tj, opts)
	args := []string{"fetch-inputs", "--dir=" + InputsCachePath, "--termination-log=" + corev1.TerminationMessagePathDefault,
		"--listen=$(POD_IP):" + itoa(InputsPort), "--max-bytes=" + strconv.FormatInt(budget.Value(), 10), "--budget-name=" + limit}
	mount := corev1.VolumeMount{Name: InputsCacheVolume, MountPath: InputsCachePath}
	if InputsCacheMode(tj, opts) == mlv1.InputsCachePerNode {
		args = append(args, "--per-node")
	}
	for _, in := range fetched {
		args = append(args, "--"+in.Name+"="+in.Source.URI)
	}
	c := corev1.Container{
		Name: names.InputsContainerName, Image: image, Command: command, Args: args,
		Env: []corev1.EnvVar{rankEnv(), podIPEnv(), {Name: "ATTEMPT_JOB", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
			FieldPath: "metadata.labels['batch.kubernetes.io/job-name']"}}}},
		Ports:                    []corev1.ContainerPort{{Name: "inputs", ContainerPort: InputsPort, Protocol: corev1.ProtocolTCP}},
		VolumeMounts:             []corev1.VolumeMount{mount},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext:          inputsSecurityContext(tj, opts),
		Resources:                inputsResources,
	}
	if in := tj.Spec.Inputs; in != nil {
		for name, v := range map[string]string{"AWS_ENDPOINT_URL_S3": in.Endpoint, "AWS_REGION": in.Region, "HF_ENDPOINT": in.HubEndpoint} {
			if v != "" {
				c.Env = append(c.Env, value(name, v))
			}
		}
		if in.SecretRef != nil {
			c.Env = append(c.Env, inputsSecretEnv(tj, in.SecretRef.Name)...)
			if hasKind(tj, inputs.GCS) {
				c.VolumeMounts = append(c.VolumeMounts,
					corev1.VolumeMount{Name: inputsCredentialsVolume, MountPath: inputsCredentialsPath, ReadOnly: true})
				c.Env = append(c.Env, value("GOOGLE_APPLICATION_CREDENTIALS", inputsCredentialsPath+"/"+gcsCredentialsKey))
			}
		}
	}
	slices.SortFunc(c.Env[3:], func(a, b corev1.EnvVar) int { return strings.Compare(a.Name, b.Name) }) // a stable spec hash
	return []corev1.Container{c}
}

// inputsSecurityContext returns the fetcher's security context: it writes the cache as the workers' user
// when the job sets one (so they own what it wrote), else as root allowed to write a volume's directories
// whoever owns them, as the checkpoint agent does on a volume. A node cache is written as root always: it
// is the node's directory, shared by the jobs of every user; what the fetcher writes there is readable by
// all.
func inputsSecurityContext(tj *mlv1.TrainingJob, opts Options) *corev1.SecurityContext {
	sc := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptrTo(false), ReadOnlyRootFilesystem: ptrTo(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	if InputsCacheMode(tj, opts) == mlv1.InputsCachePerNode {
		sc.RunAsNonRoot = ptrTo(false)
	} else if spec := tj.Spec.SecurityContext; spec != nil && spec.RunAsUser != nil {
		sc.RunAsUser, sc.RunAsGroup = spec.RunAsUser, spec.RunAsGroup
		return sc
	}
	sc.RunAsUser = ptrTo(int64(0))
	sc.Capabilities.Add = []corev1.Capability{"DAC_OVERRIDE", "FOWNER"}
	return sc
}
