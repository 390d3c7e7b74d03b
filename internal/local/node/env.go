package node

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EnvSource reads the ConfigMaps and Secrets that env refers to.
type EnvSource interface {
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// ConfigError is a container configuration the node cannot satisfy yet (a missing ConfigMap, Secret or
// key, or one it could not read). The kubelet reports it as CreateContainerConfigError and retries.
type ConfigError struct{ Msg string }

func (e *ConfigError) Error() string { return e.Msg }

// Env returns the environment of a container, resolved the way the kubelet resolves it: envFrom first (values
// as they are, invalid names skipped), then env in order, each value expanded with $(NAME) against the
// variables defined before it; fieldRef, resourceFieldRef, configMapKeyRef and secretKeyRef are read from
// the pod, its node and the API. Optional references that do not exist are left out.
func Env(ctx context.Context, src EnvSource, pod *corev1.Pod, c *corev1.Container, alloc corev1.ResourceList) (map[string]string, error) {
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		if err := addEnvFrom(ctx, src, pod.Namespace, from, env); err != nil {
			return nil, err
		}
	}
	lookup := func(n string) (string, bool) { v, ok := env[n]; return v, ok }
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = Expand(e.Value, lookup)
			continue
		}
		v, ok, err := valueFrom(ctx, src, pod, c, alloc, e.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			env[e.Name] = v
		}
	}
	return env, nil
}

// Environ returns env as NAME=value pairs sorted by name.
func Environ(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func addEnvFrom(ctx context.Context, src EnvSource, ns string, from corev1.EnvFromSource, env map[string]string) error {
	var data map[string]string
	switch {
	case from.ConfigMapRef != nil:
		cm, err := src.ConfigMap(ctx, ns, from.ConfigMapRef.Name)
		if err != nil {
			return missing(err, "configmap", from.ConfigMapRef.Name, from.ConfigMapRef.Optional)
		}
		if cm != nil {
			data = cm.Data
		}
	case from.SecretRef != nil:
		s, err := src.Secret(ctx, ns, from.SecretRef.Name)
		if err != nil {
			return missing(err, "secret", from.SecretRef.Name, from.SecretRef.Optional)
		}
		if s != nil {
			data = secretStrings(s)
		}
	}
	for k, v := range data {
		if len(validation.IsEnvVarName(from.Prefix+k)) == 0 {
			env[from.Prefix+k] = v
		}
	}
	return nil
}

// missing turns a failed read into nil for an optional source that does not exist, else a ConfigError.
func missing(err error, kind, name string, optional *bool) error {
	if apierrors.IsNotFound(err) {
		if optional != nil && *optional {
			return nil
		}
		return &ConfigError{Msg: fmt.Sprintf("%s %q not found", kind, name)}
	}
	// The API server unreachable or failing: the kubelet too reports CreateContainerConfigError and retries;
	// the program never ran, so this is no exit of it (an exit code 128 would read as the program's error).
	return &ConfigError{Msg: fmt.Sprintf("reading %s %q: %v", kind, name, err)}
}

func secretStrings(s *corev1.Secret) map[string]string {
	out := make(map[string]string, len(s.Data)+len(s.StringData))
	for k, v := range s.Data {
		out[k] = string(v)
	}
	for k, v := range s.StringData {
		out[k] = v
	}
	return out
}

func valueFrom(
	ctx context.Context, src EnvSource, pod *corev1.Pod, c *corev1.Container, alloc corev1.ResourceList, vf *corev1.EnvVarSource,
) (string, bool, error) {
	switch {
	case vf.FieldRef != nil:
		v, err := FieldValue(pod, vf.FieldRef.FieldPath)
		return v, err == nil, err
	case vf.ResourceFieldRef != nil:
		v, err := resourceValue(c, alloc, vf.ResourceFieldRef)
		return v, err == nil, err
	case vf.ConfigMapKeyRef != nil:
		return keyRef(ctx, src, pod.Namespace, "configmap", vf.ConfigMapKeyRef.Name, vf.ConfigMapKeyRef.Key, vf.ConfigMapKeyRef.Optional)
	case vf.SecretKeyRef != nil:
		return keyRef(ctx, src, pod.Namespace, "secret", vf.SecretKeyRef.Name, vf.SecretKeyRef.Key, vf.SecretKeyRef.Optional)
	}
	return "", false, fmt.Errorf("unsupported valueFrom")
}

func keyRef(ctx context.Context, src EnvSource, ns, kind, name, key string, optional *bool) (string, bool, error) {
	var data map[string]string
	if kind == "configmap" {
		cm, err := src.ConfigMap(ctx, ns, name)
		if err != nil {
			return "", false, missing(err, kind, name, optional)
		}
		data = cm.Data
	} else {
		s, err := src.Secret(ctx, ns, name)
		if err != nil {
			return "", false, missing(err, kind, name, optional)
		}
		data = secretStrings(s)
	}
	v, ok := data[key]
	if !ok && (optional == nil || !*optional) {
		return "", false, &ConfigError{Msg: fmt.Sprintf("couldn't find key %s in %s %s/%s", key, kind, ns, name)}
	}
	return v, ok, nil
}

// FieldValue returns the downward-API value of a pod field path.
func FieldValue(pod *corev1.Pod, path string) (string, error) {
	if k, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[k], nil
	}
	if k, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[k], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return pod.Status.HostIP, nil
	case "status.podIP", "status.podIPs":
		return pod.Status.PodIP, nil
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

// subscript parses prefix['key'].
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok || !strings.HasSuffix(rest, "']") {
		return "", false
	}
	return strings.TrimSuffix(rest, "']"), true
}

// formatMap returns the downward API's rendering of labels and annotations: key="value" lines, sorted.
func formatMap(m map[string]string) string {
	lines := make([]string, 0, len(m))
	for k, v := range m {
		lines = append(lines, fmt.Sprintf("%s=%q", k, v))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// resourceValue returns the value of a resourceFieldRef: the container's limit (the node's allocatable when unset) or
// request, divided by the divisor and rounded up, as the kubelet computes it.
func resourceValue(c *corev1.Container, alloc corev1.ResourceList, ref *corev1.ResourceFieldSelector) (string, error) {
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("unsupported resourceFieldRef %q", ref.Resource)
	}
	q, found := c.Resources.Limits[corev1.ResourceName(name)]
	if kind == "requests" {
		q, found = c.Resources.Requests[corev1.ResourceName(name)]
	}
	if !found && kind == "limits" {
		q, found = alloc[corev1.ResourceName(name)]
	}
	if !found {
		return "0", nil
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	return fmt.Sprintf("%d", int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue())))), nil
}

// APISource reads ConfigMaps and Secrets from the API server.
type APISource struct{ Reader client.Reader }

// ConfigMap reads a ConfigMap.
func (s APISource) ConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	return cm, s.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm)
}

// Secret reads a Secret.
func (s APISource) Secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	sec := &corev1.Secret{}
	return sec, s.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sec)
}
