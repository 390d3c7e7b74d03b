package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/node"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// lifecycle is a job shape whose lifecycle the kills land in, and what it must end as.
type lifecycle struct {
	name string
	args []string
	// wantRestarts is the restart count it must end with (restarts the trainer injects); disruptions the
	// gang restarts that do not count (attempt = wantRestarts + disruptions).
	wantRestarts, disruptions int32
	// reasons are the Completed reasons it may end with.
	reasons []string
	mutate  func(*mlv1.TrainingJob)
}

var lifecycles = []lifecycle{
	{name: "plain", reasons: []string{"Succeeded"}},
	{name: "gang-restart", args: []string{"--fail-at=1:3:137"}, wantRestarts: 1, reasons: []string{"Succeeded"}},
	{name: "success-policy", reasons: []string{"TargetReached"}, mutate: func(tj *mlv1.TrainingJob) {
		tj.Spec.SuccessPolicy = &mlv1.SuccessPolicy{TargetLoss: ptr.To(0.5)}
	}},
}

// TestOperatorKilled: per round, one job of each lifecycle (create, Running, checkpoint rotation, gang
// restart, success-policy stop, the end) runs while the operator is SIGKILLed and restarted at random
// moments. Every job must end as it would have, with one Job, Service and ConfigMap, its restarts
// counted exactly once, RESUME_FROM and status.checkpoint naming checkpoints that exist, and the
// checkpoints rotation keeps.
func TestOperatorKilled(t *testing.T) {
	cfg := loadConfig(t)
	rng := rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15))
	var recoveries []time.Duration
	jobs, correct := 0, 0
	for round := 0; round < cfg.rounds; round++ {
		ns := newNamespace(t)
		var tjs []*mlv1.TrainingJob
		for _, lc := range lifecycles {
			tjs = append(tjs, createJob(t, ns, lc))
		}
		jobs += len(tjs)
		var wg sync.WaitGroup
		var rec []time.Duration
		wg.Go(func() { rec = killer(t, rng, cfg.kills, 6*time.Second) })
		wg.Wait()
		recoveries = append(recoveries, rec...)
		ok := 0
		for i, lc := range lifecycles {
			if checkJob(t, tjs[i], lc, metricsAddr) {
				ok++
			}
		}
		correct += ok
		record("operator SIGKILLed at random moments, restarted", "restart → first reconcile", len(rec), len(tjs), ok, rec...)
	}
	t.Logf("chaos report: %d rounds, %d operator kills (SIGKILL), %d jobs, %d ended correctly, %d not; "+
		"recovery (restart to first reconcile) p50 %s, p99 %s; %d checkpoints kept beyond retention (unacknowledged, safe); "+
		"%d finished jobs with status.checkpoint empty (final report missed while down, safe)",
		cfg.rounds, len(recoveries), jobs, correct, jobs-correct,
		percentile(recoveries, 50).Round(time.Millisecond), percentile(recoveries, 99).Round(time.Millisecond),
		extraKept.Load(), missedFinalReports.Load())
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := stacktest.NewNamespace(t, stack.Client, "chaos-")
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "checkpoints", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}
	stacktest.Create(t, stack.Client, claim)
	return ns
}

// createJob creates a 2-rank job of the example trainer with checkpoints every epoch on the claim.
func createJob(t *testing.T, ns string, lc lifecycle) *mlv1.TrainingJob {
	t.Helper()
	tj := tjtest.NewTJ(ns, lc.name).Workers(2).GPUs(0).Epochs(8).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Image, tj.Spec.Command = "example-trainer:local", []string{"trainer"}
		tj.Spec.Args = append([]string{"--samples=4096", "--features=8", "--rendezvous-timeout=1m", "--epoch-delay=500ms"}, lc.args...)
		tj.Spec.Hyperparameters.LearningRate = ptr.To(0.2)
		tj.Spec.Checkpoint = &mlv1.CheckpointSpec{Enabled: ptr.To(true), Frequency: ptr.To[int32](1), Retention: ptr.To[int32](2),
			Storage: &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, ClaimName: "checkpoints"}}
		if lc.mutate != nil {
			lc.mutate(tj)
		}
	}).Obj()
	if err := stack.Client.Create(context.Background(), tj); err != nil {
		t.Fatal(err)
	}
	return tj
}

// checkJob waits for the job to finish and checks the invariants, the operator's series read at metrics;
// it reports whether all held.
func checkJob(t *testing.T, tj *mlv1.TrainingJob, lc lifecycle, metrics string) bool {
	t.Helper()
	ctx := context.Background()
	key := client.ObjectKeyFromObject(tj)
	deadline := time.Now().Add(3 * time.Minute)
	got := &mlv1.TrainingJob{}
	for {
		if err := stack.Client.Get(ctx, key, got); err != nil {
			t.Fatal(err)
		}
		if got.Status.State == mlv1.StateCompleted || got.Status.State == mlv1.StateFailed || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	var problems []string
	reason := ""
	for _, c := range got.Status.Conditions {
		if c.Type == mlv1.ConditionCompleted && c.Status == metav1.ConditionTrue {
			reason = c.Reason
		}
	}
	if got.Status.State != mlv1.StateCompleted || !contains(lc.reasons, reason) {
		problems = append(problems, fmt.Sprintf("ended %s/%s (%s), want Completed with %v",
			got.Status.State, reason, got.Status.FailureReason, lc.reasons))
	}
	if got.Status.RestartCount != lc.wantRestarts || got.Status.Attempt != lc.wantRestarts+lc.disruptions {
		problems = append(problems, fmt.Sprintf("restartCount %d, attempt %d, want %d and %d",
			got.Status.RestartCount, got.Status.Attempt, lc.wantRestarts, lc.wantRestarts+lc.disruptions))
	}
	problems = append(problems, countChildren(ctx, got)...)
	problems = append(problems, checkMetrics(got, metrics)...)
	problems = append(problems, checkCheckpoints(ctx, got)...)
	if n := len(completeCheckpoints(got)); n > 2 {
		extraKept.Add(int64(n - 2))
	}
	for _, p := range problems {
		t.Errorf("%s: %s", key, p)
	}
	return len(problems) == 0
}

// countChildren: exactly one Job, Service and ConfigMap.
func countChildren(ctx context.Context, tj *mlv1.TrainingJob) []string {
	var problems []string
	sel := client.MatchingLabels{names.NameLabel: tj.Name}
	for _, l := range []client.ObjectList{&batchv1.JobList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{}} {
		if err := stack.Client.List(ctx, l, client.InNamespace(tj.Namespace), sel); err != nil {
			return []string{err.Error()}
		}
		if n := lenOf(l); n != 1 {
			problems = append(problems, fmt.Sprintf("%d %T items, want 1", n, l))
		}
	}
	return problems
}

func lenOf(l client.ObjectList) int {
	switch l := l.(type) {
	case *batchv1.JobList:
		return len(l.Items)
	case *corev1.ServiceList:
		return len(l.Items)
	case *corev1.ConfigMapList:
		return len(l.Items)
	}
	return -1
}

// checkCheckpoints: RESUME_FROM and status.checkpoint name complete checkpoints that exist, and one is kept.
func checkCheckpoints(ctx context.Context, tj *mlv1.TrainingJob) []string {
	var problems []string
	complete := completeCheckpoints(tj)
	cm := &corev1.ConfigMap{}
	if err := stack.Client.Get(ctx, client.ObjectKey{Namespace: tj.Namespace, Name: names.ConfigMapName(tj)}, cm); err != nil {
		return []string{err.Error()}
	}
	missed := false
	for what, uri := range map[string]string{"RESUME_FROM": cm.Data[names.ResumeFromKey], "status.checkpoint.latest": latest(tj)} {
		switch {
		case uri == "" && tj.Status.State == mlv1.StateCompleted && len(complete) > 0:
			// The run ended within one checkpoint interval of its first checkpoint, and the operator was
			// down while rank 0's agent reported it in its final report (a pod's termination message,
			// gone with the pod). Nothing was deleted and no worker will resume; counted, not failed.
			missed = true
			continue
		case uri == "":
			problems = append(problems, what+" is empty after a run with checkpoints")
			continue
		}
		if !complete[filepath.Base(uri)] {
			problems = append(problems, fmt.Sprintf("%s %s is not a complete checkpoint on the claim (have %v)", what, uri, keys(complete)))
		}
	}
	if len(complete) == 0 {
		problems = append(problems, "no complete checkpoint kept")
	}
	if missed {
		missedFinalReports.Add(1)
	}
	// More than retention may stay: the agent keeps every checkpoint it reported until the operator
	// acknowledges RESUME_FROM, and a killed operator may miss the last acknowledgement of a run. That is
	// safe (nothing a worker may resume from is deleted) and counted in the report, not failed.
	return problems
}

// completeCheckpoints are the job's complete checkpoints on the claim, by directory name.
func completeCheckpoints(tj *mlv1.TrainingJob) map[string]bool {
	dir := filepath.Join(node.ClaimDir(stack.DataRoot, tj.Namespace, "checkpoints"), builders.CheckpointRoot(tj))
	complete := map[string]bool{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), checkpoint.Marker)); err == nil {
			complete[e.Name()] = true
		}
	}
	return complete
}

// extraKept counts checkpoints kept beyond retention at the end of the runs; missedFinalReports the
// finished jobs whose only news of their last checkpoint was a final report the operator, down, missed.
var extraKept, missedFinalReports atomic.Int64

func latest(tj *mlv1.TrainingJob) string {
	if c := tj.Status.Checkpoint; c != nil {
		return c.Latest
	}
	return ""
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// checkMetrics: the per-job restart gauge of the operator at addr (rebuilt from the status by each new
// process) agrees with the status.
func checkMetrics(tj *mlv1.TrainingJob, addr string) []string {
	want := fmt.Sprintf(`trainingjob_restarts{namespace=%q,training_job=%q} %d`, tj.Namespace, tj.Name, tj.Status.RestartCount)
	var last error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		body, err := scrapeOperator(addr)
		if err == nil && strings.Contains(body, want) {
			return nil
		}
		last = err
	}
	return []string{fmt.Sprintf("the operator's /metrics has no %q (%v)", want, last)}
}
