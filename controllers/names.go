package controllers

// The operator's names for itself, in one place. Each controller writes under its name as field
// manager (managedFields), which is also its controller-runtime name (metrics, logs) and its
// series' controller label: the JobController writes the status and the Workloads it owns as
// jobController.
const (
	jobController        = "trainingjob"
	statusController     = "trainingjob-status"
	checkpointController = "trainingjob-checkpoint"
	trackingController   = "trainingjob-tracking"
	// eventReporter is the reporting controller of the operator's events.
	eventReporter = "trainingjob-operator"
)
