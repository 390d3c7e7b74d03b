// Package names holds the names the operator gives things and that several packages read: the labels and
// annotations on a TrainingJob's children and pods, the names of its children, containers, ports and
// volumes, and the keys of its ConfigMap. Package builders builds the objects that carry them; the
// controllers, the state machine (derive), the tracking code and the kubectl plugin read them from here.
// Other tools may rely on the labels (for example to select a job's pods).
package names

import (
	"fmt"
	"hash/fnv"
	"strconv"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
)

// Labels and annotations the operator sets or reads.
const (
	// NameLabel is set on every child of a TrainingJob and on its pods.
	NameLabel = "ml.example.com/trainingjob-name"
	// RankLabel is the pod label carrying a worker's rank. Kubernetes' Job controller sets it on every pod of an
	// Indexed Job, so the operator reads it rather than setting its own.
	RankLabel = "batch.kubernetes.io/job-completion-index"
	// ControllerUIDLabel is Kubernetes' Job controller's label of a pod with the UID of the Job that made it.
	ControllerUIDLabel = "batch.kubernetes.io/controller-uid"
	// RankAnnotation is the pod annotation carrying a worker's rank; env reads it through the downward API.
	RankAnnotation = "batch.kubernetes.io/job-completion-index"
	// ManagedByLabel marks objects the operator manages.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is the ManagedByLabel value.
	ManagedByValue = "trainingjob-operator"
	// QueueLabel is Kueue's queue label: on a TrainingJob it names the LocalQueue that admits it (see
	// builders.QueueName). The operator's Jobs never carry it: the TrainingJob's Workload is charged, not
	// its Job.
	QueueLabel = "kueue.x-k8s.io/queue-name"
	// AttemptLabel on the Job and its pods is the attempt (status.attempt) they belong to: a gang restart
	// replaces the Job and its pods with those of the next attempt.
	AttemptLabel = "ml.example.com/attempt"
	// ResumeAttemptAnnotation on the ConfigMap is the attempt for which the CheckpointController settled
	// RESUME_FROM: the JobController starts an attempt's workers only once it matches status.attempt.
	ResumeAttemptAnnotation = "ml.example.com/resume-from-attempt"
	// ResumedFromAnnotation on the ConfigMap is what RESUME_FROM named when it was settled for that
	// attempt: what the attempt's workers resumed from (RESUME_FROM moves on as new checkpoints come).
	ResumedFromAnnotation = "ml.example.com/resumed-from"
	// SpecHashAnnotation on the Job is SpecHash of the Job as built; see SpecHash.
	SpecHashAnnotation = "ml.example.com/spec-hash"
	// InPlaceAnnotation on the Job says its workers restart in place (builders.InPlace): a gang restart
	// orders their supervisors, and the Job and its pods are labelled with the new attempt.
	InPlaceAnnotation = "ml.example.com/restart-in-place"
)

// Kueue's names (sigs.k8s.io/kueue: pkg/controller/constants and apis/kueue/v1beta2) that the operator
// sets or reads as a Kueue external framework (docs/kueue.md).
const (
	// PriorityClassLabel on a TrainingJob names the Kueue WorkloadPriorityClass of its Workload.
	PriorityClassLabel = "kueue.x-k8s.io/priority-class"
	// JobUIDLabel on the Workload is the TrainingJob's UID.
	JobUIDLabel = "kueue.x-k8s.io/job-uid"
	// PodSetLabel on an admitted worker pod is its pod set's name (WorkerPodSet).
	PodSetLabel = "kueue.x-k8s.io/podset"
	// WorkloadAnnotation on an admitted worker pod names its Workload (Kueue's topology ungater reads it).
	WorkloadAnnotation = "kueue.x-k8s.io/workload"
	// TopologyGate holds a worker pod until Kueue's topology ungater has chosen its node.
	TopologyGate = "kueue.x-k8s.io/topology"
	// The topology request of the workers' pod set: pod annotations in spec.workerPod.annotations.
	RequiredTopologyAnnotation      = "kueue.x-k8s.io/podset-required-topology"
	PreferredTopologyAnnotation     = "kueue.x-k8s.io/podset-preferred-topology"
	UnconstrainedTopologyAnnotation = "kueue.x-k8s.io/podset-unconstrained-topology"
	// WorkerPodSet is the name of the Workload's one pod set.
	WorkerPodSet = "workers"
	// ResourceInUseFinalizer keeps an admitted Workload until its workers are gone.
	ResourceInUseFinalizer = "kueue.x-k8s.io/resource-in-use"
	// MultiKueueController is the spec.managedBy of a TrainingJob, on a manager cluster, that MultiKueue
	// dispatches to a worker cluster.
	MultiKueueController = "kueue.x-k8s.io/multikueue"
	// PrebuiltWorkloadKey, an annotation (Kueue v0.16 and later) or a label on a TrainingJob, names the
	// Workload made for it by another (MultiKueue, on the worker it dispatched the job to): the job uses that
	// one and makes none.
	PrebuiltWorkloadKey = "kueue.x-k8s.io/prebuilt-workload-name"
	// MultiKueueOriginLabel marks what MultiKueue made on a worker cluster; its value names the manager.
	MultiKueueOriginLabel = "kueue.x-k8s.io/multikueue-origin"
	// MultiKueueQueuesConfigMap, in a namespace, lists its LocalQueues that dispatch through MultiKueue
	// (the QueueController writes it; the admission policy trainingjob-multikueue-managed-by reads it).
	MultiKueueQueuesConfigMap = "trainingjob-multikueue-queues"
	// OriginCreatedAnnotation on a job's Workload is the job's creation time (RFC 3339): MultiKueue copies
	// it to the Workload on a worker, where a dispatched copy's goodput starts from it.
	OriginCreatedAnnotation = "ml.example.com/origin-created"
)

// ControllerName is the spec.managedBy value of the TrainingJobs this operator runs (also when unset).
const ControllerName = "ml.example.com/trainingjob-operator"

// WorkloadName returns the name of the TrainingJob's Kueue Workload, one for the job's whole life:
// "trainingjob-<name>-<hash of the UID>", as Kueue names its integrations' Workloads (a TrainingJob
// deleted and created again under the same name gets another). The name is cut to stay a valid name.
func WorkloadName(tj *mlv1.TrainingJob) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(tj.UID))
	name := "trainingjob-" + tj.Name
	if len(name) > 240 {
		name = name[:240]
	}
	return fmt.Sprintf("%s-%08x", name, h.Sum32())
}

// Container, port and volume names in worker pods.
const (
	ContainerName    = "trainer"
	MetricsPortName  = "metrics"
	MasterPortName   = "rendezvous"
	ConfigVolumeName = "trainingjob-config"
	ConfigMountPath  = "/etc/trainingjob"
	ConfigFileName   = "config.json"
)

// JobName returns the name of the Indexed Job that runs the workers. Worker pods get host names
// "<JobName>-<rank>".
func JobName(tj *mlv1.TrainingJob) string { return JobNameOf(tj.Name) }

// JobNameOf returns JobName for the TrainingJob named name.
func JobNameOf(name string) string { return name + "-worker" }

// ServiceName returns the name of the headless Service that gives workers stable DNS names.
func ServiceName(tj *mlv1.TrainingJob) string { return tj.Name + "-headless" }

// ConfigMapName returns the name of the ConfigMap holding the run's configuration.
func ConfigMapName(tj *mlv1.TrainingJob) string { return tj.Name + "-config" }

// CheckpointClaimName returns the name of the checkpoint claim the operator creates for a job whose pvc
// storage names no claimName.
func CheckpointClaimName(tj *mlv1.TrainingJob) string { return tj.Name + "-checkpoints" }

// InputsCacheName returns the name of the claim that holds a job's Shared input cache.
func InputsCacheName(tj *mlv1.TrainingJob) string { return tj.Name + "-inputs" }

// PodGroupName returns the name of the gang scheduler's PodGroup of a job's workers.
func PodGroupName(tj *mlv1.TrainingJob) string { return tj.Name + "-workers" }

// SSHSecretName returns the name of the Secret holding an MPI job's SSH key pair.
func SSHSecretName(tj *mlv1.TrainingJob) string { return tj.Name + "-ssh" }

// TokenSecretName returns the name of the Secret holding a job's tokens (TokenSecretKeys): its workers
// read them through secretKeyRef, so whoever may read the job's pods (the view role) does not see them.
func TokenSecretName(tj *mlv1.TrainingJob) string { return tj.Name + "-tokens" }

// The keys of the job's token Secret (TokenSecretName).
const (
	// ControlTokenKey holds the job's control token, which the supervisors' orders and exits derive from.
	ControlTokenKey = "control-token"
	// AgentTokenKey holds the job's checkpoint agent token.
	AgentTokenKey = "agent-token"
)

// WorkerHostname returns the host name of the worker with the given rank.
func WorkerHostname(tj *mlv1.TrainingJob, rank int32) string {
	return fmt.Sprintf("%s-%d", JobName(tj), rank)
}

// WorkerDNSName returns the stable DNS name of the worker with the given rank, resolvable through the
// headless Service before the worker is Ready.
func WorkerDNSName(tj *mlv1.TrainingJob, rank int32) string {
	return fmt.Sprintf("%s.%s.%s.svc", WorkerHostname(tj, rank), ServiceName(tj), tj.Namespace)
}

// SelectorLabels select every worker pod of a TrainingJob.
func SelectorLabels(tj *mlv1.TrainingJob) map[string]string {
	return map[string]string{NameLabel: tj.Name}
}

// Labels returns set on every object the operator creates for a TrainingJob.
func Labels(tj *mlv1.TrainingJob) map[string]string {
	return map[string]string{NameLabel: tj.Name, ManagedByLabel: ManagedByValue}
}

// AttemptLabels returns Labels plus the current attempt: what the Job and its pods carry.
func AttemptLabels(tj *mlv1.TrainingJob) map[string]string {
	l := Labels(tj)
	l[AttemptLabel] = strconv.Itoa(int(tj.Status.Attempt))
	return l
}

// JobAttempt returns the attempt a Job or pod belongs to (its AttemptLabel); 0 when unlabelled.
func JobAttempt(obj interface{ GetLabels() map[string]string }) int32 {
	n, _ := strconv.Atoi(obj.GetLabels()[AttemptLabel])
	return int32(n)
}

// ResumeFromKey is the ConfigMap key, and the environment variable, naming the checkpoint workers resume
// from. Workers read it through a configMapKeyRef, which the kubelet resolves every time a container
// starts: a worker restarted in place, a pod Kubernetes' Job controller recreates and a resumed suspended job all
// get the value the operator holds at that moment, with no change to the Job's template.
const ResumeFromKey = "RESUME_FROM"

// CurrentAttemptKey is the ConfigMap key, and the supervisor's environment variable, holding the job's
// attempt (status.attempt) of a job that restarts in place: a pod Kubernetes' Job controller creates for a rank
// that was gone, after the gang restarted without it, reads that it is behind and waits for its order.
const CurrentAttemptKey = controlapi.CurrentAttemptEnv

// The MLflow run's ConfigMap keys, which the TrackingController alone writes, and its mark on the
// ConfigMap once it has tried to create the run (see package builders, tracking.go).
const (
	MLflowRunIDKey            = "MLFLOW_RUN_ID"
	MLflowExperimentIDKey     = "MLFLOW_EXPERIMENT_ID"
	TrackingSettledAnnotation = "ml.example.com/tracking-settled"
)

// AgentContainerName is the checkpoint agent's container in every worker pod.
const AgentContainerName = "checkpoint-agent"

// InputsContainerName is the init container that fetches the model and dataset sources into the input
// cache.
const InputsContainerName = "fetch-inputs"
