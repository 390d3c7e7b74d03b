package node

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestStopGivesUpStatusWrites: a node that stops while the API server does not answer its pods' status
// writes (they block until cancelled) returns within stopWrites, not never (a stop held for 15 minutes).
func TestStopGivesUpStatusWrites(t *testing.T) {
	defer func(d time.Duration) { stopWrites = d }(stopWrites)
	stopWrites = 300 * time.Millisecond
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "w-0", UID: "u0"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "trainer", Image: "x", Command: []string{"sleep", "60"}}}}}
	blocked := make(chan struct{}, 1)
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).WithObjects(pod).Build(), interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, _ client.Client, _ string, _ client.Object, _ ...client.SubResourceUpdateOption) error {
			select {
			case blocked <- struct{}{}:
			default:
			}
			<-ctx.Done() // an API server that does not answer
			return ctx.Err()
		}})
	n := New(Options{Name: "n", DataRoot: t.TempDir(), Log: logr.Discard()})
	n.client, n.reader = c, c
	n.runCtx, n.cancelRuns = context.WithCancel(context.Background())
	n.startRun(pod)
	select {
	case <-blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the pod's first status write never started")
	}
	stopped := make(chan struct{})
	go func() { n.stopAll(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the node's stop waits for a status write the API server never answers")
	}
}
