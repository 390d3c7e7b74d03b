package controllers

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// fetcherPod returns rank 0's pod with a running fetch-inputs init container at ip.
func fetcherPod(ip string) corev1.Pod {
	p := corev1.Pod{}
	p.Name, p.Labels = "a-0", map[string]string{names.RankLabel: "0"}
	p.Status.PodIP = ip
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{
		Name: names.InputsContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
	}}
	return p
}

// TestInputsProgressIsBounded: the operator asks a pod's fetch-inputs container for progress only when the
// job fetches a source, and reads at most maxInputsAnswer bytes of the answer: an endless answer (before:
// a 24 MiB one took 760 MiB of heap) costs a bounded read and no progress.
func TestInputsProgressIsBounded(t *testing.T) {
	var requests atomic.Int32
	chunk := []byte(`{"name":"dataset","source":"s3://b/x","done":1,"total":2},`)
	l, ip := listenOnLoopback(t, builders.InputsPort)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		_, _ = w.Write([]byte("["))
		for range 1 << 20 { // 60 MiB, if anyone read it all
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	pods := []corev1.Pod{fetcherPod(ip)}

	none := tjtest.NewTJ("ml", "a").Obj() // a plain dataset name: nothing is fetched
	if got := inputsProgress(context.Background(), none, pods); got != nil || requests.Load() != 0 {
		t.Errorf("a job that fetches nothing: progress %v after %d requests, want none asked", got, requests.Load())
	}
	fetching := tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) { tj.Spec.Dataset = "s3://bkt/x" }).Obj()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	got := inputsProgress(context.Background(), fetching, pods)
	runtime.ReadMemStats(&after)
	if got != nil || requests.Load() != 1 {
		t.Errorf("an endless answer: progress of %d sources after %d requests, want none after 1", len(got), requests.Load())
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("reading the answer allocated %d MiB, want it bounded by the %d KiB read", alloc>>20, maxInputsAnswer>>10)
	}
}

// listenOnLoopback listens on port at the first free loopback address from 127.0.0.2 (the fetcher's port
// is fixed, as it is in a pod), so that a program holding the port on one address does not stop the test.
func listenOnLoopback(t *testing.T, port int32) (net.Listener, string) {
	t.Helper()
	var errs []error
	for i := 2; i < 255; i++ {
		ip := "127.0.0." + strconv.Itoa(i)
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(int(port))))
		if err == nil {
			return l, ip
		}
		errs = append(errs, err)
	}
	t.Fatalf("no loopback address has port %d free: %v", port, errors.Join(errs...))
	return nil, ""
}
