package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestLifecycleCompleted walks a TrainingJob through Initializing → Running → Completed with
// the real Job controller creating the indexed pods and the test playing the kubelet.
func TestLifecycleCompleted(t *testing.T) {
	ctx := context.Background()
	ns := startStack(t)

	tj := tjtest.NewTJ(ns, "mnist").Workers(2).GPUs(0).Epochs(3).Image("busybox:1.36", "train").Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tj)
	waitForState(t, key, mlv1.StateInitializing)
	assertChildren(t, tj)

	pods := workerPods(t, tj, 2)
	if diff := cmp.Diff([]string{"0", "1"}, ranks(pods)); diff != "" {
		t.Errorf("pod ranks (-want +got):\n%s", diff)
	}
	setPodStatus(t, &pods[0], corev1.PodRunning, running(), 0)
	waitForState(t, key, mlv1.StateInitializing)
	setPodStatus(t, &pods[1], corev1.PodRunning, running(), 0)
	got := waitForState(t, key, mlv1.StateRunning)
	eventually(t, "two active workers", func(ctx context.Context) error {
		if err := env.Client.Get(ctx, key, got); err != nil {
			return err
		}
		if got.Status.Workers.Active != 2 || got.Status.StartTime == nil {
			return fmt.Errorf("workers %+v, startTime %v", got.Status.Workers, got.Status.StartTime)
		}
		return nil
	})

	for i := range pods {
		setPodStatus(t, &pods[i], corev1.PodSucceeded, terminated(0, "Completed"), 0)
	}
	got = waitForState(t, key, mlv1.StateCompleted)
	if got.Status.CompletionTime == nil || got.Status.Duration == "" || got.Status.FailureReason != "" {
		t.Errorf("completed status: completionTime %v, duration %q, failureReason %q",
			got.Status.CompletionTime, got.Status.Duration, got.Status.FailureReason)
	}
	for _, c := range []string{mlv1.ConditionCreated, mlv1.ConditionCompleted} {
		if !conditionTrue(got, c) {
			t.Errorf("condition %s not True: %+v", c, got.Status.Conditions)
		}
	}
	eventually(t, "transition events", func(ctx context.Context) error {
		reasons, err := eventReasons(ctx, got)
		if err != nil {
			return err
		}
		// One: the steps of a healthy start (Initializing, Running) are in the status, not in events.
		want := []string{"Normal/Completed"}
		if diff := cmp.Diff(want, reasons); diff != "" {
			return fmt.Errorf("events (-want +got):\n%s", diff)
		}
		return nil
	})
	assertColumns(t, ns, "mnist", "Completed")
}

// TestLifecycleFailed: a rank killed with exit code 137 with no restart left (backoffLimit 0) fails the run and the TrainingJob
// says which rank failed and how, in status and in a Warning event.
func TestLifecycleFailed(t *testing.T) {
	ctx := context.Background()
	ns := startStack(t)

	tj := tjtest.NewTJ(ns, "oom").Workers(2).GPUs(0).BackoffLimit(0, mlv1.RestartGang).Image("busybox:1.36", "train").Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tj)
	pods := workerPods(t, tj, 2)
	for i := range pods {
		setPodStatus(t, &pods[i], corev1.PodRunning, running(), 0)
	}
	waitForState(t, key, mlv1.StateRunning)
	rank1 := &pods[1]
	if ranks(pods)[1] != "1" {
		rank1 = &pods[0]
	}
	setPodStatus(t, rank1, corev1.PodFailed, terminated(137, "OOMKilled"), 0)

	got := waitForState(t, key, mlv1.StateFailed)
	for _, want := range []string{"BackoffLimitExceeded", "rank 1", "exited with code 137 (OOMKilled)"} {
		if !strings.Contains(got.Status.FailureReason, want) {
			t.Errorf("failureReason = %q, want it to contain %q", got.Status.FailureReason, want)
		}
	}
	if !conditionTrue(got, mlv1.ConditionFailed) || got.Status.CompletionTime == nil {
		t.Errorf("failed status: %+v", got.Status)
	}
	eventually(t, "a Warning event", func(ctx context.Context) error {
		reasons, err := eventReasons(ctx, got)
		if err != nil {
			return err
		}
		if len(reasons) == 0 || reasons[len(reasons)-1] != "Warning/Failed" {
			return fmt.Errorf("events %v", reasons)
		}
		return nil
	})
}

// TestLifecycleDeleteCascades: deleting a TrainingJob removes its Job, pods, Service and ConfigMap
// through owner references and the real garbage collector.
func TestLifecycleDeleteCascades(t *testing.T) {
	ctx := context.Background()
	ns := startStack(t)

	tj := tjtest.NewTJ(ns, "gone").Workers(3).GPUs(0).Image("busybox:1.36", "train").Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	workerPods(t, tj, 3)
	if err := env.Client.Delete(ctx, tj); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: names.JobName(tj)}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: names.ServiceName(tj)}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: names.ConfigMapName(tj)}},
	} {
		eventually(t, fmt.Sprintf("%T %s to be deleted", obj, obj.GetName()), func(ctx context.Context) error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (err %v)", err)
			}
			return nil
		})
	}
	workerPods(t, tj, 0)
}

// TestSuspendStopsWorkers: a suspended TrainingJob keeps its Job suspended and reports Suspended;
// resuming starts the workers.
func TestSuspendResume(t *testing.T) {
	ctx := context.Background()
	ns := startStack(t)

	tj := tjtest.NewTJ(ns, "queued").Workers(2).GPUs(0).Suspend(true).Image("busybox:1.36", "train").Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tj)
	got := waitForState(t, key, mlv1.StateSuspended)
	if !conditionTrue(got, mlv1.ConditionSuspended) {
		t.Errorf("Suspended condition not True: %+v", got.Status.Conditions)
	}
	workerPods(t, tj, 0)
	patch := client.MergeFrom(got.DeepCopy())
	got.Spec.Suspend = new(bool)
	if err := env.Client.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	workerPods(t, tj, 2)
	waitForState(t, key, mlv1.StateInitializing)
}

func assertChildren(t *testing.T, tj *mlv1.TrainingJob) {
	t.Helper()
	ctx := context.Background()
	job := &batchv1.Job{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: tj.Namespace, Name: names.JobName(tj)}, job); err != nil {
		t.Fatal(err)
	}
	type jobSpec struct {
		Mode                     batchv1.CompletionMode
		Parallelism, Completions int32
	}
	gotSpec := jobSpec{Mode: *job.Spec.CompletionMode, Parallelism: *job.Spec.Parallelism, Completions: *job.Spec.Completions}
	wantSpec := jobSpec{Mode: batchv1.IndexedCompletion, Parallelism: 2, Completions: 2}
	if diff := cmp.Diff(wantSpec, gotSpec); diff != "" {
		t.Errorf("job spec: mode, parallelism, completions (-want +got):\n%s", diff)
	}
	svc := &corev1.Service{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: tj.Namespace, Name: names.ServiceName(tj)}, svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("service not headless with unready addresses: %+v", svc.Spec)
	}
	for _, obj := range []client.Object{job, svc} {
		if refs := obj.GetOwnerReferences(); len(refs) != 1 || refs[0].Name != tj.Name || !*refs[0].Controller {
			t.Errorf("%T owner references = %+v", obj, refs)
		}
	}
}

func assertColumns(t *testing.T, ns, name, state string) {
	t.Helper()
	tbl := table(t, ns)
	var cols, wide []string
	for _, c := range tbl.ColumnDefinitions {
		if c.Priority == 0 {
			cols = append(cols, c.Name)
		} else {
			wide = append(wide, c.Name)
		}
	}
	if diff := cmp.Diff([]string{"Name", "State", "Progress", "Epoch", "Age"}, cols); diff != "" {
		t.Errorf("kubectl get columns (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"Workers", "Loss", "Accuracy", "ETA", "Restarts", "Goodput", "Cluster", "MLflow"}, wide); diff != "" {
		t.Errorf("kubectl get -o wide extra columns (-want +got):\n%s", diff)
	}
	if len(tbl.Rows) != 1 || tbl.Rows[0].Cells[0] != name || tbl.Rows[0].Cells[1] != state {
		t.Errorf("rows = %+v, want %s %s", tbl.Rows, name, state)
	}
}

func ranks(pods []corev1.Pod) []string {
	var r []string
	for _, p := range pods {
		r = append(r, p.Labels[names.RankLabel])
	}
	return r
}

// condition returns the TrainingJob's condition of type t, or a zero Condition.
func condition(tj *mlv1.TrainingJob, t string) metav1.Condition {
	if c := meta.FindStatusCondition(tj.Status.Conditions, t); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func conditionTrue(tj *mlv1.TrainingJob, t string) bool {
	return condition(tj, t).Status == metav1.ConditionTrue
}

// TestRejectedJobIsReported: when the API server refuses the workers' Job (a tensorflow job with no image
// and no default image for tensorflow configured), or the operator refuses the job's patterns (which the
// API server no longer compiles), the TrainingJob stays Pending with Created=False reason CreateRejected
// naming the field, and one Warning event, instead of hanging silently.
func TestRejectedJobIsReported(t *testing.T) {
	hostile := "^(?:" + strings.Repeat("a", 1000) + "){1000}"
	cases := []struct {
		name string
		tj   *mlv1.TrainingJob
		want []string
	}{
		{name: "no image", tj: tjtest.NewTJ("", "no-image").GPUs(0).Framework(mlv1.FrameworkTensorFlow).Obj(),
			want: []string{"spec.template.spec.containers[0].image: Required value"}},
		{name: "patterns", tj: tjtest.NewTJ("", "patterns").GPUs(0).With(func(tj *mlv1.TrainingJob) {
			tj.Spec.FailurePolicy = &mlv1.FailurePolicy{Rules: []mlv1.FailureRule{
				{Action: mlv1.RuleFail, OnMessage: hostile}, {Action: mlv1.RuleFail, OnMessage: "NCCL (timeout"}}}
			tj.Spec.Monitoring = &mlv1.MonitoringSpec{ProgressPattern: "(?P<cost>[0-9]+)"}
		}).Obj(), want: []string{
			"spec.failurePolicy.rules[0].onMessage compiles to more than 1000 instructions",
			"spec.failurePolicy.rules[1].onMessage is not an RE2 regular expression",
			"spec.monitoring.progressPattern names none of the groups"}},
	}
	ns := startStack(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			tj := tc.tj
			tj.Namespace = ns
			if err := env.Client.Create(ctx, tj); err != nil {
				t.Fatal(err)
			}
			key := client.ObjectKeyFromObject(tj)
			eventually(t, "Created=False CreateRejected", func(ctx context.Context) error {
				got := &mlv1.TrainingJob{}
				if err := env.Client.Get(ctx, key, got); err != nil {
					return err
				}
				c := condition(got, mlv1.ConditionCreated)
				if got.Status.State != mlv1.StatePending || c.Reason != "CreateRejected" {
					return fmt.Errorf("state %q, Created %+v", got.Status.State, c)
				}
				for _, w := range tc.want {
					if !strings.Contains(c.Message, w) {
						return fmt.Errorf("Created's message %q does not say %q", c.Message, w)
					}
				}
				return nil
			})
			eventually(t, "a Warning event", func(ctx context.Context) error {
				reasons, err := eventReasons(ctx, tj)
				if err != nil {
					return err
				}
				if !slices.Contains(reasons, "Warning/CreateRejected") {
					return fmt.Errorf("events %v", reasons)
				}
				return nil
			})
		})
	}
}
