// Package controllers holds the four TrainingJob controllers over one pure state machine (package
// derive), and the QueueController:
//
//   - the JobController (job_*.go, inplace*.go) builds the workers' Job, headless Service,
//     ConfigMap, claims and PodGroup, restarts the gang, cleans up, alone derives status.state and
//     the run's conditions, and accounts goodput;
//   - the StatusController (status_*.go) reads rank 0's progress into status and the per-job series
//     and gives the success policy's verdict;
//   - the CheckpointController (checkpoint_controller.go) reads rank 0's checkpoint agent into
//     status.checkpoint and alone writes the ConfigMap's RESUME_FROM;
//   - the TrackingController (tracking_controller.go) keeps the job's MLflow run in step with the
//     status, and alone writes status.mlflow, ExperimentTracked and the ConfigMap's MLFLOW_RUN_ID;
//   - the QueueController (queue_controller.go), where Kueue is served, lists in each namespace the
//     LocalQueues that dispatch through MultiKueue, for the admission policy that defaults managedBy.
//
// "Kubernetes' Job controller" is kube-controller-manager's, which runs the pods of our Jobs.
//
// # Files
//
//   - setup.go, names.go, reconcile.go, watches.go: wiring, the controllers' names, what every
//     Reconcile shares, the watches' predicates.
//   - job_controller.go: the JobController's Reconcile, its observe, ask and act steps, and its
//     status write.
//   - job_memory.go: what the JobController remembers between reconciles (jobMemory), and why.
//   - job_children.go (the Job and its attempts), job_claim.go, job_inputs.go, job_kueue.go,
//     job_podgroup.go, job_ssh.go, job_cleanup.go: one child each.
//   - job_exits.go, job_nodes.go, job_goodput.go, job_events.go: the pod watch's exits, the nodes
//     of a failing attempt, goodput, the events of a transition.
//   - inplace.go (the protocol), inplace_ask.go, inplace_order.go, inplace_support.go: the gang
//     restart in place (gangRestart).
//   - status_controller.go, status_hang.go, status_ranks.go, status_source.go: the
//     StatusController.
//   - statuswrite_*.go: the status writes every controller shares: server-side apply (apply), the
//     owners of each field (owners), the write budget (budget), fields that moved between owners
//     (migrate).
//   - poller.go, rank0.go, logs.go, recorder.go: rank 0's reads, the trainers' logs, the events'
//     limits.
//
// # Who writes what
//
// Every field of a TrainingJob's status has one writer, named in statusOwners
// (statuswrite_owners.go), the only copy of that list. Each controller writes the status with
// server-side apply under its own field manager (its controller name) and sends only its own fields
// and conditions (applyStatus): the API server records in managedFields which manager owns each
// field and each condition (conditions are a map list keyed by type), keeps the others' fields as
// they are, and refuses (409) an apply that would change a field another manager owns. applyStatus
// also refuses to send a status in which the controller changed a field that is not its own: the
// bug is an error, never a silent overwrite. TestStatusOwnership holds the table to the status
// type, and to the managedFields the API server records after a run of every controller.
//
// Reads come from the manager's cache; the reconcilers' shared statusWrites (statuswrite_apply.go,
// given by Setup) remember the resourceVersion of this process's last status write of each job, and
// a reconcile whose cache has not seen it yet waits a few milliseconds rather than computing from
// an older status.
//
// A controller reports a fact to another through a field it owns: the success policy's verdict is
// the StatusController's SuccessPolicyMet condition, which the JobController's derive.Status turns
// into Completed; a hang is its Stalled condition, which the JobController acts on by
// failurePolicy.onHang; the newest checkpoint (status.checkpoint) is what the JobController resumes
// from; a first progress, a hang or a progress source found or lost moves goodput to another
// category, which the JobController's watch sees (goodputMoved) and accounts. A field that moved
// between owners (goodput, the StatusController's before) is taken over at start
// (statuswrite_migrate.go), so that no apply deletes it or is refused.
//
// The job's ConfigMap has one writer per key too: the JobController creates it and keeps its config
// file (names.ConfigFileName) in step with the spec; the CheckpointController writes RESUME_FROM
// and the annotation saying for which attempt it is settled (names.ResumeAttemptAnnotation); the
// TrackingController writes MLFLOW_RUN_ID and names.TrackingSettledAnnotation. The JobController
// starts an attempt's Job only once both annotations say the attempt's values are in place.
//
// # Reading a reconcile
//
// Each controller's Reconcile is a numbered outline of its steps, in its file (job_controller.go,
// status_controller.go, checkpoint_controller.go, tracking_controller.go). The JobController's
// steps observe (the cache only), ask (bounded calls to the supervisors, rank 0, the nodes), decide
// (package derive) and act (functions named for what they write: ensure*, create*, delete*, order*,
// label*). The objects it creates come from package builders, with the options of the reconcile
// (options). The logger of each reconcile is controller-runtime's, which carries the job's key and
// the reconcile's ID; at level 1 (--zap-log-level=1) each decision logs one line.
package controllers
