package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// InputsSpec is how the model and dataset sources are reached and cached.
type InputsSpec struct {
	// secretRef names a Secret in the job's namespace with the sources' credentials (AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY, service-account.json, HF_TOKEN), given only to the init container that fetches
	// them; unset, the workers' own identity.
	// +optional
	SecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`

	// endpoint is an S3-compatible endpoint URL for s3:// sources, for example a MinIO server.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^https?://`
	Endpoint string `json:"endpoint,omitempty"`

	// region is the S3 region of s3:// sources.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Region string `json:"region,omitempty"`

	// hubEndpoint is the Hugging Face Hub (or a mirror of its API) that hf:// sources come from;
	// https://huggingface.co when unset.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^https?://`
	HubEndpoint string `json:"hubEndpoint,omitempty"`

	// cacheSize is the capacity of the shared input cache, the claim <trainingjob>-inputs the operator
	// creates; 50Gi when unset.
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="inputs.cacheSize must be greater than zero"
	CacheSize *resource.Quantity `json:"cacheSize,omitempty"`

	// storageClassName is the StorageClass of the input cache; the cluster's default when unset.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`

	// cache is where fetched sources are kept: Shared (the claim <trainingjob>-inputs every rank mounts) or
	// PerNode (a directory on each node, for clusters without ReadWriteMany storage); unset, the
	// operator's --inputs-cache.
	// +optional
	Cache InputsCache `json:"cache,omitempty"`

	// cacheGroup shares the PerNode cache between the jobs of the namespace that name the same group and the
	// same sources, endpoints, secretRef and ServiceAccount (a search's trials): a node fetches them once. Unset, each
	// job has its own directory. The Shared cache is each job's own claim, whatever the group.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	CacheGroup string `json:"cacheGroup,omitempty"`
}

// InputsCache is where fetched model and dataset sources are kept.
// +kubebuilder:validation:Enum=Shared;PerNode
type InputsCache string

// Input caches.
const (
	InputsCacheShared  InputsCache = "Shared"
	InputsCachePerNode InputsCache = "PerNode"
)
