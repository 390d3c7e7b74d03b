package node

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

type fakeSource struct {
	cms     map[string]map[string]string
	secrets map[string]map[string][]byte
}

func (f fakeSource) ConfigMap(_ context.Context, _, name string) (*corev1.ConfigMap, error) {
	if name == "unreachable" {
		return nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	}
	d, ok := f.cms[name]
	if !ok {
		return nil, apierrors.NewNotFound(corev1.Resource("configmaps"), name)
	}
	return &corev1.ConfigMap{Data: d}, nil
}

func (f fakeSource) Secret(_ context.Context, _, name string) (*corev1.Secret, error) {
	d, ok := f.secrets[name]
	if !ok {
		return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
	}
	return &corev1.Secret{Data: d}, nil
}

func field(path string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
}

func cmKey(name, key string, optional bool) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: &optional}}
}

func secretKey(name, key string, optional bool) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: &optional}}
}

// TestEnv follows the kubelet's rules (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables).
func TestEnv(t *testing.T) {
	src := fakeSource{
		cms:     map[string]map[string]string{"cfg": {"mode": "fast", "LR": "0.1", "1bad": "skipped", "dup": "from-cm"}},
		secrets: map[string]map[string][]byte{"sec": {"token": []byte("s3cr3t"), "USER": []byte("alice")}},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "w-0", Namespace: "ml", UID: "uid-1",
			Annotations: map[string]string{"batch.kubernetes.io/job-completion-index": "0"}, Labels: map[string]string{"b": "2", "a": "1"}},
		Spec:   corev1.PodSpec{NodeName: "process-node-0", ServiceAccountName: "trainer"},
		Status: corev1.PodStatus{PodIP: "127.9.8.7", HostIP: "127.0.0.1"},
	}
	c := corev1.Container{Resources: corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m")},
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}}
	alloc := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")}
	cases := []struct {
		name    string
		env     []corev1.EnvVar
		envFrom []corev1.EnvFromSource
		want    map[string]string
		wantErr string
	}{
		{name: "literal values and expansion of earlier names only", env: []corev1.EnvVar{
			{Name: "A", Value: "a"}, {Name: "B", Value: "$(A)-$(C)"}, {Name: "C", Value: "c"}, {Name: "D", Value: "$$(A) $(A)$(A)"},
			{Name: "A", Value: "$(A)2"},
		}, want: map[string]string{"A": "a2", "B": "a-$(C)", "C": "c", "D": "$(A) aa"}},
		{name: "downward API", env: []corev1.EnvVar{
			{Name: "RANK", ValueFrom: field("metadata.annotations['batch.kubernetes.io/job-completion-index']")},
			{Name: "NODE_RANK", Value: "$(RANK)"},
			{Name: "POD", ValueFrom: field("metadata.name")}, {Name: "NS", ValueFrom: field("metadata.namespace")},
			{Name: "UID", ValueFrom: field("metadata.uid")}, {Name: "IP", ValueFrom: field("status.podIP")},
			{Name: "HOST", ValueFrom: field("status.hostIP")}, {Name: "NODE", ValueFrom: field("spec.nodeName")},
			{Name: "SA", ValueFrom: field("spec.serviceAccountName")}, {Name: "LA", ValueFrom: field("metadata.labels['a']")},
			{Name: "LABELS", ValueFrom: field("metadata.labels")}, {Name: "MISSING", ValueFrom: field("metadata.annotations['none']")},
		}, want: map[string]string{
			"RANK": "0", "NODE_RANK": "0", "POD": "w-0", "NS": "ml", "UID": "uid-1", "IP": "127.9.8.7", "HOST": "127.0.0.1",
			"NODE": "process-node-0", "SA": "trainer", "LA": "1", "LABELS": "a=\"1\"\nb=\"2\"", "MISSING": "",
		}},
		{name: "resource fields", env: []corev1.EnvVar{
			{Name: "CPU", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
			{Name: "MCPU", ValueFrom: &corev1.EnvVarSource{
				ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu", Divisor: resource.MustParse("1m")}}},
			{Name: "MEM", ValueFrom: &corev1.EnvVarSource{
				ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.memory", Divisor: resource.MustParse("1Mi")}}},
			{Name: "MEMLIM", ValueFrom: &corev1.EnvVarSource{
				ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Gi")}}},
		}, want: map[string]string{"CPU": "2", "MCPU": "1500", "MEM": "1024", "MEMLIM": "8"}},
		{name: "config map and secret keys, optional ones left out", env: []corev1.EnvVar{
			{Name: "MODE", ValueFrom: cmKey("cfg", "mode", false)}, {Name: "TOKEN", ValueFrom: secretKey("sec", "token", false)},
			{Name: "OPT1", ValueFrom: cmKey("absent", "k", true)}, {Name: "OPT2", ValueFrom: secretKey("sec", "absent", true)},
			{Name: "X", Value: "$(MODE)/$(OPT1)"},
		}, want: map[string]string{"MODE": "fast", "TOKEN": "s3cr3t", "X": "fast/$(OPT1)"}},
		{name: "envFrom with prefix, invalid names skipped, values not expanded, env wins", envFrom: []corev1.EnvFromSource{
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}},
			{Prefix: "S_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}}},
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Optional: ptr.To(true)}},
		}, env: []corev1.EnvVar{{Name: "dup", Value: "from-env $(LR)"}},
			want: map[string]string{"mode": "fast", "LR": "0.1", "dup": "from-env 0.1", "S_token": "s3cr3t", "S_USER": "alice"}},
		{name: "missing config map", env: []corev1.EnvVar{{Name: "M", ValueFrom: cmKey("absent", "k", false)}},
			wantErr: `env M: configmap "absent" not found`},
		{name: "the API server unreachable: retried, as the kubelet does (no exit of the program)",
			env:     []corev1.EnvVar{{Name: "R", ValueFrom: cmKey("unreachable", "k", false)}},
			wantErr: `env R: reading configmap "unreachable": dial tcp 127.0.0.1:6443: connect: connection refused`},
		{name: "missing secret key", env: []corev1.EnvVar{{Name: "M", ValueFrom: secretKey("sec", "nope", false)}},
			wantErr: "env M: couldn't find key nope in secret ml/sec"},
		{name: "missing envFrom secret",
			envFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}}}},
			wantErr: `secret "absent" not found`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := c
			c.Env, c.EnvFrom = tc.env, tc.envFrom
			got, err := Env(context.Background(), src, pod, &c, alloc)
			if tc.wantErr != "" {
				var cfgErr *ConfigError
				if err == nil || err.Error() != tc.wantErr || !errors.As(err, &cfgErr) {
					t.Fatalf("error = %v, want ConfigError %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}
