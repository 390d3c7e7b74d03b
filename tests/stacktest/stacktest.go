// Package stacktest runs a test binary's tests on one local stack (package local): the end-to-end and
// the chaos suites share it.
package stacktest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

// Main builds the example trainer and the manager, starts a local stack with two process nodes and
// short intervals, lets configure complete its options (bin is where the tools are), runs the tests,
// stops the stack, and keeps its directory (component and pod logs, pods' files) only when a test
// failed. It returns the exit code for os.Exit.
func Main(m *testing.M, name string, stack **local.Stack, configure func(o *local.Options, bin string)) int {
	return MainOf(m, name, configure, func(o local.Options) (func() error, error) {
		s, err := local.Up(context.Background(), o)
		if err != nil {
			return nil, err
		}
		*stack = s
		return s.Down, nil
	})
}

// MainOf is Main for what up starts from the options (several stacks, for example); up returns how to
// stop it.
func MainOf(m *testing.M, name string, configure func(o *local.Options, bin string),
	up func(local.Options) (down func() error, err error)) int {
	code, err := run(m, name, configure, up)
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1
	}
	return code
}

func run(m *testing.M, name string, configure func(o *local.Options, bin string),
	up func(local.Options) (func() error, error)) (int, error) {
	assets, err := testenv.Assets()
	if err != nil {
		return 1, err
	}
	dir, err := os.MkdirTemp("", "trainingjob-"+name+"-")
	if err != nil {
		return 1, err
	}
	bin, err := testenv.BuildWorkerTools(dir)
	if err != nil {
		return 1, err
	}
	logFile, err := os.Create(filepath.Join(dir, "stack.log"))
	if err != nil {
		return 1, err
	}
	defer logFile.Close()
	opts := local.Options{
		Assets: assets, Dir: dir, Nodes: 2, Path: []string{bin}, WorkDir: testenv.RepoRoot(), RestartBackoff: time.Second,
		ProgressInterval: 300 * time.Millisecond, CheckpointInterval: 300 * time.Millisecond,
		Log: zap.New(zap.WriteTo(logFile), zap.Level(zapcore.InfoLevel)),
	}
	if configure != nil {
		configure(&opts, bin)
	}
	// The suite's own clients log through controller-runtime too: into the stack's log, not (as a stack
	// trace saying the logger was never set) into the middle of the tests' output.
	ctrllog.SetLogger(opts.Log)
	down, err := up(opts)
	if err != nil {
		return 1, fmt.Errorf("%w (logs in %s)", err, dir)
	}
	code := m.Run()
	if err := down(); err != nil {
		return 1, err
	}
	if code == 0 {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "%s: logs of the stack and the pods are kept in %s\n", name, dir)
	}
	return code, nil
}

// NewNamespace creates a namespace named prefix + a random suffix for one test.
func NewNamespace(t *testing.T, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// Create creates objs, failing the test at the first error.
func Create(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// Scrape reads the Prometheus text served at addr/metrics (a manager's, or rank 0's progress endpoint).
func Scrape(addr string) (string, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return string(body), err
}

// Eventually polls cond every 200 ms until it returns nil, failing the test with its last error after
// timeout (a bound on a hang, not a performance assertion).
func Eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not true after %s: %v", what, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Kubectl runs the real kubectl (built by hack/testbin.sh) against the stack, with the plugins in the
// directory plugins (BuildPlugin) on its PATH as a user installs them.
func Kubectl(t *testing.T, s *local.Stack, plugins string, args ...string) (string, error) {
	t.Helper()
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	// KUBECONFIG, not --kubeconfig: kubectl takes no flags before a plugin's name.
	cmd := exec.Command(filepath.Join(assets, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.Cluster.Kubeconfig, "PATH="+plugins+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// BuildPlugin builds kubectl-trainingjob from this tree into a temporary directory and returns it.
func BuildPlugin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/kubectl-trainingjob")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the plugin: %v\n%s", err, out)
	}
	return dir
}

// Settled returns a finished run's figures as the status gives them once the StatusController has settled them
// ("100% epoch 8/8 checkpoint 8"), for comparing with what the run did.
func Settled(st mlv1.TrainingJobStatus) string {
	got := fmt.Sprintf("%s epoch %d/%d", st.Progress, st.CurrentEpoch, st.TotalEpochs)
	if st.Checkpoint != nil {
		got += fmt.Sprintf(" checkpoint %d", st.Checkpoint.LatestEpoch)
	}
	return got
}

// EvictRank evicts the newest pod of a rank of job name through the Eviction API, as a drain or a
// preemption by the cluster does (the pod gets SIGTERM and its grace period).
func EvictRank(t *testing.T, c client.Client, ns, name string, rank int) {
	t.Helper()
	pods := &corev1.PodList{}
	if err := c.List(context.Background(), pods, client.InNamespace(ns),
		client.MatchingLabels{names.NameLabel: name, names.RankLabel: strconv.Itoa(rank)}); err != nil {
		t.Fatal(err)
	}
	var newest *corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; newest == nil || newest.CreationTimestamp.Before(&p.CreationTimestamp) {
			newest = p
		}
	}
	if newest == nil {
		t.Fatalf("no pod of rank %d of %s/%s to evict", rank, ns, name)
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: newest.Name, Namespace: ns}}
	if err := c.SubResource("eviction").Create(context.Background(), newest, ev); err != nil {
		t.Fatalf("evicting %s: %v", newest.Name, err)
	}
}
