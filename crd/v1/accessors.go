package v1

// Accessors of a defaulted TrainingJob's spec (Default fills every field they read; they panic on a
// TrainingJob that was not defaulted, where a missing default is a bug to find, not a value to guess).

// GPUsPerWorker returns spec.gpusPerWorker.
func (tj *TrainingJob) GPUsPerWorker() int32 { return *tj.Spec.GPUsPerWorker }

// MonitoringEnabled reports whether the operator reads rank 0's progress (monitoring.enabled).
func (tj *TrainingJob) MonitoringEnabled() bool { return *tj.Spec.Monitoring.Enabled }

// ProgressFromOutput reports whether the supervisor may read progress from the trainer's output
// (monitoring.progressFromOutput).
func (tj *TrainingJob) ProgressFromOutput() bool { return *tj.Spec.Monitoring.ProgressFromOutput }

// MetricsPort returns the port rank 0 serves progress on (monitoring.metricsPort).
func (tj *TrainingJob) MetricsPort() int32 { return tj.Spec.Monitoring.MetricsPort }

// Backend returns the collective backend (networking.backend; Default picks nccl with GPUs, gloo without).
func (tj *TrainingJob) Backend() Backend { return tj.Spec.Networking.Backend }

// MPIEnabled reports whether the workers start through MPI (networking.backend mpi).
func (tj *TrainingJob) MPIEnabled() bool { return tj.Backend() == BackendMPI }

// RDMAEnabled reports whether networking.rdmaEnabled is true.
func (tj *TrainingJob) RDMAEnabled() bool {
	return tj.Spec.Networking.RDMAEnabled != nil && *tj.Spec.Networking.RDMAEnabled
}

// RestartStrategy returns failurePolicy.restartStrategy.
func (tj *TrainingJob) RestartStrategy() RestartStrategy {
	return tj.Spec.FailurePolicy.RestartStrategy
}

// RestartPolicy returns failurePolicy.restartPolicy.
func (tj *TrainingJob) RestartPolicy() RestartPolicy { return tj.Spec.FailurePolicy.RestartPolicy }

// BackoffLimit returns failurePolicy.backoffLimit.
func (tj *TrainingJob) BackoffLimit() int32 { return *tj.Spec.FailurePolicy.BackoffLimit }

// OnHang returns failurePolicy.onHang.
func (tj *TrainingJob) OnHang() HangAction { return tj.Spec.FailurePolicy.OnHang }

// Suspended reports whether spec.suspend is true.
func (tj *TrainingJob) Suspended() bool { return tj.Spec.Suspend != nil && *tj.Spec.Suspend }

// CleanPodPolicy returns cleanup.cleanPodPolicy.
func (tj *TrainingJob) CleanPodPolicy() CleanPodPolicy { return tj.Spec.Cleanup.CleanPodPolicy }

// CheckpointStorage returns where the job's checkpoints go: checkpoint.storage, else the storage the operator
// chose for the job (status.checkpointStorage, its type pvc when unset); nil while checkpoints are off or
// not placed yet.
func (tj *TrainingJob) CheckpointStorage() *CheckpointStorage {
	c := tj.Spec.Checkpoint
	if c == nil || c.Enabled == nil || !*c.Enabled {
		return nil
	}
	s := c.Storage
	if s == nil {
		s = tj.Status.CheckpointStorage
	}
	if s != nil && s.Type == "" { // the operator's choice in the status (the spec's is defaulted)
		s = s.DeepCopy()
		s.Type = DefaultStorageType
	}
	return s
}

// CheckpointEnabled reports whether checkpoint.enabled is true and the job's checkpoint storage is known.
func (tj *TrainingJob) CheckpointEnabled() bool { return tj.CheckpointStorage() != nil }
