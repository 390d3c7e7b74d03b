package builders

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/pattern"
	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/recognize"
)

// The shared-memory volume every worker gets at /dev/shm (resources.sharedMemory).
const (
	SharedMemoryVolumeName = "dshm"
	SharedMemoryMountPath  = "/dev/shm"
)

// DefaultSharedMemory is /dev/shm's size for a worker without a memory limit when neither the job nor
// the cluster's worker defaults say otherwise.
var DefaultSharedMemory = resource.MustParse("8Gi")

// ReservedVolumeNames and ReservedMountPaths are the operator's own in a worker pod: workerPod and the
// cluster's worker defaults may not use them (the CRD's CEL rule on workerPod.volumes lists the names, the
// ValidatingAdmissionPolicy trainingjob-worker-pod the paths; TestReservedVolumesMatchAdmission keeps them
// equal).
var (
	ReservedVolumeNames = []string{names.ConfigVolumeName, CheckpointVolumeName, credentialsVol, mpiSSHVolume, mpiRunVolume,
		SharedMemoryVolumeName, InputsCacheVolume, inputsCredentialsVolume, "model-source", "dataset-source", SupervisorVolume}
	ReservedMountPaths = []string{names.ConfigMountPath, CheckpointMountPath, SharedMemoryMountPath, "/etc/mpi",
		"/var/run/secrets/trainingjob", InputsRoot, SupervisorDir}
)

// SharedMemory returns the size of the worker's /dev/shm volume, nil when it has none:
// resources.sharedMemory ("0": none), else half the worker's memory limit, else the cluster's default
// (WorkerDefaults.SharedMemory, "0": none), else DefaultSharedMemory.
func SharedMemory(tj *mlv1.TrainingJob, opts Options) *resource.Quantity {
	size := DefaultSharedMemory.DeepCopy()
	r := tj.Spec.Resources
	switch {
	case r != nil && r.SharedMemory != nil:
		size = r.SharedMemory.DeepCopy()
	case memoryLimit(tj) > 0:
		size = *resource.NewQuantity(memoryLimit(tj)/2, resource.BinarySI)
	case opts.WorkerDefaults.SharedMemory != nil:
		size = opts.WorkerDefaults.SharedMemory.DeepCopy()
	}
	if size.IsZero() {
		return nil
	}
	return &size
}

// memoryLimit returns the worker's memory limit in bytes, 0 without one.
func memoryLimit(tj *mlv1.TrainingJob) int64 {
	if r := tj.Spec.Resources; r != nil {
		if q, ok := r.Limits[corev1.ResourceMemory]; ok {
			return q.Value()
		}
	}
	return 0
}

// sharedMemory adds the in-memory /dev/shm volume and its mount in the trainer.
func sharedMemory(spec *corev1.PodSpec, tj *mlv1.TrainingJob, opts Options) {
	size := SharedMemory(tj, opts)
	if size == nil {
		return
	}
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: SharedMemoryVolumeName, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: size}}})
	trainer := &spec.Containers[0]
	trainer.VolumeMounts = append(trainer.VolumeMounts, corev1.VolumeMount{Name: SharedMemoryVolumeName, MountPath: SharedMemoryMountPath})
}

// overlay adds to the built pod template the job's workerPod, then the cluster's worker defaults beneath
// everything already there: the operator's wiring first, the job's own settings next, a default only where
// neither set that key, name or path. The one place pods are merged.
func overlay(tmpl *corev1.PodTemplateSpec, tj *mlv1.TrainingJob, opts Options) {
	if wp := tj.Spec.WorkerPod; wp != nil {
		addMissing(&tmpl.Labels, wp.Labels)
		addMissing(&tmpl.Annotations, wp.Annotations)
		spec, trainer := &tmpl.Spec, &tmpl.Spec.Containers[0]
		spec.ServiceAccountName = wp.ServiceAccountName
		spec.RuntimeClassName = wp.RuntimeClassName
		wp = wp.DeepCopy() // builders never share the TrainingJob's slices
		spec.ImagePullSecrets = append(spec.ImagePullSecrets, wp.ImagePullSecrets...)
		spec.Volumes = append(spec.Volumes, wp.Volumes...)
		trainer.VolumeMounts = append(trainer.VolumeMounts, wp.VolumeMounts...)
		trainer.EnvFrom = append(trainer.EnvFrom, wp.EnvFrom...)
		for _, c := range wp.InitContainers {
			spec.InitContainers = append(spec.InitContainers, workerContainer(c, nil))
		}
		for _, c := range wp.Sidecars {
			spec.InitContainers = append(spec.InitContainers, workerContainer(c, ptr.To(corev1.ContainerRestartPolicyAlways)))
		}
	}
	opts.WorkerDefaults.apply(tmpl)
}

// workerContainer returns the container of a workerPod init container (restart nil) or native sidecar
// (restart Always), as hardened as the operator's own containers: the pod's user, no privilege escalation,
// no capabilities.
func workerContainer(c mlv1.WorkerContainer, restart *corev1.ContainerRestartPolicy) corev1.Container {
	out := corev1.Container{Name: c.Name, Image: c.Image, ImagePullPolicy: c.ImagePullPolicy, Command: c.Command, Args: c.Args,
		Env: c.Env, EnvFrom: c.EnvFrom, VolumeMounts: c.VolumeMounts, Ports: c.Ports, RestartPolicy: restart,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		}}
	if r := c.Resources; r != nil {
		out.Resources = corev1.ResourceRequirements{Limits: r.Limits, Requests: r.Requests}
	}
	return out
}

// addMissing adds the entries of from whose keys *to lacks.
func addMissing(to *map[string]string, from map[string]string) {
	for k, v := range from {
		if *to == nil {
			*to = map[string]string{}
		}
		if _, ok := (*to)[k]; !ok {
			(*to)[k] = v
		}
	}
}

// WorkerDefaults are what the platform team sets once for every worker pod of the cluster (the manager's
// --worker-defaults file, the chart's workerDefaults): each applies beneath a job's own settings, never over
// them. JSON/YAML field names as in a pod.
type WorkerDefaults struct {
	// Labels and Annotations are added where a pod lacks the key.
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// NodeSelector entries are added where the job's nodeSelector lacks the key.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations are added unless the job has the same one.
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// PriorityClassName applies to jobs without scheduling.priority.
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// Env is added to the trainer where neither the operator nor the job sets the name (NCCL settings,
	// a proxy).
	Env []corev1.EnvVar `json:"env,omitempty"`
	// ImagePullSecrets are added unless the job names the same Secret.
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	// Volumes are added unless the job has a volume of that name; VolumeMounts mount them in the trainer
	// unless the job mounts something at that path.
	Volumes      []corev1.Volume      `json:"volumes,omitempty"`
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts,omitempty"`
	// SharedMemory is /dev/shm's size for workers without a memory limit whose job does not set
	// resources.sharedMemory; "0" gives them none. Unset: DefaultSharedMemory.
	SharedMemory *resource.Quantity `json:"sharedMemory,omitempty"`
}

// apply adds the defaults beneath what tmpl has.
func (d WorkerDefaults) apply(tmpl *corev1.PodTemplateSpec) {
	addMissing(&tmpl.Labels, d.Labels)
	addMissing(&tmpl.Annotations, d.Annotations)
	spec, trainer := &tmpl.Spec, &tmpl.Spec.Containers[0]
	addMissing(&spec.NodeSelector, d.NodeSelector)
	for _, t := range d.Tolerations {
		if !slices.ContainsFunc(spec.Tolerations, func(o corev1.Toleration) bool { return equality.Semantic.DeepEqual(o, t) }) {
			spec.Tolerations = append(spec.Tolerations, *t.DeepCopy())
		}
	}
	if spec.PriorityClassName == "" {
		spec.PriorityClassName = d.PriorityClassName
	}
	for _, e := range d.Env {
		if !slices.ContainsFunc(trainer.Env, func(o corev1.EnvVar) bool { return o.Name == e.Name }) {
			trainer.Env = append(trainer.Env, *e.DeepCopy())
		}
	}
	for _, s := range d.ImagePullSecrets {
		if !slices.Contains(spec.ImagePullSecrets, s) {
			spec.ImagePullSecrets = append(spec.ImagePullSecrets, s)
		}
	}
	added := map[string]bool{}
	for _, v := range d.Volumes {
		if !slices.ContainsFunc(spec.Volumes, func(o corev1.Volume) bool { return o.Name == v.Name }) {
			spec.Volumes, added[v.Name] = append(spec.Volumes, *v.DeepCopy()), true
		}
	}
	for _, m := range d.VolumeMounts {
		if added[m.Name] && !slices.ContainsFunc(trainer.VolumeMounts, func(o corev1.VolumeMount) bool { return o.MountPath == m.MountPath }) {
			trainer.VolumeMounts = append(trainer.VolumeMounts, m)
		}
	}
}

// AppliedDefaults returns what of the cluster's worker defaults the job's pods got (for the event the
// JobController records when it creates them): empty when nothing applied.
func AppliedDefaults(tj *mlv1.TrainingJob, opts Options) []string {
	without := opts
	without.WorkerDefaults = WorkerDefaults{SharedMemory: opts.WorkerDefaults.SharedMemory}
	bare, with := Job(tj, without).Spec.Template, Job(tj, opts).Spec.Template
	var out []string
	diffKeys := func(what string, a, b map[string]string) {
		var keys []string
		for k := range b {
			if _, ok := a[k]; !ok {
				keys = append(keys, k)
			}
		}
		if len(keys) > 0 {
			sort.Strings(keys)
			out = append(out, what+" "+strings.Join(keys, ","))
		}
	}
	diffKeys("labels", bare.Labels, with.Labels)
	diffKeys("annotations", bare.Annotations, with.Annotations)
	diffKeys("nodeSelector", bare.Spec.NodeSelector, with.Spec.NodeSelector)
	diffKeys("env", envNames(bare.Spec.Containers[0].Env), envNames(with.Spec.Containers[0].Env))
	diffKeys("volumes", volumeNames(bare.Spec.Volumes), volumeNames(with.Spec.Volumes))
	if n := len(with.Spec.Tolerations) - len(bare.Spec.Tolerations); n > 0 {
		out = append(out, fmt.Sprintf("tolerations %d", n))
	}
	if n := len(with.Spec.ImagePullSecrets) - len(bare.Spec.ImagePullSecrets); n > 0 {
		out = append(out, fmt.Sprintf("imagePullSecrets %d", n))
	}
	if bare.Spec.PriorityClassName != with.Spec.PriorityClassName {
		out = append(out, "priorityClassName "+with.Spec.PriorityClassName)
	}
	if r := tj.Spec.Resources; opts.WorkerDefaults.SharedMemory != nil && (r == nil || r.SharedMemory == nil) && memoryLimit(tj) == 0 {
		out = append(out, "sharedMemory "+opts.WorkerDefaults.SharedMemory.String())
	}
	return out
}

func envNames(env []corev1.EnvVar) map[string]string {
	m := map[string]string{}
	for _, e := range env {
		m[e.Name] = ""
	}
	return m
}

func volumeNames(vols []corev1.Volume) map[string]string {
	m := map[string]string{}
	for _, v := range vols {
		m[v.Name] = ""
	}
	return m
}

// Check returns an error for defaults that would break the operator's own wiring, as admission refuses the
// same in a job's workerPod and env: its labels and annotations, volume names and mount paths, reserved
// variables; and mounts of volumes the defaults do not have.
func (d WorkerDefaults) Check() error {
	var errs []string
	for k := range d.Labels {
		if ReservedLabelKey(k) {
			errs = append(errs, "labels: "+k+" is the operator's, the Job controller's or the queue's")
		}
	}
	for k := range d.Annotations {
		if strings.HasPrefix(k, mlv1.GroupVersion.Group+"/") {
			errs = append(errs, "annotations: "+k+" is the operator's")
		}
	}
	for _, e := range d.Env {
		if slices.Contains(ReservedEnvNames, e.Name) {
			errs = append(errs, "env: "+e.Name+" carries the job's identity, rendezvous or checkpoint location")
		}
	}
	vols := map[string]bool{}
	for _, v := range d.Volumes {
		if vols[v.Name] = true; slices.Contains(ReservedVolumeNames, v.Name) {
			errs = append(errs, "volumes: "+v.Name+" is a volume name of the operator")
		}
	}
	for _, m := range d.VolumeMounts {
		if ReservedMountPath(m.MountPath) {
			errs = append(errs, "volumeMounts: "+m.MountPath+" is at, above or below a path of the operator")
		}
		if !vols[m.Name] {
			errs = append(errs, "volumeMounts: "+m.Name+" is not a volume of the defaults")
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// ReservedContainerNames are the operator's containers in a worker pod: workerPod's init and sidecar
// containers may not take them (the CRD's rule on their name lists them too).
var ReservedContainerNames = []string{names.ContainerName, names.AgentContainerName, ResumeCheckContainerName, names.InputsContainerName,
	SupervisorContainerName}

// CheckWorkerPod returns an error when a job's workerPod fails the builder's own check, the last line
// behind admission (the CRD's rules, and the optional ValidatingAdmissionPolicy for what is beyond their
// cost): no init or sidecar container takes a name of the operator's, and every mount (the trainer's and
// theirs) names a volume of workerPod.volumes, at none of the operator's paths in the trainer. So no
// container a tenant writes mounts the operator's volumes (the input cache, the checkpoint credentials, the
// SSH keys).
func CheckWorkerPod(tj *mlv1.TrainingJob) error {
	wp := tj.Spec.WorkerPod
	if wp == nil {
		return nil
	}
	vols := volumeNames(wp.Volumes)
	var errs []string
	for _, m := range wp.VolumeMounts {
		errs = append(errs, checkMount("spec.workerPod.volumeMounts", m, vols)...)
		if ReservedMountPath(m.MountPath) {
			errs = append(errs, "spec.workerPod.volumeMounts: "+m.MountPath+" is at, above or below a path of the operator")
		}
	}
	containers := map[string][]mlv1.WorkerContainer{"spec.workerPod.initContainers": wp.InitContainers, "spec.workerPod.sidecars": wp.Sidecars}
	for field, cs := range containers {
		for _, c := range cs {
			if slices.Contains(ReservedContainerNames, c.Name) {
				errs = append(errs, field+": the container name "+c.Name+" is the operator's")
			}
			for _, m := range c.VolumeMounts {
				errs = append(errs, checkMount(field+"["+c.Name+"].volumeMounts", m, vols)...)
			}
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// CheckPatterns returns an error naming each of the job's regular expressions that package pattern does
// not compile (too long, too large a program, not RE2): failurePolicy.rules[].onMessage and
// monitoring.progressPattern, which must also name a figure the supervisor reads. The API server never
// compiles them (a tenant's pattern would cost every write of the job); the JobController checks them,
// once per pattern, before the first Job.
func CheckPatterns(tj *mlv1.TrainingJob) error {
	var errs []string
	if fp := tj.Spec.FailurePolicy; fp != nil {
		for i, r := range fp.Rules {
			if r.OnMessage == "" {
				continue
			}
			if _, err := pattern.Compile(r.OnMessage); err != nil {
				errs = append(errs, fmt.Sprintf("spec.failurePolicy.rules[%d].onMessage %v", i, err))
			}
		}
	}
	if err := checkProgressPattern(tj); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// checkProgressPattern returns an error unless monitoring.progressPattern, when set, compiles and names a
// figure the supervisor reads.
func checkProgressPattern(tj *mlv1.TrainingJob) error {
	m := tj.Spec.Monitoring
	if m == nil || m.ProgressPattern == "" {
		return nil
	}
	re, err := pattern.Compile(m.ProgressPattern)
	if err != nil {
		return fmt.Errorf("spec.monitoring.progressPattern %w", err)
	}
	for _, n := range re.SubexpNames() {
		if slices.Contains(ProgressPatternGroups, n) {
			return nil
		}
	}
	return fmt.Errorf("spec.monitoring.progressPattern names none of the groups %s", strings.Join(ProgressPatternGroups, ", "))
}

// ProgressPatternGroups are the named groups of monitoring.progressPattern the supervisor reads.
var ProgressPatternGroups = recognize.FieldNames()

// checkMount returns the error of a mount that does not name a volume of the job's workerPod.volumes
// (vols), which are never the operator's; nil for one that does.
func checkMount(field string, m corev1.VolumeMount, vols map[string]string) []string {
	if _, ok := vols[m.Name]; !ok || slices.Contains(ReservedVolumeNames, m.Name) {
		return []string{field + ": " + m.Name + " is not a volume of spec.workerPod.volumes"}
	}
	return nil
}

// ReservedLabelKey reports whether k is a pod label key that only the operator, Kubernetes' Job controller or the
// queue sets.
func ReservedLabelKey(k string) bool {
	for _, p := range []string{mlv1.GroupVersion.Group + "/", "batch.kubernetes.io/", "kueue.x-k8s.io/"} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return slices.Contains([]string{"controller-uid", "job-name", names.ManagedByLabel}, k)
}

// ReservedMountPath reports whether a mount at p is at, above or below one of the operator's paths, which
// it would hide or replace.
func ReservedMountPath(p string) bool {
	dir := strings.TrimSuffix(p, "/") + "/"
	return slices.ContainsFunc(ReservedMountPaths, func(r string) bool {
		return r == strings.TrimSuffix(p, "/") || strings.HasPrefix(r+"/", dir) || strings.HasPrefix(p, r+"/")
	})
}
