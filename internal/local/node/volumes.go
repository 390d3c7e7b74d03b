package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Volumes of a pod become host directories: configMap, secret, downwardAPI and projected volumes are
// written as files under the pod's directory when the pod starts (not refreshed later); emptyDir is a
// directory under the pod's directory; persistentVolumeClaim is <root>/claims/<namespace>/<claim>, the
// same directory for every pod that mounts the claim, kept across pods and restarts; hostPath is the path.

// volumeDirs prepares every volume of pod and returns the host directory of each by volume name.
func (n *Node) volumeDirs(ctx context.Context, pod *corev1.Pod, podDir string) (map[string]string, error) {
	dirs := map[string]string{}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		dir, err := n.volumeDir(ctx, pod, podDir, v)
		if err != nil {
			return nil, fmt.Errorf("volume %q: %w", v.Name, err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		dirs[v.Name] = dir
	}
	return dirs, nil
}

func (n *Node) volumeDir(ctx context.Context, pod *corev1.Pod, podDir string, v *corev1.Volume) (string, error) {
	dir := filepath.Join(podDir, "volumes", v.Name)
	src := APISource{Reader: n.reader}
	switch {
	case v.EmptyDir != nil:
		return dir, nil
	case v.PersistentVolumeClaim != nil:
		return n.ClaimDir(pod.Namespace, v.PersistentVolumeClaim.ClaimName), nil
	case v.HostPath != nil:
		return v.HostPath.Path, nil
	case v.ConfigMap != nil:
		files, err := configMapFiles(ctx, src, pod.Namespace, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional)
		return dir, writeFiles(dir, files, v.ConfigMap.DefaultMode, err)
	case v.Secret != nil:
		files, err := secretFiles(ctx, src, pod.Namespace, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional)
		return dir, writeFiles(dir, files, v.Secret.DefaultMode, err)
	case v.DownwardAPI != nil:
		files, err := downwardFiles(pod, v.DownwardAPI.Items)
		return dir, writeFiles(dir, files, v.DownwardAPI.DefaultMode, err)
	case v.Projected != nil:
		files, err := n.projectedFiles(ctx, pod, v.Projected.Sources)
		return dir, writeFiles(dir, files, v.Projected.DefaultMode, err)
	}
	return "", &ConfigError{Msg: "volume type not supported by the process node " +
		"(supported: emptyDir, persistentVolumeClaim, hostPath, configMap, secret, downwardAPI, projected)"}
}

func configMapFiles(
	ctx context.Context, src EnvSource, ns, name string, items []corev1.KeyToPath, optional *bool,
) (map[string]string, error) {
	cm, err := src.ConfigMap(ctx, ns, name)
	if err != nil {
		return nil, missing(err, "configmap", name, optional)
	}
	data := map[string]string{}
	for k, v := range cm.Data {
		data[k] = v
	}
	for k, v := range cm.BinaryData {
		data[k] = string(v)
	}
	return selectItems(data, items, optional)
}

func secretFiles(ctx context.Context, src EnvSource, ns, name string, items []corev1.KeyToPath, optional *bool) (map[string]string, error) {
	s, err := src.Secret(ctx, ns, name)
	if err != nil {
		return nil, missing(err, "secret", name, optional)
	}
	return selectItems(secretStrings(s), items, optional)
}

// selectItems maps keys to file paths: every key when items is empty, else the listed keys.
func selectItems(data map[string]string, items []corev1.KeyToPath, optional *bool) (map[string]string, error) {
	if len(items) == 0 {
		return data, nil
	}
	out := map[string]string{}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional != nil && *optional {
				continue
			}
			return nil, &ConfigError{Msg: fmt.Sprintf("key %q not found", it.Key)}
		}
		out[it.Path] = v
	}
	return out, nil
}

func downwardFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile) (map[string]string, error) {
	out := map[string]string{}
	for _, it := range items {
		if it.FieldRef == nil {
			return nil, &ConfigError{Msg: fmt.Sprintf("downwardAPI item %q: only fieldRef is supported", it.Path)}
		}
		v, err := FieldValue(pod, it.FieldRef.FieldPath)
		if err != nil {
			return nil, err
		}
		out[it.Path] = v
	}
	return out, nil
}

func (n *Node) projectedFiles(ctx context.Context, pod *corev1.Pod, sources []corev1.VolumeProjection) (map[string]string, error) {
	src := APISource{Reader: n.reader}
	out := map[string]string{}
	for _, s := range sources {
		var files map[string]string
		var err error
		switch {
		case s.ConfigMap != nil:
			files, err = configMapFiles(ctx, src, pod.Namespace, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional)
		case s.Secret != nil:
			files, err = secretFiles(ctx, src, pod.Namespace, s.Secret.Name, s.Secret.Items, s.Secret.Optional)
		case s.DownwardAPI != nil:
			files, err = downwardFiles(pod, s.DownwardAPI.Items)
		case s.ServiceAccountToken != nil:
			files, err = n.tokenFile(ctx, pod, s.ServiceAccountToken)
		default:
			err = &ConfigError{Msg: "projected source not supported by the process node"}
		}
		if err != nil {
			return nil, err
		}
		for k, v := range files {
			out[k] = v
		}
	}
	return out, nil
}

// tokenFile asks the API server for a token bound to the pod, as the kubelet does.
func (n *Node) tokenFile(ctx context.Context, pod *corev1.Pod, p *corev1.ServiceAccountTokenProjection) (map[string]string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: pod.Spec.ServiceAccountName, Namespace: pod.Namespace}}
	if sa.Name == "" {
		sa.Name = "default"
	}
	tr := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(ptr.Deref(p.ExpirationSeconds, 3600)),
		BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if p.Audience != "" {
		tr.Spec.Audiences = []string{p.Audience}
	}
	if err := n.client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return nil, &ConfigError{Msg: fmt.Sprintf("requesting a token for service account %s: %v", sa.Name, err)}
	}
	return map[string]string{p.Path: tr.Status.Token}, nil
}

// writeFiles writes files (relative paths) into dir with the volume's defaultMode (0644 when unset, as the
// kubelet; per-item modes are not supported), replacing what a previous run of the pod wrote.
func writeFiles(dir string, files map[string]string, defaultMode *int32, err error) error {
	if err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if defaultMode != nil {
		mode = os.FileMode(*defaultMode) & os.ModePerm
	}
	names := make([]string, 0, len(files))
	for p := range files {
		if filepath.IsAbs(p) || strings.Contains(p, "..") {
			return &ConfigError{Msg: fmt.Sprintf("invalid file path %q", p)}
		}
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(files[p]), mode); err != nil {
			return err
		}
		if err := os.Chmod(full, mode); err != nil { // an existing file keeps its mode on WriteFile
			return err
		}
	}
	return nil
}

// mounts maps a container's mount paths to host paths (subPath included), longest path first.
type mounts []mount

type mount struct{ container, host string }

func containerMounts(c *corev1.Container, dirs map[string]string) (mounts, error) {
	var ms mounts
	for _, vm := range c.VolumeMounts {
		dir, ok := dirs[vm.Name]
		if !ok {
			return nil, &ConfigError{Msg: fmt.Sprintf("volumeMount %q names no volume", vm.Name)}
		}
		if vm.SubPath != "" {
			dir = filepath.Join(dir, vm.SubPath)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
		}
		ms = append(ms, mount{container: filepath.Clean(vm.MountPath), host: dir})
	}
	sort.Slice(ms, func(i, j int) bool { return len(ms[i].container) > len(ms[j].container) })
	return ms, nil
}

// Translate rewrites container paths under a mount path to the host paths they are mounted from,
// wherever such a path appears as a whole path in v: a value "/etc/cfg/mode", an argument
// "--config=/etc/cfg/mode" or a shell script "cat /etc/cfg/mode". A mount path counts only where it is
// not part of a longer path or word ("/work" does not match in "/workspace" or "/home/work").
func (ms mounts) Translate(v string) string {
	if len(ms) == 0 || !strings.Contains(v, "/") {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); {
		if m, ok := ms.at(v, i); ok {
			b.WriteString(m.host)
			i += len(m.container)
			continue
		}
		b.WriteByte(v[i])
		i++
	}
	return b.String()
}

// at finds the longest mount path starting at v[i] on path boundaries.
func (ms mounts) at(v string, i int) (mount, bool) {
	if v[i] != '/' || (i > 0 && isPathChar(v[i-1])) {
		return mount{}, false
	}
	for _, m := range ms { // longest first
		end := i + len(m.container)
		if strings.HasPrefix(v[i:], m.container) && (end == len(v) || !isPathChar(v[end]) || v[end] == '/') {
			return m, true
		}
	}
	return mount{}, false
}

// isPathChar reports whether c is a byte that continues a path or a word.
func isPathChar(c byte) bool {
	return c == '/' || c == '.' || c == '-' || c == '_' || c == '~' ||
		(c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}
