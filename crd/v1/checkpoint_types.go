package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// StorageType is where checkpoints are stored.
// +kubebuilder:validation:Enum=pvc;s3;gcs;nfs
type StorageType string

// Storage types for checkpoints.
const (
	StoragePVC StorageType = "pvc"
	StorageS3  StorageType = "s3"
	StorageGCS StorageType = "gcs"
	StorageNFS StorageType = "nfs"
)

// CheckpointSpec configures checkpoints.
// +kubebuilder:validation:XValidation:rule="!has(self.resumeFrom) || !has(self.storage) || (self.storage.type == 's3') == self.resumeFrom.startsWith('s3://') && (self.storage.type == 'gcs') == self.resumeFrom.startsWith('gs://')",message="resumeFrom must be in the checkpoint storage's kind: s3:// for s3, gs:// for gcs, a path (or pvc://, nfs://) for pvc and nfs: workers read it with the storage's identity",fieldPath=".resumeFrom"
type CheckpointSpec struct {
	// enabled turns checkpointing on.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// frequency is the number of epochs between checkpoints.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	Frequency *int32 `json:"frequency,omitempty"`

	// storage is where checkpoints are written; unset, the operator's default storage, else a claim it
	// creates (<name>-checkpoints), as recorded in status.checkpointStorage.
	// +optional
	Storage *CheckpointStorage `json:"storage,omitempty"`

	// resumeFrom is a checkpoint to resume from until this run has written one of its own: an s3:// or
	// gs:// URI, or a path (or pvc://, nfs://) on the mounted checkpoint volume.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.startsWith('s3://') || self.startsWith('gs://') || self.startsWith('/') || self.startsWith('pvc://') || self.startsWith('nfs://')",message="resumeFrom must be an s3://, gs://, pvc:// or nfs:// URI or an absolute path"
	ResumeFrom string `json:"resumeFrom,omitempty"`

	// retention is the number of newest complete checkpoints to keep; older ones are deleted.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Retention *int32 `json:"retention,omitempty"`

	// onPreemption gives rank 0 the chance to write a checkpoint on SIGTERM when its worker is about to be
	// stopped (a preemption, an eviction, a node drain, a gang restart); the next attempt resumes from it.
	// +optional
	OnPreemption bool `json:"onPreemption,omitempty"`

	// preemptionGraceSeconds is how long a worker has between SIGTERM and SIGKILL with onPreemption.
	// +optional
	// +kubebuilder:default=120
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	PreemptionGraceSeconds *int32 `json:"preemptionGraceSeconds,omitempty"`
}

// CheckpointStorage is a checkpoint location. Which fields apply depends on type.
// +kubebuilder:validation:XValidation:rule="self.type != 's3' || has(self.s3Bucket)",message="storage.s3Bucket is required for type s3",fieldPath=".s3Bucket"
// +kubebuilder:validation:XValidation:rule="self.type != 'gcs' || has(self.gcsBucket)",message="storage.gcsBucket is required for type gcs",fieldPath=".gcsBucket"
// +kubebuilder:validation:XValidation:rule="self.type != 'nfs' || has(self.nfs)",message="storage.nfs is required for type nfs",fieldPath=".nfs"
// +kubebuilder:validation:XValidation:rule="!has(self.s3Bucket) || self.type == 's3'",message="storage.s3Bucket is only valid for type s3",fieldPath=".s3Bucket"
// +kubebuilder:validation:XValidation:rule="!has(self.gcsBucket) || self.type == 'gcs'",message="storage.gcsBucket is only valid for type gcs",fieldPath=".gcsBucket"
// +kubebuilder:validation:XValidation:rule="!has(self.claimName) || self.type == 'pvc'",message="storage.claimName is only valid for type pvc",fieldPath=".claimName"
// +kubebuilder:validation:XValidation:rule="!has(self.endpoint) && !has(self.region) || self.type == 's3'",message="storage.endpoint and storage.region are only valid for type s3",fieldPath=".endpoint"
// +kubebuilder:validation:XValidation:rule="!has(self.size) || self.type == 'pvc' && !has(self.claimName)",message="storage.size is only valid for the claim the operator creates (type pvc without claimName)",fieldPath=".size"
// +kubebuilder:validation:XValidation:rule="!has(self.storageClassName) || self.type == 'pvc' && !has(self.claimName)",message="storage.storageClassName is only valid for the claim the operator creates (type pvc without claimName)",fieldPath=".storageClassName"
// +kubebuilder:validation:XValidation:rule="!has(self.claimRetentionPolicy) || self.type == 'pvc' && !has(self.claimName)",message="storage.claimRetentionPolicy is only valid for the claim the operator creates (type pvc without claimName)",fieldPath=".claimRetentionPolicy"
type CheckpointStorage struct {
	// type is pvc, s3, gcs or nfs.
	// +optional
	// +kubebuilder:default=pvc
	Type StorageType `json:"type,omitempty"`

	// claimName is the PersistentVolumeClaim mounted into every worker (type pvc). When empty the operator
	// creates the claim <trainingjob>-checkpoints (see size, storageClassName and claimRetentionPolicy).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	ClaimName string `json:"claimName,omitempty"`

	// s3Bucket is the S3 bucket (type s3).
	// +optional
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`
	S3Bucket string `json:"s3Bucket,omitempty"`

	// gcsBucket is the Google Cloud Storage bucket (type gcs).
	// +optional
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=222
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9._-]*[a-z0-9]$`
	GCSBucket string `json:"gcsBucket,omitempty"`

	// size is the capacity of the claim the operator creates (type pvc without claimName); 20Gi when unset.
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="storage.size must be greater than zero"
	Size *resource.Quantity `json:"size,omitempty"`

	// storageClassName is the StorageClass of the claim the operator creates, which must support
	// ReadWriteMany with more than one worker; unset, the operator's or the cluster's default.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`

	// claimRetentionPolicy is what happens to the claim the operator created when the TrainingJob is
	// deleted: Retain (the default) keeps it and the checkpoints; Delete deletes it with the TrainingJob.
	// +optional
	ClaimRetentionPolicy ClaimRetentionPolicy `json:"claimRetentionPolicy,omitempty"`

	// nfs is the NFS export (type nfs).
	// +optional
	NFS *NFSStorage `json:"nfs,omitempty"`

	// prefix is prepended to checkpoint paths inside the bucket or volume.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.contains('..')",message="storage.prefix must not contain '..'"
	Prefix string `json:"prefix,omitempty"`

	// endpoint is an S3-compatible endpoint URL, for example a MinIO server (type s3).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^https?://`
	Endpoint string `json:"endpoint,omitempty"`

	// region is the S3 region (type s3).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Region string `json:"region,omitempty"`

	// secretRef names a Secret in the job's namespace holding storage credentials; unset, the workers' own
	// identity (workload identity, instance role).
	// +optional
	SecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`
}

// ClaimRetentionPolicy is what happens to an operator-created checkpoint claim when its TrainingJob is
// deleted.
// +kubebuilder:validation:Enum=Retain;Delete
type ClaimRetentionPolicy string

// Claim retention policies.
const (
	ClaimRetain ClaimRetentionPolicy = "Retain"
	ClaimDelete ClaimRetentionPolicy = "Delete"
)

// NFSStorage is an NFS export.
type NFSStorage struct {
	// server is the NFS server's host name or address.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Server string `json:"server"`

	// path is the exported path.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/`
	Path string `json:"path"`
}
