package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Goodput categories: what the job's wall time was spent on (docs/goodput.md maps them to Google's
// ml-goodput-measurement categories).
const (
	GoodputProductive = "Productive"
	BadputQueued      = "Queued"
	BadputScheduling  = "Scheduling"
	BadputStartup     = "Startup"
	BadputRestart     = "Restart"
	BadputLostWork    = "LostWork"
	BadputHang        = "Hang"
	BadputCheckpoint  = "Checkpoint"
	// GoodputUnknown is time the workers ran with no progress source: whether it was productive cannot be
	// told. It is neither goodput nor badput.
	GoodputUnknown = "Unknown"
)

// GoodputStatus accounts the job's wall time. Seconds are kept to the millisecond.
type GoodputStatus struct {
	// percent is productive time over all accounted time, for example "82%"; "unknown" when the workers
	// ran with no progress source and nothing is known productive; "80%-95%" when part of the time is
	// unknown (the low figure counts it as badput, the high one as productive).
	// +optional
	Percent string `json:"percent,omitempty"`
	// productiveSeconds is time rank 0 advanced the run, less work a restart threw away.
	// +optional
	ProductiveSeconds float64 `json:"productiveSeconds,omitempty"`
	// badputSeconds is the rest, by category.
	// +optional
	BadputSeconds BadputSeconds `json:"badputSeconds,omitempty"`
	// unknownSeconds is time the workers ran with no progress source: whether it was productive cannot be
	// told.
	// +optional
	UnknownSeconds float64 `json:"unknownSeconds,omitempty"`
	// gpuSeconds is GPU time held by the job's running workers.
	// +optional
	GPUSeconds float64 `json:"gpuSeconds,omitempty"`
	// productiveGPUSeconds is the productive part of gpuSeconds.
	// +optional
	ProductiveGPUSeconds float64 `json:"productiveGPUSeconds,omitempty"`
	// category is what the job spends its time on now (Productive or a badput category); empty once the
	// job is over.
	// +optional
	// +kubebuilder:validation:Enum=Productive;Queued;Scheduling;Startup;Restart;LostWork;Hang;Checkpoint;Unknown
	Category string `json:"category,omitempty"`
	// accountedTime is the time up to which the seconds are accounted (to the microsecond: it is where
	// the next accounting starts).
	// +optional
	AccountedTime *metav1.MicroTime `json:"accountedTime,omitempty"`
	// gpus is the GPUs the job's running workers held at accountedTime: what the time after it is counted
	// with in gpuSeconds.
	// +optional
	GPUs int32 `json:"gpus,omitempty"`
	// attempt is the attempt the accounting last saw: a new one turns the work since the checkpoint it
	// resumed from into lost work.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// sinceCheckpointSeconds is productive time of this attempt after its newest checkpoint: what a
	// restart now would lose.
	// +optional
	SinceCheckpointSeconds float64 `json:"sinceCheckpointSeconds,omitempty"`
	// checkpointReportedSeconds is the trainer's own count of seconds spent saving checkpoints in this
	// attempt (training_checkpoint_seconds_total), as last read.
	// +optional
	CheckpointReportedSeconds float64 `json:"checkpointReportedSeconds,omitempty"`
	// attemptProductiveSeconds is productive time of this attempt: the most a restart now could lose.
	// +optional
	AttemptProductiveSeconds float64 `json:"attemptProductiveSeconds,omitempty"`
	// reclassifiedSeconds is productive time later moved to badput (a restart's training since the
	// checkpoint it resumed from and its time since the failure, a hang's time since the last progress,
	// checkpoint saves), less what a correction moved back: productiveSeconds plus it never decreases
	// (trainingjob_goodput_seconds_total).
	// +optional
	ReclassifiedSeconds float64 `json:"reclassifiedSeconds,omitempty"`
	// lostWorkEstimate is the lost work of the last restart as estimated when its attempt ended, until the
	// checkpoint the next attempt resumed from tells the real one.
	// +optional
	LostWorkEstimate *LostWorkEstimate `json:"lostWorkEstimate,omitempty"`
}

// LostWorkEstimate is lost work counted from the newest checkpoint the operator knew of when an attempt
// ended, to be corrected from the checkpoint the next attempt resumed from.
type LostWorkEstimate struct {
	// attempt is the attempt that resumed after the loss.
	Attempt int32 `json:"attempt"`
	// seconds is what was moved from productive to lostWork.
	Seconds float64 `json:"seconds"`
	// maxSeconds is the ended attempt's productive time: the most it can have lost.
	MaxSeconds float64 `json:"maxSeconds"`
}

// AccountedSeconds returns all the time the goodput accounts: productive, unknown and every badput category.
func (g *GoodputStatus) AccountedSeconds() float64 {
	b := g.BadputSeconds
	return g.ProductiveSeconds + g.UnknownSeconds + b.Queued + b.Scheduling + b.Startup + b.Restart + b.LostWork + b.Hang + b.Checkpoint
}

// BadputSeconds is non-productive time by category.
type BadputSeconds struct {
	// queued is time waiting for a queue's admission, or suspended.
	// +optional
	Queued float64 `json:"queued,omitempty"`
	// scheduling is time the first attempt's workers were created, scheduled, their images pulled.
	// +optional
	Scheduling float64 `json:"scheduling,omitempty"`
	// startup is time the first attempt's workers ran before rank 0 first advanced.
	// +optional
	Startup float64 `json:"startup,omitempty"`
	// restart is time from a failing rank's exit (or the action on a hang) to the next attempt's first
	// progress.
	// +optional
	Restart float64 `json:"restart,omitempty"`
	// lostWork is training after the checkpoint a restart resumed from, done again.
	// +optional
	LostWork float64 `json:"lostWork,omitempty"`
	// hang is time from rank 0's last progress to the action on a hang.
	// +optional
	Hang float64 `json:"hang,omitempty"`
	// checkpoint is time the trainer spent saving checkpoints, when it reports it.
	// +optional
	Checkpoint float64 `json:"checkpoint,omitempty"`
}
