package v1

import (
	corev1 "k8s.io/api/core/v1"
)

// WorkerPodSpec is what a team's job adds to its workers' pods beyond what the operator builds. The
// operator's own wiring (its environment, ports, volumes, mount paths and container names) cannot be
// replaced: admission refuses what would collide with it, naming the field.
// +kubebuilder:validation:XValidation:rule="!has(self.initContainers) || !has(self.sidecars) || !self.initContainers.exists(i, self.sidecars.exists(s, s.name == i.name))",message="workerPod.initContainers and workerPod.sidecars must not share a name",fieldPath=".sidecars"
type WorkerPodSpec struct {
	// labels are added to every worker pod; the keys of the operator, of the Job controller and of Kueue
	// are refused.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('ml.example.com/') && !k.startsWith('batch.kubernetes.io/') && !k.startsWith('kueue.x-k8s.io/') && !(k in ['controller-uid', 'job-name', 'app.kubernetes.io/managed-by']))",message="workerPod.labels must not set the operator's (ml.example.com/*, app.kubernetes.io/managed-by), the Job controller's (batch.kubernetes.io/*, controller-uid, job-name) or the queue's (kueue.x-k8s.io/*) labels"
	Labels map[string]string `json:"labels,omitempty"`

	// annotations are added to every worker pod, for example sidecar.istio.io/inject: "false". Keys of the
	// operator (ml.example.com/) are refused.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('ml.example.com/'))",message="workerPod.annotations must not set the operator's annotations (ml.example.com/*)"
	Annotations map[string]string `json:"annotations,omitempty"`

	// serviceAccountName is the ServiceAccount the workers and the checkpoint agent run as, the identity
	// object storage is reached with when no secretRef is named; unset, the namespace's default.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// imagePullSecrets are Secrets of the job's namespace holding the credentials of a private registry.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// volumes are added to every worker pod (a dataset's claim, a Secret, a ConfigMap, an emptyDir) to be
	// mounted with volumeMounts; the operator's volume names and hostPath volumes are refused.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	// +gen-api:begin=workerpod-volumes (hack/gen-api writes this rule from builders.ReservedVolumeNames)
	// +kubebuilder:validation:XValidation:rule="self.all(v, !(v.name in ['trainingjob-config', 'checkpoints', 'checkpoint-credentials', 'mpi-ssh', 'mpi-run', 'dshm', 'inputs-cache', 'inputs-credentials', 'model-source', 'dataset-source', 'trainingjob-bin']))",message="workerPod.volumes must not use a volume name of the operator (trainingjob-config, checkpoints, checkpoint-credentials, mpi-ssh, mpi-run, dshm, inputs-cache, inputs-credentials, model-source, dataset-source, trainingjob-bin)"
	// +gen-api:end
	// +kubebuilder:validation:XValidation:rule="self.all(v, !has(v.hostPath))",message="workerPod.volumes must not be hostPath volumes: a worker would read and write its node's files"
	Volumes []corev1.Volume `json:"volumes,omitempty"`

	// volumeMounts mount volumes of workerPod.volumes in the trainer container, for example a dataset's
	// claim at /data; a mount of the operator's volumes, or at one of its paths, is refused.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=mountPath
	// +gen-api:begin=workerpod-volumemounts (hack/gen-api writes this rule from builders.ReservedVolumeNames)
	// +kubebuilder:validation:XValidation:rule="self.all(m, !(m.name in ['trainingjob-config', 'checkpoints', 'checkpoint-credentials', 'mpi-ssh', 'mpi-run', 'dshm', 'inputs-cache', 'inputs-credentials', 'model-source', 'dataset-source', 'trainingjob-bin']))",message="workerPod.volumeMounts must not mount a volume of the operator (trainingjob-config, checkpoints, checkpoint-credentials, mpi-ssh, mpi-run, dshm, inputs-cache, inputs-credentials, model-source, dataset-source, trainingjob-bin)"
	// +gen-api:end
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts,omitempty"`

	// envFrom sets the trainer's environment from every key of Secrets and ConfigMaps; the operator's own
	// variables win over a key of the same name.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	EnvFrom []corev1.EnvFromSource `json:"envFrom,omitempty"`

	// runtimeClassName is the RuntimeClass of the workers' pods (for example nvidia, or a sandbox).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`

	// initContainers run in every worker pod, one after the other, after the operator's own and before the
	// trainer; a failing one fails its rank as the trainer would.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	InitContainers []WorkerContainer `json:"initContainers,omitempty"`

	// sidecars run beside the trainer in every worker pod for as long as it runs (native sidecars); they may
	// not serve the trainer's or the operator's ports.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	Sidecars []WorkerContainer `json:"sidecars,omitempty"`
}

// WorkerContainer is an init or sidecar container of the workers' pods, run as hardened as the operator's
// own (the workers' user, no privilege escalation, no capabilities).
type WorkerContainer struct {
	// name of the container; the operator's container names are refused.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +gen-api:begin=container-names (hack/gen-api writes this rule from builders.ReservedContainerNames)
	// +kubebuilder:validation:XValidation:rule="!(self in ['trainer', 'checkpoint-agent', 'resume-check', 'fetch-inputs', 'supervisor'])",message="the container names trainer, checkpoint-agent, resume-check, fetch-inputs and supervisor are the operator's"
	// +gen-api:end
	Name string `json:"name"`

	// image of the container.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image"`

	// imagePullPolicy is Always, IfNotPresent or Never; unset, Kubernetes' default for the image's tag.
	// +optional
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// command replaces the image's entrypoint.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Command []string `json:"command,omitempty"`

	// args are the command's arguments.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	Args []string `json:"args,omitempty"`

	// env is the container's environment.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	Env []corev1.EnvVar `json:"env,omitempty"`

	// envFrom sets the container's environment from every key of Secrets and ConfigMaps.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	EnvFrom []corev1.EnvFromSource `json:"envFrom,omitempty"`

	// volumeMounts mount volumes of workerPod.volumes in the container; the operator's volumes are refused.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=mountPath
	// +gen-api:begin=container-volumemounts (hack/gen-api writes this rule from builders.ReservedVolumeNames)
	// +kubebuilder:validation:XValidation:rule="self.all(m, !(m.name in ['trainingjob-config', 'checkpoints', 'checkpoint-credentials', 'mpi-ssh', 'mpi-run', 'dshm', 'inputs-cache', 'inputs-credentials', 'model-source', 'dataset-source', 'trainingjob-bin']))",message="an init or sidecar container must not mount a volume of the operator (trainingjob-config, checkpoints, checkpoint-credentials, mpi-ssh, mpi-run, dshm, inputs-cache, inputs-credentials, model-source, dataset-source, trainingjob-bin)"
	// +gen-api:end
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts,omitempty"`

	// resources are the container's requests and limits (a sidecar's add to the pod's; an init container's
	// count while it runs).
	// +optional
	Resources *Resources `json:"resources,omitempty"`

	// ports a sidecar serves (for a Service, or a PodMonitor).
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	Ports []corev1.ContainerPort `json:"ports,omitempty"`
}
