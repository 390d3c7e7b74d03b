package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// writeCounter counts the operator's writes to the API server in one namespace, by method and resource
// ("POST jobs", "PATCH trainingjobs/status").
type writeCounter struct {
	ns string
	mu sync.Mutex
	n  map[string]int
	// status are the status writes' bodies, in order, to say which one was too many.
	status []string
}

func (c *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet {
			if key, ok := c.key(req); ok {
				c.mu.Lock()
				c.n[key]++
				if strings.Contains(key, "/status") && req.GetBody != nil {
					if b, err := req.GetBody(); err == nil {
						data, _ := io.ReadAll(b)
						c.status = append(c.status, key+": "+string(data))
					}
				}
				c.mu.Unlock()
			}
		}
		return rt.RoundTrip(req)
	})
}

// key returns "METHOD resource[/subresource]" for a request in the counter's namespace.
func (c *writeCounter) key(req *http.Request) (string, bool) {
	_, rest, ok := strings.Cut(req.URL.Path, "/namespaces/"+c.ns+"/")
	if !ok {
		return "", false
	}
	parts := strings.Split(rest, "/") // resource[/name[/subresource]]
	key := req.Method + " " + parts[0]
	if len(parts) > 2 {
		key += "/" + parts[2]
	}
	if m := req.URL.Query().Get("fieldManager"); m != "" && strings.HasSuffix(key, "/status") {
		key += " by " + m
	}
	return key, true
}

func (c *writeCounter) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

func (c *writeCounter) statusBodies() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.status)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestLifecycleWrites counts the operator's writes to the API server over the life of a 2-worker job with
// monitoring off, from its creation to Completed, played with the real Job controller: the children's
// creates, the status writes (every one of them, no-op writes included: they are requests too) and the
// events. A change that adds a write to every job's life fails here.
func TestLifecycleWrites(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	startControllerManager(t)
	counter := &writeCounter{ns: ns, n: map[string]int{}}
	rc := rest.CopyConfig(env.Config)
	rc.Wrap(counter.wrap)
	// Worker counts and reasons alone are written at most every ProgressInterval: at its default, not the
	// tests' 300 ms, which would count the test's own pace.
	startOperatorOn(t, rc, ns, func(c *controllers.Config) { c.ProgressInterval = 5 * time.Second })

	tj := tjtest.NewTJ(ns, "counted").Workers(2).GPUs(0).Image("busybox:1.36", "train").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Monitoring = &mlv1.MonitoringSpec{Enabled: ptr.To(false)}
	}).Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tj)
	pods := workerPods(t, tj, 2)
	for i := range pods {
		setPodStatus(t, &pods[i], corev1.PodRunning, running(), 0)
	}
	waitForState(t, key, mlv1.StateRunning)
	for i := range pods {
		setPodStatus(t, &pods[i], corev1.PodSucceeded, terminated(0, "Completed"), 0)
	}
	waitForState(t, key, mlv1.StateCompleted)
	eventually(t, "the final goodput accounted", func(ctx context.Context) error {
		got := &mlv1.TrainingJob{}
		if err := env.Client.Get(ctx, key, got); err != nil {
			return err
		}
		if g := got.Status.Goodput; g == nil || g.Category != "" {
			return fmt.Errorf("goodput %+v", g)
		}
		return nil
	})
	got := counter.counts()
	t.Logf("writes over one lifecycle: %v", got)
	// At most these: the JobController's Initializing, Running and Completed, goodput in each; nothing
	// from the StatusController, which has no progress to read.
	most := map[string]int{"POST configmaps": 1, "POST services": 1, "POST jobs": 1, "POST events": 1,
		"PATCH trainingjobs/status by trainingjob": 3}
	for k, n := range got {
		if n > most[k] {
			t.Errorf("%d writes %q over one lifecycle, want at most %d (all: %v); the status writes:\n%s", n, k, most[k], got,
				strings.Join(counter.statusBodies(), "\n"))
		}
	}
}

// TestGoodputTakenOverFromTheStatusController: status.goodput was the StatusController's (field manager
// trainingjob-status) before it moved to the JobController. A job an older operator accounted keeps its
// goodput when the new one starts: the JobController takes the field over before any controller writes,
// and goes on from what was accounted, instead of being refused (409) or the field being deleted.
func TestGoodputTakenOverFromTheStatusController(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	startControllerManager(t)
	tj := tjtest.NewTJ(ns, "upgraded").Workers(1).GPUs(0).Image("busybox:1.36", "train").Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	hourAgo := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	old := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"goodput": map[string]any{
		"accountedTime": hourAgo.UTC().Format(metav1.RFC3339Micro), "category": mlv1.GoodputProductive, "productiveSeconds": 1234.0}}}}
	old.SetGroupVersionKind(mlv1.GroupVersion.WithKind("TrainingJob"))
	old.SetNamespace(ns)
	old.SetName(tj.Name)
	byOldOwner := client.FieldOwner("trainingjob-status")
	if err := env.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(old), byOldOwner); err != nil {
		t.Fatal(err)
	}
	startOperator(t, ns)
	key := client.ObjectKeyFromObject(tj)
	got := waitForState(t, key, mlv1.StateInitializing)
	if g := got.Status.Goodput; g == nil || g.ProductiveSeconds < 1234 {
		t.Errorf("goodput %+v, want the accounting carried on from 1234 productive seconds", g)
	}
	for _, e := range got.ManagedFields {
		owns := e.FieldsV1 != nil && strings.Contains(e.FieldsV1.GetRawString(), `"f:goodput"`)
		if owns && e.Manager != "trainingjob" || !owns && e.Manager == "trainingjob" && e.Subresource == "status" {
			t.Errorf("manager %s (%s) owns goodput: %t", e.Manager, e.Subresource, owns)
		}
	}
}
