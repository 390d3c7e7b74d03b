package builders

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"regexp"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// DefaultGPUResource is the extended resource gpusPerWorker counts unless spec.gpuResourceName or the
// operator's --gpu-resource-name (Options.GPUResource) names another.
const DefaultGPUResource corev1.ResourceName = "nvidia.com/gpu"

// command returns spec.command, or the default runner's for a pytorch job that names neither image,
// command nor args.
func command(tj *mlv1.TrainingJob) []string {
	if UsesRunner(tj) {
		return append([]string(nil), RunnerCommand...)
	}
	return tj.Spec.Command
}

// ExtendedResourceName matches the names gpuResourceName and --gpu-resource-name accept (the CRD's
// pattern): DOMAIN/NAME.
var ExtendedResourceName = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z0-9]([-a-z0-9]*[a-z0-9])?` +
	`/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// GPUResourceName returns the extended resource the job's gpusPerWorker counts: spec.gpuResourceName, else
// the operator's default, else nvidia.com/gpu.
func GPUResourceName(tj *mlv1.TrainingJob, opts Options) corev1.ResourceName {
	switch {
	case tj.Spec.GPUResourceName != "":
		return corev1.ResourceName(tj.Spec.GPUResourceName)
	case opts.GPUResource != "":
		return opts.GPUResource
	}
	return DefaultGPUResource
}

// Job builds the Indexed Job that runs the workers: one pod per rank, host name "<job>-<rank>" under the
// headless Service, so rank 0 has a stable DNS name.
func Job(tj *mlv1.TrainingJob, opts Options) *batchv1.Job {
	labels := names.AttemptLabels(tj)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: names.JobName(tj), Namespace: tj.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			CompletionMode:   ptr.To(batchv1.IndexedCompletion),
			Completions:      ptr.To(tj.Spec.NumWorkers),
			Parallelism:      ptr.To(tj.Spec.NumWorkers),
			BackoffLimit:     ptr.To(jobBackoffLimit(tj)),
			PodFailurePolicy: podFailurePolicy(tj),
			SuccessPolicy:    mpiSuccessPolicy(tj),
			Suspend:          ptr.To(JobSuspend(tj)),
			// A replacement pod waits until the failed one is gone, so two pods never share a rank's host name.
			PodReplacementPolicy: ptr.To(batchv1.Failed),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels(tj), Annotations: podAnnotations(tj)},
				Spec:       podSpec(tj, opts),
			},
		},
	}
	sharedMemory(&job.Spec.Template.Spec, tj, opts)
	overlay(&job.Spec.Template, tj, opts)
	job.Annotations = map[string]string{}
	inPlaceJob(tj, opts, job)
	job.Annotations[names.SpecHashAnnotation] = SpecHash(job)
	return job
}

// jobBackoffLimit returns the Job's backoffLimit: failurePolicy.backoffLimit with restartPolicy OnFailure,
// else 0.
//
// The failure policy lives in the TrainingJob, not in the Job (whose deadline and backoff restart with
// every attempt): the Job runs one attempt. With restartPolicy Gang or Never its first failed pod fails it
// (backoffLimit 0) and the JobController decides from the pods whether a new attempt starts; a disrupted
// pod (preempted, evicted, its node lost) fails it through the pod failure policy, whose message names
// DisruptionTarget, so the restart is not counted even when the pod is gone (a job that restarts in place
// differs, see inPlaceJob). With OnFailure the Job
// restarts containers in place within failurePolicy.backoffLimit. failurePolicy.activeDeadlineSeconds is
// enforced by the JobController over all attempts.
func jobBackoffLimit(tj *mlv1.TrainingJob) int32 {
	if tj.RestartPolicy() == mlv1.RestartOnFailure {
		return tj.BackoffLimit()
	}
	return 0
}

func podFailurePolicy(tj *mlv1.TrainingJob) *batchv1.PodFailurePolicy {
	if tj.RestartPolicy() == mlv1.RestartOnFailure {
		return nil // only valid with restartPolicy Never
	}
	return &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
		Action:          batchv1.PodFailurePolicyActionFailJob,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
	}}}
}

// podRestartPolicy returns the pods' restart policy: containers restart in place only with OnFailure.
func podRestartPolicy(tj *mlv1.TrainingJob) corev1.RestartPolicy {
	if tj.RestartPolicy() == mlv1.RestartOnFailure {
		return corev1.RestartPolicyOnFailure
	}
	return corev1.RestartPolicyNever
}

// JobSuspend returns the suspend field of a Job built without an admission: true when the user suspends the
// TrainingJob, and when a queue decides when it starts (the Job of a queued job is created only once
// Kueue has admitted its Workload, by AdmittedJob).
func JobSuspend(tj *mlv1.TrainingJob) bool { return tj.Suspended() || QueueName(tj) != "" }

// SpecHash returns a hash that identifies what a Job runs: its spec without the suspend field. A suspended
// Job whose hash differs from the one built from the current TrainingJob is stale.
func SpecHash(job *batchv1.Job) string {
	spec := job.Spec.DeepCopy()
	spec.Suspend = nil
	data, _ := json.Marshal(spec) // a JobSpec always marshals
	h := fnv.New64a()
	_, _ = h.Write(data)
	return fmt.Sprintf("%016x", h.Sum64())
}

func podSpec(tj *mlv1.TrainingJob, opts Options) corev1.PodSpec {
	spec := corev1.PodSpec{
		SecurityContext: podSecurityContext(tj),
		Subdomain:       names.ServiceName(tj),
		RestartPolicy:   podRestartPolicy(tj),
		Containers:      []corev1.Container{container(tj, opts)},
		Volumes: []corev1.Volume{{
			Name: names.ConfigVolumeName,
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: names.ConfigMapName(tj)},
			}},
		}},
	}
	if mountedCheckpoints(tj) {
		spec.Volumes = append(spec.Volumes, checkpointVolume(tj))
	}
	spec.Volumes = append(spec.Volumes, mpiVolumes(tj)...)
	if tj.CheckpointEnabled() {
		spec.InitContainers = agentInitContainers(tj, opts)
		spec.Volumes = append(spec.Volumes, storageVolumes(tj)...)
	}
	spec.InitContainers = append(spec.InitContainers, inputsInitContainer(tj, opts)...)
	spec.Volumes = append(spec.Volumes, inputsVolumes(tj, opts)...)
	spec.InitContainers = append(spec.InitContainers, supervisorInitContainer(tj, opts)...)
	spec.Volumes = append(spec.Volumes, supervisorVolumes(tj)...)
	spec.Volumes = append(spec.Volumes, stateVolumes(tj, opts)...)
	if s := tj.Spec.Scheduling; s != nil {
		spec.PriorityClassName = s.Priority
		// Copies: the overlay adds to them, and builders never change the TrainingJob.
		spec.NodeSelector = maps.Clone(s.NodeSelector)
		spec.Affinity = s.Affinity.DeepCopy()
		spec.Tolerations = slices.Clone(s.Tolerations)
		spec.SchedulerName = schedulerName(tj)
	}
	spec.TerminationGracePeriodSeconds = TerminationGrace(tj)
	avoidNodes(&spec, tj.Status.AvoidedNodes)
	return spec
}

// avoidNodes keeps the pods off the avoided nodes: node affinity metadata.name NotIn them, added to every
// required node selector term (terms are ORed: one without it would let the pods back on).
func avoidNodes(spec *corev1.PodSpec, avoided []mlv1.AvoidedNode) {
	if len(avoided) == 0 {
		return
	}
	// One requirement per node: a node field selector takes one value (the API server refuses more), and
	// a term's requirements all hold together.
	notIn := make([]corev1.NodeSelectorRequirement, len(avoided))
	for i, a := range avoided {
		notIn[i] = corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{a.Name}}
	}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	req := na.RequiredDuringSchedulingIgnoredDuringExecution
	if len(req.NodeSelectorTerms) == 0 {
		req.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	for i := range req.NodeSelectorTerms {
		t := &req.NodeSelectorTerms[i]
		t.MatchFields = append(t.MatchFields, notIn...)
	}
}

func container(tj *mlv1.TrainingJob, opts Options) corev1.Container {
	mounts := []corev1.VolumeMount{{Name: names.ConfigVolumeName, MountPath: names.ConfigMountPath, ReadOnly: true}}
	var envFrom []corev1.EnvFromSource
	if mountedCheckpoints(tj) {
		mounts = append(mounts, corev1.VolumeMount{Name: CheckpointVolumeName, MountPath: CheckpointMountPath})
	} else if tj.CheckpointEnabled() {
		envFrom = storageEnvFrom(tj)
		mounts = append(mounts, storageMounts(tj)...)
	}
	mounts = append(mounts, inputsMounts(tj)...)
	ports := []corev1.ContainerPort{
		{Name: names.MasterPortName, ContainerPort: tj.Spec.Networking.MasterPort, Protocol: corev1.ProtocolTCP},
		{Name: names.MetricsPortName, ContainerPort: tj.MetricsPort(), Protocol: corev1.ProtocolTCP},
	}
	cmd, args := command(tj), tj.Spec.Args
	if tj.MPIEnabled() {
		cmd, args = mpiCommand(tj)
		mounts = append(mounts, mpiMounts()...)
		ports = append(ports, corev1.ContainerPort{Name: MPIPortName, ContainerPort: MPISSHPort, Protocol: corev1.ProtocolTCP})
	}
	c := corev1.Container{
		Name:         names.ContainerName,
		Image:        Image(tj, opts),
		Command:      cmd,
		Args:         args,
		Env:          WorkerEnv(tj, opts),
		EnvFrom:      envFrom,
		Ports:        ports,
		Resources:    Resources(tj, opts),
		VolumeMounts: mounts,
		// A crash's last log lines become its termination message, and so the failure reason.
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext:          workerSecurityContext(tj),
	}
	supervise(tj, &c)
	restartInPlace(tj, opts, &c)
	return c
}

// Resources returns spec.resources with the GPU resource (GPUResourceName) set to gpusPerWorker in the limits
// (the scheduler takes an extended resource's request from its limit): gpusPerWorker wins over a
// different count under an operator-wide resource name, which admission cannot see. CPU-only workers get
// no GPU entry.
func Resources(tj *mlv1.TrainingJob, opts Options) corev1.ResourceRequirements {
	var r corev1.ResourceRequirements
	if res := tj.Spec.Resources.DeepCopy(); res != nil {
		r.Limits, r.Requests = res.Limits, res.Requests
	}
	gpus := tj.GPUsPerWorker()
	if gpus == 0 {
		return r
	}
	if r.Limits == nil {
		r.Limits = corev1.ResourceList{}
	}
	r.Limits[GPUResourceName(tj, opts)] = *resource.NewQuantity(int64(gpus), resource.DecimalSI)
	return r
}
