package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// startStack creates a namespace and runs the real kube-controller-manager and the operator (watching
// that namespace) until the test ends.
func startStack(t *testing.T) string {
	t.Helper()
	ns := newNamespace(t)
	startControllerManager(t)
	startOperator(t, ns)
	return ns
}

// startOperator runs the operator's controllers, watching only ns, until the test ends or stop is called
// (as when the operator is killed: nothing is flushed); options change its configuration.
func startOperator(t *testing.T, ns string, options ...func(*controllers.Config)) (stop func()) {
	t.Helper()
	return startOperatorOn(t, env.Config, ns, options...)
}

// startOperatorOn is startOperator talking to the API server through rc.
func startOperatorOn(t *testing.T, rc *rest.Config, ns string, options ...func(*controllers.Config)) (stop func()) {
	t.Helper()
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(testWriter{t})))
	mgr, err := ctrl.NewManager(rc, ctrl.Options{
		Scheme:                 controllers.NewScheme(),
		Cache:                  controllers.CacheOptions(rc, []string{ns}),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)}, // one manager per test
	})
	if err != nil {
		t.Fatalf("creating manager: %v", err)
	}
	cfg := controllers.Config{
		Builders: builders.Options{DefaultImages: map[mlv1.Framework]string{mlv1.FrameworkPyTorch: "pytorch:test"}},
		// Progress is read often so tests see it soon; timeouts are short as rank 0 is on loopback.
		ProgressInterval: 300 * time.Millisecond, ScrapeTimeout: 500 * time.Millisecond, Namespaces: []string{ns},
	}
	for _, o := range options {
		o(&cfg)
	}
	if err := controllers.Setup(mgr, cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// startControllerManager runs the real kube-controller-manager's Job controller, garbage collector and
// the other controllers named.
func startControllerManager(t *testing.T, more ...string) {
	t.Helper()
	p, err := env.StartControllerManager(append([]string{"job", "garbagecollector"}, more...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// eventually polls cond until it holds, failing the test with the last error after a generous bound.
func eventually(t *testing.T, what string, cond func(ctx context.Context) error) {
	t.Helper()
	var last error
	poll := func(ctx context.Context) (bool, error) {
		err := cond(ctx)
		if dl, ok := ctx.Deadline(); ok && err != nil && last != nil && time.Until(dl) < time.Second {
			// The client fails on the poll's deadline itself ("rate: Wait(n=1) would exceed context
			// deadline"): keep what cond found before.
			return false, nil
		}
		last = err
		return last == nil, nil
	}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, poll)
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, last)
	}
}

func waitForState(t *testing.T, key client.ObjectKey, state mlv1.State) *mlv1.TrainingJob {
	t.Helper()
	tj := &mlv1.TrainingJob{}
	eventually(t, fmt.Sprintf("%s to be %s", key, state), func(ctx context.Context) error {
		if err := env.Client.Get(ctx, key, tj); err != nil {
			return err
		}
		if tj.Status.State != state {
			return fmt.Errorf("state is %q (%+v)", tj.Status.State, tj.Status.Conditions)
		}
		return nil
	})
	return tj
}

func workerPods(t *testing.T, tj *mlv1.TrainingJob, n int) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	eventually(t, fmt.Sprintf("%d worker pods", n), func(ctx context.Context) error {
		if err := env.Client.List(ctx, &pods, client.InNamespace(tj.Namespace), client.MatchingLabels(names.SelectorLabels(tj))); err != nil {
			return err
		}
		if len(pods.Items) != n {
			return fmt.Errorf("%d pods", len(pods.Items))
		}
		return nil
	})
	return pods.Items
}

// setPodStatus plays the kubelet: it writes a pod's phase and its trainer container's state.
func setPodStatus(t *testing.T, pod *corev1.Pod, phase corev1.PodPhase, state corev1.ContainerState, restarts int32) {
	t.Helper()
	setPodStatusIn(t, env.Client, pod, phase, state, restarts)
}

// setPodStatusIn returns setPodStatus on the API server of c.
func setPodStatusIn(t *testing.T, c client.Client, pod *corev1.Pod, phase corev1.PodPhase, state corev1.ContainerState, restarts int32) {
	t.Helper()
	eventually(t, "pod status write", func(ctx context.Context) error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		ready := phase == corev1.PodRunning
		pod.Status.Phase = phase
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: boolCondition(ready)}}
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: names.ContainerName, Image: pod.Spec.Containers[0].Image, State: state, Ready: ready, RestartCount: restarts,
		}}
		return c.Status().Update(ctx, pod)
	})
}

func boolCondition(b bool) corev1.ConditionStatus {
	if b {
		return corev1.ConditionTrue
	}
	return corev1.ConditionFalse
}

func running() corev1.ContainerState {
	return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
}

func terminated(code int32, reason string) corev1.ContainerState {
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: reason, StartedAt: metav1.Now(), FinishedAt: metav1.Now(),
	}}
}

// eventReasons returns the type/reason of the events recorded for a TrainingJob, oldest first.
func eventReasons(ctx context.Context, tj *mlv1.TrainingJob) ([]string, error) {
	return eventField(ctx, tj, func(e eventsv1.Event) string { return e.Type + "/" + e.Reason })
}

// eventNotes returns the notes of the events recorded for a TrainingJob.
func eventNotes(ctx context.Context, tj *mlv1.TrainingJob) ([]string, error) {
	return eventField(ctx, tj, func(e eventsv1.Event) string { return e.Note })
}

func eventField(ctx context.Context, tj *mlv1.TrainingJob, field func(eventsv1.Event) string) ([]string, error) {
	var list eventsv1.EventList
	if err := env.Client.List(ctx, &list, client.InNamespace(tj.Namespace)); err != nil {
		return nil, err
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.UID == tj.UID {
			out = append(out, field(e))
		}
	}
	return out, nil
}

// table returns what `kubectl get trainingjobs` prints: the API server's Table for the resource.
func table(t *testing.T, ns string) *metav1.Table {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/ml.example.com/v1/namespaces", ns, "trainingjobs").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("getting table: %v", err)
	}
	tbl := &metav1.Table{}
	if err := json.Unmarshal(body, tbl); err != nil {
		t.Fatalf("decoding table: %v\n%s", err, body)
	}
	return tbl
}
