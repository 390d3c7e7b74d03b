package builders

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// Checkpoints without a storage section: the job uses the operator's default storage
// (Options.DefaultCheckpointStorage, from --default-checkpoint-storage), else a claim the operator creates
// for it. The choice is made once and kept in status.checkpointStorage (see StorageChoice).

// DefaultClaimSize is the size of an operator-created checkpoint claim whose storage names none.
var DefaultClaimSize = resource.MustParse("20Gi")

// StorageChoice returns what status.checkpointStorage should hold: nil when spec.checkpoint.storage names the
// storage; else the storage already chosen, kept for the job's life so that a change of the operator's
// default never moves its checkpoints; else, once checkpoints are enabled, the operator's default or a
// claim of the operator's own (type pvc without claimName).
func StorageChoice(tj *mlv1.TrainingJob, opts Options) *mlv1.CheckpointStorage {
	c := tj.Spec.Checkpoint
	switch {
	case c != nil && c.Storage != nil:
		return nil
	case tj.Status.CheckpointStorage != nil:
		return tj.Status.CheckpointStorage
	case c == nil || c.Enabled == nil || !*c.Enabled:
		return nil
	case opts.DefaultCheckpointStorage != nil:
		return opts.DefaultCheckpointStorage.DeepCopy()
	}
	return &mlv1.CheckpointStorage{Type: mlv1.StoragePVC}
}

// ManagedClaim reports whether the operator creates the job's checkpoint claim: pvc storage without claimName.
func ManagedClaim(tj *mlv1.TrainingJob) bool {
	s := tj.CheckpointStorage()
	return s != nil && s.Type == mlv1.StoragePVC && s.ClaimName == ""
}

// ClaimName returns the checkpoint claim workers mount: storage.claimName, else the operator's <name>-checkpoints.
func ClaimName(tj *mlv1.TrainingJob) string {
	if s := tj.CheckpointStorage(); s != nil && s.ClaimName != "" {
		return s.ClaimName
	}
	return names.CheckpointClaimName(tj)
}

// ClaimOwned reports whether the operator-created claim goes with the TrainingJob (claimRetentionPolicy
// Delete): it then carries an owner reference, and the garbage collector deletes it.
func ClaimOwned(tj *mlv1.TrainingJob) bool {
	s := tj.CheckpointStorage()
	return s != nil && s.ClaimRetentionPolicy == mlv1.ClaimDelete
}

// CheckpointClaim returns the claim the operator creates for a job with ManagedClaim: ReadWriteMany when
// more than one worker mounts it (ranks may run on different nodes), ReadWriteOnce for one worker;
// storage.size (default DefaultClaimSize) and storage.storageClassName (default: the cluster's default
// StorageClass). It is labelled like every child, so `kubectl delete pvc -l` finds it.
func CheckpointClaim(tj *mlv1.TrainingJob) *corev1.PersistentVolumeClaim {
	s := tj.CheckpointStorage()
	size := DefaultClaimSize
	if s.Size != nil {
		size = *s.Size
	}
	return jobClaim(tj, ClaimName(tj), size, s.StorageClassName)
}

// jobClaim returns a claim the operator creates for a job's workers: ReadWriteMany when more than one
// worker mounts it (ranks may run on different nodes), ReadWriteOnce for one; labelled like every child.
func jobClaim(tj *mlv1.TrainingJob, name string, size resource.Quantity, class *string) *corev1.PersistentVolumeClaim {
	mode := corev1.ReadWriteMany
	if tj.Spec.NumWorkers == 1 {
		mode = corev1.ReadWriteOnce
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tj.Namespace, Labels: names.Labels(tj)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{mode},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			StorageClassName: class,
		},
	}
}

// ParseStorageURI returns the storage the operator's --default-checkpoint-storage names:
//
//	s3://BUCKET[/PREFIX][?endpoint=URL&region=REGION&secret=NAME]
//	gs://BUCKET[/PREFIX][?secret=NAME]
//	pvc://CLAIM[/PREFIX]     an existing claim of that name in each job's namespace
//
// secret names a Secret in each job's namespace (see storage.secretRef). "" is nil: a claim per job.
func ParseStorageURI(uri string) (*mlv1.CheckpointStorage, error) {
	if uri == "" {
		return nil, nil
	}
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("default checkpoint storage %q: %w", uri, err)
	}
	q := u.Query()
	s := &mlv1.CheckpointStorage{Prefix: strings.Trim(u.Path, "/"), Endpoint: q.Get("endpoint"), Region: q.Get("region")}
	if name := q.Get("secret"); name != "" {
		s.SecretRef = &corev1.LocalObjectReference{Name: name}
	}
	for key := range q {
		if key != "endpoint" && key != "region" && key != "secret" {
			return nil, fmt.Errorf("default checkpoint storage %q: unknown parameter %q (endpoint, region, secret)", uri, key)
		}
	}
	switch u.Scheme {
	case "s3":
		s.Type, s.S3Bucket = mlv1.StorageS3, u.Host
	case "gs":
		s.Type, s.GCSBucket = mlv1.StorageGCS, u.Host
	case "pvc":
		s.Type, s.ClaimName = mlv1.StoragePVC, u.Host
	default:
		return nil, fmt.Errorf("default checkpoint storage %q: want s3://, gs:// or pvc://", uri)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("default checkpoint storage %q names no bucket or claim", uri)
	}
	if s.Type != mlv1.StorageS3 && (s.Endpoint != "" || s.Region != "") {
		return nil, fmt.Errorf("default checkpoint storage %q: endpoint and region are for s3:// only", uri)
	}
	if s.Type == mlv1.StoragePVC && s.SecretRef != nil {
		return nil, fmt.Errorf("default checkpoint storage %q: secret is for s3:// and gs:// only", uri)
	}
	if err := checkStorage(s); err != nil {
		return nil, fmt.Errorf("default checkpoint storage %q: %w", uri, err)
	}
	return s, nil
}

// The API's rules for a storage's names (crd/v1 CheckpointStorage): a storage the operator records in a
// job's status must pass them, or the status write is refused.
var (
	claimNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	s3BucketPattern  = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`)
	gcsBucketPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*[a-z0-9]$`)
	endpointPattern  = regexp.MustCompile(`^https?://`)
)

func checkStorage(s *mlv1.CheckpointStorage) error {
	checks := []struct {
		ok   bool
		what string
	}{
		{s.ClaimName == "" || len(s.ClaimName) <= 253 && claimNamePattern.MatchString(s.ClaimName), "claim name"},
		{s.S3Bucket == "" || len(s.S3Bucket) <= 63 && s3BucketPattern.MatchString(s.S3Bucket), "s3 bucket name"},
		{s.GCSBucket == "" || len(s.GCSBucket) <= 222 && gcsBucketPattern.MatchString(s.GCSBucket), "gcs bucket name"},
		{len(s.Prefix) <= 512 && !strings.Contains(s.Prefix, ".."), "prefix (at most 512 characters, no '..')"},
		{s.Endpoint == "" || len(s.Endpoint) <= 512 && endpointPattern.MatchString(s.Endpoint), "endpoint (http:// or https://)"},
		{len(s.Region) <= 64, "region (at most 64 characters)"},
		{s.SecretRef == nil || len(s.SecretRef.Name) <= 253 && claimNamePattern.MatchString(s.SecretRef.Name), "secret name"},
	}
	for _, c := range checks {
		if !c.ok {
			return fmt.Errorf("invalid %s", c.what)
		}
	}
	return nil
}
