// Package v1 holds the TrainingJob API, group ml.example.com, version v1. It depends on the standard
// library and k8s.io/apimachinery only, so that other programs can import it.
//
// +kubebuilder:object:generate=true
// +groupName=ml.example.com
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the TrainingJob API.
	GroupVersion = schema.GroupVersion{Group: "ml.example.com", Version: "v1"}

	// SchemeBuilder registers the API's types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the API's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &TrainingJob{}, &TrainingJobList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
