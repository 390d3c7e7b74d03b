package v1

// Backend is a collective-communication backend.
// +kubebuilder:validation:Enum=nccl;gloo;mpi
type Backend string

// Backends.
const (
	BackendNCCL Backend = "nccl"
	BackendGloo Backend = "gloo"
	BackendMPI  Backend = "mpi"
)

// NetworkingSpec configures rendezvous and collectives.
type NetworkingSpec struct {
	// backend is nccl, gloo or mpi. When empty: nccl with GPUs, gloo without.
	// +optional
	Backend Backend `json:"backend,omitempty"`

	// masterPort is the rendezvous port on rank 0 (MASTER_PORT).
	// +optional
	// +kubebuilder:default=29500
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	MasterPort int32 `json:"masterPort,omitempty"`

	// rdmaEnabled lets NCCL use InfiniBand/RoCE (NCCL_IB_DISABLE=0).
	// +optional
	RDMAEnabled *bool `json:"rdmaEnabled,omitempty"`
}
