package v1

import (
	corev1 "k8s.io/api/core/v1"
)

// WorkerPodSpec is what a team's job adds to its workers' pods beyond what the operator builds: their
// metadata, identity, registry credentials, volumes mounted in the trainer, environment from Secrets and
// ConfigMaps, and runtime class. The operator's own pod wiring (its environment,
// ports, volumes and mount paths, the checkpoint agent, the names it derives) cannot be replaced: admission
// refuses what would collide with it, naming the field.
type WorkerPodSpec struct {
	// labels are added to every worker pod (cost allocation, a service mesh's, a policy engine's). Keys of
	// the operator (ml.example.com/), of the Job controller (batch.kubernetes.io/, controller-uid, job-name)
	// and of the queue (kueue.x-k8s.io/) are refused.
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

	// serviceAccountName is the ServiceAccount the workers (and the checkpoint agent beside them) run as:
	// the identity a cloud gives a pod (EKS's IAM roles for service accounts, GKE's workload identity), which
	// object storage then uses when checkpoint.storage names no secretRef. Unset: the namespace's default.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// imagePullSecrets are Secrets of the job's namespace holding the credentials of a private registry.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// volumes are added to every worker pod: a dataset's claim, a Secret, a ConfigMap, an emptyDir. Mount
	// them in the trainer with volumeMounts. The operator's volume names are refused (trainingjob-config,
	// checkpoints, checkpoint-credentials, mpi-ssh, mpi-run, dshm).
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:XValidation:rule="self.all(v, !(v.name in ['trainingjob-config', 'checkpoints', 'checkpoint-credentials', 'mpi-ssh', 'mpi-run', 'dshm']))",message="workerPod.volumes must not use a volume name of the operator (trainingjob-config, checkpoints, checkpoint-credentials, mpi-ssh, mpi-run, dshm)"
	// +kubebuilder:validation:XValidation:rule="self.all(v, !has(v.hostPath))",message="workerPod.volumes must not be hostPath volumes: a worker would read and write its node's files"
	Volumes []corev1.Volume `json:"volumes,omitempty"`

	// volumeMounts mount volumes of workerPod.volumes in the trainer container, for example a dataset's
	// claim at /data (readOnly). A mount of another volume, or at, above or below a path of the operator
	// (/etc/trainingjob, /checkpoints, /dev/shm, /etc/mpi, /var/run/secrets/trainingjob), is refused (by the
	// ValidatingAdmissionPolicy trainingjob-worker-pod: the rule is beyond a CRD rule's cost budget).
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=mountPath
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts,omitempty"`

	// envFrom sets the trainer's environment from every key of Secrets and ConfigMaps, for example a W&B
	// key (WANDB_API_KEY) from a Secret. The operator's own variables (the environment contract) take
	// precedence over a key of the same name, as env does over envFrom in every pod.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	EnvFrom []corev1.EnvFromSource `json:"envFrom,omitempty"`

	// runtimeClassName is the RuntimeClass of the workers' pods (for example nvidia, or a sandbox).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`
}
