package builders

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// RunConfig is the content of config.json, mounted into every worker at TRAININGJOB_CONFIG.
type RunConfig struct {
	TrainingJob     string                `json:"trainingJob"`
	Namespace       string                `json:"namespace"`
	Model           string                `json:"model"`
	Dataset         string                `json:"dataset"`
	Framework       mlv1.Framework        `json:"framework"`
	NumWorkers      int32                 `json:"numWorkers"`
	GPUsPerWorker   int32                 `json:"gpusPerWorker"`
	Hyperparameters *mlv1.Hyperparameters `json:"hyperparameters,omitempty"`
	Networking      NetworkConfig         `json:"networking"`
	MetricsPort     int32                 `json:"metricsPort"`
}

// NetworkConfig is the rendezvous part of RunConfig.
type NetworkConfig struct {
	Backend     mlv1.Backend `json:"backend"`
	MasterAddr  string       `json:"masterAddr"`
	MasterPort  int32        `json:"masterPort"`
	RDMAEnabled bool         `json:"rdmaEnabled"`
}

// Config returns the RunConfig of a TrainingJob.
func Config(tj *mlv1.TrainingJob) RunConfig {
	return RunConfig{
		TrainingJob:     tj.Name,
		Namespace:       tj.Namespace,
		Model:           tj.Spec.Model,
		Dataset:         tj.Spec.Dataset,
		Framework:       tj.Spec.Framework,
		NumWorkers:      tj.Spec.NumWorkers,
		GPUsPerWorker:   tj.GPUsPerWorker(),
		Hyperparameters: tj.Spec.Hyperparameters,
		Networking: NetworkConfig{
			Backend:     tj.Backend(),
			MasterAddr:  names.WorkerDNSName(tj, 0),
			MasterPort:  tj.Spec.Networking.MasterPort,
			RDMAEnabled: tj.RDMAEnabled(),
		},
		MetricsPort: tj.MetricsPort(),
	}
}

// ConfigMap builds the ConfigMap holding config.json. Its RESUME_FROM key (see ResumeFrom) and
// names.ResumeAttemptAnnotation are the CheckpointController's to write; a job with checkpoints gets them
// already settled for its first attempt, for which the CheckpointController would find nothing else to
// wait for (no older rank 0 can report a newer checkpoint) and write the same: its workers start
// without waiting for that write. A job that restarts in place also gets its attempt
// (names.CurrentAttemptKey), the JobController's to keep.
func ConfigMap(tj *mlv1.TrainingJob, opts Options) (*corev1.ConfigMap, error) {
	data, err := json.MarshalIndent(Config(tj), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding config of %s/%s: %w", tj.Namespace, tj.Name, err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: names.ConfigMapName(tj), Namespace: tj.Namespace, Labels: names.Labels(tj)},
		Data:       map[string]string{names.ConfigFileName: string(data)},
	}
	if tj.CheckpointEnabled() && tj.Status.Attempt == 0 {
		cm.Data[names.ResumeFromKey] = ResumeFrom(tj)
		cm.Annotations = map[string]string{names.ResumeAttemptAnnotation: "0"}
	}
	if InPlace(tj, opts) {
		cm.Data[names.CurrentAttemptKey] = itoa(tj.Status.Attempt)
	}
	return cm, nil
}
