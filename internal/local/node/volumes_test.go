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
		{in: "/etc/trainingjob/config.json", want: "/h/cfg/config.json"},
		{in: "/etc/trainingjob", want: "/h/cfg"},
		{in: "/checkpoints/demo/job", want: "/h/claims/ckpt/demo/job"},
		{in: "--config=/etc/trainingjob/config.json", want: "--config=/h/cfg/config.json"},
		{in: "cat /work/a.txt && ls '/work/data/x'", want: "cat /h/work/a.txt && ls '/h/data/x'"},
		{in: "/workspace/a", want: "/workspace/a"},
		{in: "/home/work/a", want: "/home/work/a"},
		{in: "/etc/trainingjob2", want: "/etc/trainingjob2"},
		{in: "PATH=/usr/bin:/work/bin", want: "PATH=/usr/bin:/h/work/bin"},
		{in: "no paths here", want: "no paths here"},
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
		{in: "mnist-worker-0.mnist-headless.ml.svc", want: addr},
		{in: "mnist-worker-0.mnist-headless.ml.svc.cluster.local", want: addr},
		{in: "mnist-worker-0.mnist-headless.ml.svc:29500", want: addr + ":29500"},
		{in: `{"worker":["mnist-worker-0.mnist-headless.ml.svc:1"]}`, want: `{"worker":["` + addr + `:1"]}`},
		{in: "mnist-headless.ml.svc", want: "mnist-headless.ml.svc"}, // a Service name, not a pod's
		{in: "example.com", want: "example.com"},
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
