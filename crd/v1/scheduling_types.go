package v1

import (
	corev1 "k8s.io/api/core/v1"
)

// SchedulingSpec places the workers.
type SchedulingSpec struct {
	// priority is the name of a PriorityClass for the workers.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Priority string `json:"priority,omitempty"`

	// nodeSelector restricts workers to nodes with these labels.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// affinity is the workers' affinity.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// tolerations are the workers' tolerations.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// schedulerName is the scheduler for the workers, for example a gang scheduler.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SchedulerName string `json:"schedulerName,omitempty"`

	// queueName is the Kueue LocalQueue that admits the job; the TrainingJob's kueue.x-k8s.io/queue-name
	// label wins when both are set.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	QueueName string `json:"queueName,omitempty"`

	// gang asks for a PodGroup so that all workers are scheduled together or none is; unset, a
	// schedulerName of volcano or scheduler-plugins-scheduler implies it.
	// +optional
	Gang *GangScheduling `json:"gang,omitempty"`

	// schedulingTimeoutSeconds fails the TrainingJob (reason SchedulingTimeout) when its workers are not all
	// scheduled and started within this time of the attempt's start; unset waits as long as it takes.
	// +optional
	// +kubebuilder:validation:Minimum=1
	SchedulingTimeoutSeconds *int64 `json:"schedulingTimeoutSeconds,omitempty"`
}

// GangScheduler is the PodGroup API a gang scheduler reads.
// +kubebuilder:validation:Enum=volcano;coscheduling
type GangScheduler string

// Gang schedulers.
const (
	GangVolcano      GangScheduler = "volcano"
	GangCoscheduling GangScheduler = "coscheduling"
)

// GangScheduling configures the PodGroup of the workers.
type GangScheduling struct {
	// scheduler is volcano (PodGroup scheduling.volcano.sh/v1beta1) or coscheduling (PodGroup
	// scheduling.x-k8s.io/v1alpha1 of the scheduler-plugins coscheduler).
	// +required
	Scheduler GangScheduler `json:"scheduler"`

	// scheduleTimeoutSeconds is how long the coscheduler waits for the whole group before it gives the
	// workers' resources back (coscheduling only).
	// +optional
	// +kubebuilder:validation:Minimum=1
	ScheduleTimeoutSeconds *int32 `json:"scheduleTimeoutSeconds,omitempty"`
}
