package v1

// RestartPolicy is how the workers are restarted after a failure.
// +kubebuilder:validation:Enum=Gang;OnFailure;Never
type RestartPolicy string

// Restart policies.
const (
	// RestartGang stops every worker and starts a fresh set (a new attempt) that resumes from the newest
	// checkpoint; no rank is left waiting at a dead rendezvous.
	RestartGang RestartPolicy = "Gang"
	// RestartOnFailure restarts a failed worker's container in place, for frameworks whose ranks rejoin
	// (torchrun elastic, a trainer that re-rendezvouses).
	RestartOnFailure RestartPolicy = "OnFailure"
	// RestartNever fails the TrainingJob at the first worker failure.
	RestartNever RestartPolicy = "Never"
)

// RestartStrategy is how a gang restart brings the workers back.
// +kubebuilder:validation:Enum=InPlace;Recreate
type RestartStrategy string

// Restart strategies.
const (
	// RestartInPlace restarts every container of each worker's pod on its node (the kubelet's
	// RestartAllContainers), keeping the pod, its node, IP and volumes; a pod that is gone is recreated.
	RestartInPlace RestartStrategy = "InPlace"
	// RestartRecreate deletes every worker's pod and creates a new set.
	RestartRecreate RestartStrategy = "Recreate"
)

// FailurePolicy decides how worker failures are retried.
// +kubebuilder:validation:XValidation:rule="!has(self.retryableExitCodes) || !has(self.nonRetryableExitCodes) || !self.retryableExitCodes.exists(c, c in self.nonRetryableExitCodes)",message="an exit code must not be both in retryableExitCodes and in nonRetryableExitCodes",fieldPath=".retryableExitCodes"
// +kubebuilder:validation:XValidation:rule="!has(self.restartPolicy) || self.restartPolicy == 'Gang' || !has(self.retryableExitCodes) && !has(self.nonRetryableExitCodes)",message="retryableExitCodes and nonRetryableExitCodes apply to restartPolicy Gang only",fieldPath=".restartPolicy"
type FailurePolicy struct {
	// restartPolicy is Gang (default: restart every worker together, from the newest checkpoint), OnFailure
	// (restart the failed worker's container in place, for frameworks whose ranks rejoin) or Never (fail at
	// the first worker failure).
	// +optional
	// +kubebuilder:default=Gang
	RestartPolicy RestartPolicy `json:"restartPolicy,omitempty"`

	// restartStrategy is how a gang restart brings the workers back: InPlace (default: each pod's
	// containers restart on its node, where the cluster can and the trainer runs under the supervisor;
	// Recreate otherwise, and the Restarting condition says why) or Recreate (new pods).
	// +optional
	// +kubebuilder:default=InPlace
	RestartStrategy RestartStrategy `json:"restartStrategy,omitempty"`

	// backoffLimit is how many restarts after a retryable failure the TrainingJob may use before it fails;
	// disruptions (preemption, eviction, node loss) are not counted.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`

	// activeDeadlineSeconds bounds the run's wall time from the first start of its workers, restarts and
	// suspension included; past it the TrainingJob fails with reason DeadlineExceeded.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`

	// retryableExitCodes are trainer exit codes that restart the gang (counted against backoffLimit) in
	// addition to the default: 129-255, a death by signal such as OOM-kill (137) or SIGTERM (143).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=255
	RetryableExitCodes []int32 `json:"retryableExitCodes,omitempty"`

	// nonRetryableExitCodes are trainer exit codes that fail the TrainingJob at once, in addition to the
	// default: 1-128, an error the program reported itself (an exception, a bad argument, a missing file).
	// retryableExitCodes takes codes out of this default.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=255
	NonRetryableExitCodes []int32 `json:"nonRetryableExitCodes,omitempty"`

	// startupTimeoutSeconds is how long the workers may run without rank 0 reporting any progress before the
	// run counts as hung (reason NoProgressSinceStart); 0 turns the check off. Unset: 600 once rank 0 has a
	// progress source.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=604800
	StartupTimeoutSeconds *int32 `json:"startupTimeoutSeconds,omitempty"`

	// stallTimeoutSeconds is how long rank 0's epoch and step may stand still before the run counts as hung
	// (reason ProgressStalled); 0 turns the check off. Unset: the longer of 10 minutes and 5 times the
	// slowest epoch seen.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=604800
	StallTimeoutSeconds *int32 `json:"stallTimeoutSeconds,omitempty"`

	// onHang is what a hung run gets: Restart (default: a gang restart counted against backoffLimit), Fail
	// (the run fails with reason Hung) or None (the Stalled condition, an event and the metric only).
	// +optional
	// +kubebuilder:default=Restart
	OnHang HangAction `json:"onHang,omitempty"`

	// rules decide what a failure of restartPolicy Gang gets, before the exit-code lists and the default
	// classes; the first rule that matches wins.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Rules []FailureRule `json:"rules,omitempty"`

	// maxAvoidedNodes is the most nodes the next attempts keep off, nodes failures were attributed to
	// (status.avoidedNodes, the oldest dropped first); 0 turns avoidance off.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16
	MaxAvoidedNodes *int32 `json:"maxAvoidedNodes,omitempty"`
}

// HangAction is what a hung run gets.
// +kubebuilder:validation:Enum=Restart;Fail;None
type HangAction string

// Hang actions.
const (
	HangRestart HangAction = "Restart"
	HangFail    HangAction = "Fail"
	HangNone    HangAction = "None"
)

// FailureKind is a class of failure a rule can match.
// +kubebuilder:validation:Enum=Error;OOM;Disruption;Hang
type FailureKind string

// Failure kinds: Error is a trainer's non-zero exit other than an OOM kill; OOM an exit the kubelet reports
// OOMKilled; Disruption a preemption, eviction or lost node; Hang no progress (failurePolicy.onHang).
const (
	FailureError      FailureKind = "Error"
	FailureOOM        FailureKind = "OOM"
	FailureDisruption FailureKind = "Disruption"
	FailureHang       FailureKind = "Hang"
)

// RuleAction is what a matching failure rule does.
// +kubebuilder:validation:Enum=Restart;RestartWithoutCounting;Fail
type RuleAction string

// Rule actions.
const (
	// RuleRestart makes a gang restart counted against backoffLimit.
	RuleRestart RuleAction = "Restart"
	// RuleRestartWithoutCounting makes a gang restart that backoffLimit does not count.
	RuleRestartWithoutCounting RuleAction = "RestartWithoutCounting"
	// RuleFail fails the run.
	RuleFail RuleAction = "Fail"
)

// FailureRule matches a failure by what the operator sees of it; every field set must match.
// +kubebuilder:validation:XValidation:rule="has(self.onExitCodes) || has(self.onMessage) || has(self.onKinds)",message="a rule needs at least one of onExitCodes, onMessage and onKinds"
type FailureRule struct {
	// name names the rule in the status and events.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name,omitempty"`

	// action is Restart (counted against backoffLimit), RestartWithoutCounting or Fail.
	// +required
	Action RuleAction `json:"action"`

	// onExitCodes matches the exit code of the rank whose failure caused the others'.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=255
	OnExitCodes []int32 `json:"onExitCodes,omitempty"`

	// onMessage is a regular expression (RE2 syntax) searched in the end (4 KiB) of what explains the
	// failure: the failing container's termination message or last log lines, or for a hang the ranks' last
	// log lines. The operator checks it before the first Job (at most 1,000 instructions compiled).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	OnMessage string `json:"onMessage,omitempty"`

	// onKinds matches the failure's kind: Error, OOM, Disruption or Hang.
	// +optional
	// +kubebuilder:validation:MaxItems=4
	// +listType=set
	OnKinds []FailureKind `json:"onKinds,omitempty"`

	// avoidNode keeps the next attempts off the node the failing rank ran on (see maxAvoidedNodes).
	// +optional
	AvoidNode bool `json:"avoidNode,omitempty"`
}
