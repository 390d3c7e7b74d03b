package node

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestTranslate(t *testing.T) {
	c := &corev1.Container{VolumeMounts: []corev1.VolumeMount{
		{Name: "cfg", MountPath: "/etc/trainingjob"}, {Name: "ckpt", MountPath: "/checkpoints/"},
		{Name: "work", MountPath: "/work"}, {Name: "nested", MountPath: "/work/data"},
	}}
	dirs := map[string]string{"cfg": "/h/cfg", "ckpt": "/h/claims/ckpt", "work": "/h/work", "nested": "/h/data"}
	ms, err := containerMounts(c, dirs)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ in, want string }{
		{"/etc/trainingjob/config.json", "/h/cfg/config.json"},
		{"/etc/trainingjob", "/h/cfg"},
		{"/checkpoints/demo/job", "/h/claims/ckpt/demo/job"},
		{"--config=/etc/trainingjob/config.json", "--config=/h/cfg/config.json"},
		{"cat /work/a.txt && ls '/work/data/x'", "cat /h/work/a.txt && ls '/h/data/x'"},
		{"/workspace/a", "/workspace/a"},
		{"/home/work/a", "/home/work/a"},
		{"/etc/trainingjob2", "/etc/trainingjob2"},
		{"PATH=/usr/bin:/work/bin", "PATH=/usr/bin:/h/work/bin"},
		{"no paths here", "no paths here"},
	}
	for _, tc := range cases {
		if got := ms.Translate(tc.in); got != tc.want {
			t.Errorf("Translate(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestResolveNames(t *testing.T) {
	pod := &corev1.Pod{}
	pod.Namespace, pod.Spec.Hostname, pod.Spec.Subdomain = "ml", "mnist-worker-0", "mnist-headless"
	addr := PodAddr(pod).String()
	cases := []struct{ in, want string }{
		{"mnist-worker-0.mnist-headless.ml.svc", addr},
		{"mnist-worker-0.mnist-headless.ml.svc.cluster.local", addr},
		{"mnist-worker-0.mnist-headless.ml.svc:29500", addr + ":29500"},
		{`{"worker":["mnist-worker-0.mnist-headless.ml.svc:1"]}`, `{"worker":["` + addr + `:1"]}`},
		{"mnist-headless.ml.svc", "mnist-headless.ml.svc"}, // a Service name, not a pod's
		{"example.com", "example.com"},
	}
	for _, tc := range cases {
		if got := ResolveNames(tc.in); got != tc.want {
			t.Errorf("ResolveNames(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if a := PodAddr(pod); !a.IsLoopback() || a.As4()[1] == 0 {
		t.Errorf("pod address %s is not in 127.1.0.0-127.250.255.255", a)
	}
	other := pod.DeepCopy()
	other.Spec.Hostname = "mnist-worker-1"
	if PodAddr(other) == PodAddr(pod) {
		t.Errorf("ranks 0 and 1 share an address")
	}
}
