// Package v1 holds the TrainingJob API, group ml.example.com, version v1.
//
// +kubebuilder:object:generate=true
// +groupName=ml.example.com
package v1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the TrainingJob API.
	GroupVersion = schema.GroupVersion{Group: "ml.example.com", Version: "v1"}

	// SchemeBuilder registers the API's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the API's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func init() {
	SchemeBuilder.Register(&TrainingJob{}, &TrainingJobList{})
}
