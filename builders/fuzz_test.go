package builders_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// FuzzParseStorageURI: the operator's --default-checkpoint-storage never panics, and what it accepts
// passes the API's rules for a storage (the operator records it in each job's status).
func FuzzParseStorageURI(f *testing.F) {
	for _, u := range []string{"s3://bucket/prefix?endpoint=http://minio:9000&region=us-east-1&secret=keys", "gs://b", "pvc://shared/runs",
		"s3://b/../x", "s3://B", "pvc://c?secret=x", "s3://b?endpoint=ftp://x", "gs://b/%2e%2e/x", "s3:///x", "://", ""} {
		f.Add(u)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		s, err := builders.ParseStorageURI(uri)
		if err != nil || s == nil {
			return
		}
		if strings.Contains(s.Prefix, "..") || s.Type == "" || s.S3Bucket+s.GCSBucket+s.ClaimName == "" {
			t.Fatalf("%q accepted as %+v", uri, s)
		}
	})
}

// FuzzJob: any TrainingJob admission accepts (within the fields' bounds) builds a Job, Service and
// ConfigMap without a panic, with one pod per rank and host names, labels and env names Kubernetes
// accepts.
func FuzzJob(f *testing.F) {
	f.Add("mnist", int32(2), int32(1), "NCCL_DEBUG", int32(3), "Gang", true, "s3")
	f.Add("a", int32(1024), int32(0), "", int32(0), "OnFailure", false, "")
	f.Add(strings.Repeat("x", 52), int32(7), int32(8), "PYTHONUNBUFFERED", int32(1000), "Never", true, "pvc")
	f.Fuzz(func(t *testing.T, name string, workers, gpus int32, env string, backoff int32, policy string, ckpt bool, storage string) {
		if len(name) > 52 || len(validation.IsDNS1123Label(name)) > 0 || workers < 1 || workers > 1024 || gpus < 0 || gpus > 16 || backoff < 0 {
			return // admission rejects these
		}
		tj := tjtest.NewTJ("ml", name).Workers(workers).GPUs(gpus).BackoffLimit(backoff, mlv1.RestartPolicy(policy)).Obj()
		if env != "" && len(validation.IsEnvVarName(env)) == 0 {
			tj.Spec.Env = []corev1.EnvVar{{Name: env, Value: "1"}}
		}
		if ckpt {
			s := &mlv1.CheckpointStorage{Type: mlv1.StorageType(storage)}
			switch s.Type {
			case mlv1.StorageS3:
				s.S3Bucket = "b"
			case mlv1.StorageGCS:
				s.GCSBucket = "b"
			default:
				s.Type = mlv1.StoragePVC
			}
			tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Storage: s}
		}
		tj.Default() // as the controllers read it
		job := builders.Job(tj, builders.Options{DefaultImages: builders.DefaultImages()})
		if *job.Spec.Completions != workers || *job.Spec.Parallelism != workers {
			t.Fatalf("completions %d, parallelism %d for %d workers", *job.Spec.Completions, *job.Spec.Parallelism, workers)
		}
		for _, host := range []string{names.WorkerHostname(tj, workers-1), names.ServiceName(tj), names.ConfigMapName(tj), job.Name} {
			if errs := validation.IsDNS1123Label(host); len(errs) > 0 {
				t.Fatalf("name %q: %v", host, errs)
			}
		}
		for k, v := range job.Spec.Template.Labels {
			if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
				t.Fatalf("label %s=%s: %v", k, v, errs)
			}
		}
		spec := job.Spec.Template.Spec
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			seen := map[string]bool{}
			for _, e := range c.Env {
				if seen[e.Name] {
					t.Fatalf("container %s sets %s twice", c.Name, e.Name)
				}
				seen[e.Name] = true
			}
		}
		if _, err := builders.ConfigMap(tj, builders.Options{}); err != nil {
			t.Fatal(fmt.Errorf("config map: %w", err))
		}
		_ = builders.Service(tj)
	})
}
