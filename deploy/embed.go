// Package deploy embeds the generated CRD, the admission policies and the RBAC, so that programs that install the
// API themselves (the local control plane, the tests) use exactly the committed manifests.
package deploy

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

//go:embed crd/*.yaml policy/*.yaml rbac/*.yaml
var manifests embed.FS

// CRDs returns the objects of crd/.
func CRDs() ([]*unstructured.Unstructured, error) { return objects("crd/*.yaml") }

// Policies returns the admission policies and bindings of policy/.
func Policies() ([]*unstructured.Unstructured, error) { return objects("policy/*.yaml") }

// RBAC returns the operator's ServiceAccount, roles and bindings of rbac/.
func RBAC() ([]*unstructured.Unstructured, error) { return objects("rbac/*.yaml") }

func objects(pattern string) ([]*unstructured.Unstructured, error) {
	files, err := fs.Glob(manifests, pattern)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		data, err := manifests.ReadFile(f)
		if err != nil {
			return nil, err
		}
		o, err := Decode(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		objs = append(objs, o...)
	}
	return objs, nil
}

// ReadFile reads every object of a (multi-document) YAML or JSON file.
func ReadFile(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	objs, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return objs, nil
}

// Decode reads every object of a (multi-document) YAML or JSON stream.
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, err
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}
