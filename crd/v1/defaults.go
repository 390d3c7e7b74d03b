package v1

// The spec's defaults: the CRD's +kubebuilder:default markers say the same (a test holds them to these), so
// the API server and Default give a TrainingJob the same values.
const (
	DefaultGPUsPerWorker          int32 = 1
	DefaultFramework                    = FrameworkPyTorch
	DefaultCheckpointFrequency    int32 = 1
	DefaultCheckpointRetention    int32 = 3
	DefaultStorageType                  = StoragePVC
	DefaultMonitoringEnabled            = true
	DefaultMetricsPort            int32 = 8080
	DefaultElasticMaxRestarts     int32 = 10
	DefaultMasterPort             int32 = 29500
	DefaultRestartPolicy                = RestartGang
	DefaultRestartStrategy              = RestartInPlace
	DefaultBackoffLimit           int32 = 3
	DefaultCleanPodPolicy               = CleanPodsRunning
	DefaultProgressFromOutput           = true
	DefaultOnHang                       = HangRestart
	DefaultMaxAvoidedNodes        int32 = 3
	DefaultPreemptionGraceSeconds int32 = 120
)

// Default sets every field of the spec that has a default and is absent, the one place defaults are
// applied. The API server applies the CRD's markers only inside the sections a user wrote: Default also
// fills the sections whose absence means "the defaults" (monitoring, networking, failurePolicy, cleanup), so
// that a reader never needs to know a default. Sections whose absence means "off" (checkpoint, elastic,
// checkpoint.storage: the operator's choice) stay absent. The controllers and the kubectl plugin default
// every TrainingJob they read, once; the builders, the state machine and the runner (through the ConfigMap)
// read the defaulted fields.
func (tj *TrainingJob) Default() {
	s := &tj.Spec
	setDefault(&s.GPUsPerWorker, DefaultGPUsPerWorker)
	if s.Framework == "" {
		s.Framework = DefaultFramework
	}
	if c := s.Checkpoint; c != nil {
		setDefault(&c.Frequency, DefaultCheckpointFrequency)
		setDefault(&c.Retention, DefaultCheckpointRetention)
		setDefault(&c.PreemptionGraceSeconds, DefaultPreemptionGraceSeconds)
		if c.Storage != nil && c.Storage.Type == "" {
			c.Storage.Type = DefaultStorageType
		}
	}
	if e := s.Elastic; e != nil {
		setDefault(&e.MaxRestarts, DefaultElasticMaxRestarts)
	}
	s.Monitoring = orEmpty(s.Monitoring)
	setDefault(&s.Monitoring.Enabled, DefaultMonitoringEnabled)
	setDefault(&s.Monitoring.ProgressFromOutput, DefaultProgressFromOutput)
	if s.Monitoring.MetricsPort == 0 {
		s.Monitoring.MetricsPort = DefaultMetricsPort
	}
	s.Networking = orEmpty(s.Networking)
	if s.Networking.MasterPort == 0 {
		s.Networking.MasterPort = DefaultMasterPort
	}
	if s.Networking.Backend == "" { // nccl with GPUs, gloo without
		s.Networking.Backend = BackendGloo
		if *s.GPUsPerWorker > 0 {
			s.Networking.Backend = BackendNCCL
		}
	}
	s.FailurePolicy = orEmpty(s.FailurePolicy)
	if s.FailurePolicy.RestartPolicy == "" {
		s.FailurePolicy.RestartPolicy = DefaultRestartPolicy
	}
	if s.FailurePolicy.RestartStrategy == "" {
		s.FailurePolicy.RestartStrategy = DefaultRestartStrategy
	}
	setDefault(&s.FailurePolicy.BackoffLimit, DefaultBackoffLimit)
	if s.FailurePolicy.OnHang == "" {
		s.FailurePolicy.OnHang = DefaultOnHang
	}
	setDefault(&s.FailurePolicy.MaxAvoidedNodes, DefaultMaxAvoidedNodes)
	s.Cleanup = orEmpty(s.Cleanup)
	if s.Cleanup.CleanPodPolicy == "" {
		s.Cleanup.CleanPodPolicy = DefaultCleanPodPolicy
	}
}

// Defaulted returns a defaulted copy of tj.
func (tj *TrainingJob) Defaulted() *TrainingJob {
	out := tj.DeepCopy()
	out.Default()
	return out
}

func setDefault[T any](p **T, v T) {
	if *p == nil {
		*p = &v
	}
}

func orEmpty[T any](p *T) *T {
	if p == nil {
		return new(T)
	}
	return p
}
