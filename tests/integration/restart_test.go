package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestGangRestartSurvivesOperatorRestarts: the operator is killed at each point of a gang restart —
// before it saw the failure, after it recorded the new attempt but before it deleted the old Job, after it
// deleted the old Job but before it created the new one — and a new operator finishes the restart: one
// Job, of the next attempt, and the restart counted exactly once.
func TestGangRestartSurvivesOperatorRestarts(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	startControllerManager(t)
	stop := startOperator(t, ns)
	windows := []struct {
		name string
		// crash leaves what the killed operator had done of the restart.
		crash func(t *testing.T, tj *mlv1.TrainingJob)
	}{
		{name: "killed before it saw the failure", crash: func(*testing.T, *mlv1.TrainingJob) {}},
		{name: "killed after recording the attempt", crash: recordAttempt},
		{name: "killed after deleting the old Job", crash: func(t *testing.T, tj *mlv1.TrainingJob) {
			recordAttempt(t, tj)
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: tj.Namespace, Name: names.JobName(tj)}}
			if err := env.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
				t.Fatal(err)
			}
		}},
	}
	var jobs []*mlv1.TrainingJob
	for i := range windows {
		tj := tjtest.NewTJ(ns, fmt.Sprintf("crash-%d", i)).Workers(2).GPUs(0).Image("busybox:1.36", "train").Obj()
		if err := env.Client.Create(ctx, tj); err != nil {
			t.Fatal(err)
		}
		for _, p := range workerPods(t, tj, 2) {
			setPodStatus(t, &p, corev1.PodRunning, running(), 0)
		}
		jobs = append(jobs, waitForState(t, client.ObjectKeyFromObject(tj), mlv1.StateRunning))
	}
	stop()
	for i, w := range windows {
		tj := jobs[i]
		pods := workerPods(t, tj, 2)
		setPodStatus(t, &pods[1], corev1.PodFailed, terminated(137, "OOMKilled"), 0)
		eventually(t, "the Job controller fails the attempt", func(ctx context.Context) error {
			job, err := currentJob(ctx, tj)
			if err != nil || derive.JobCondition(job, batchv1.JobFailed) != nil {
				return err
			}
			return fmt.Errorf("conditions %+v", job.Status.Conditions)
		})
		w.crash(t, tj)
	}
	startOperator(t, ns)
	for i, w := range windows {
		t.Run(w.name, func(t *testing.T) {
			tj := jobs[i]
			eventually(t, "one Job of attempt 1 and the restart counted once", func(ctx context.Context) error {
				var list batchv1.JobList
				if err := env.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{names.NameLabel: tj.Name}); err != nil {
					return err
				}
				got := &mlv1.TrainingJob{}
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tj), got); err != nil {
					return err
				}
				if len(list.Items) != 1 || list.Items[0].Labels[names.AttemptLabel] != "1" ||
					got.Status.Attempt != 1 || got.Status.RestartCount != 1 {
					return fmt.Errorf("%d jobs (%v), attempt %d, restartCount %d",
						len(list.Items), attempts(list.Items), got.Status.Attempt, got.Status.RestartCount)
				}
				return nil
			})
			// The new attempt's workers run; the restart is over and still counted once.
			pods := workerPods(t, tj, 2)
			for i := range pods {
				setPodStatus(t, &pods[i], corev1.PodRunning, running(), 0)
			}
			got := waitForState(t, client.ObjectKeyFromObject(tj), mlv1.StateRunning)
			type restarted struct {
				RestartCount int32
				Restarting   metav1.ConditionStatus
			}
			restarting := condition(got, mlv1.ConditionRestarting)
			want := restarted{RestartCount: 1, Restarting: metav1.ConditionFalse}
			if diff := cmp.Diff(want, restarted{RestartCount: got.Status.RestartCount, Restarting: restarting.Status}); diff != "" {
				t.Errorf("after the restart: restartCount, Restarting %+v (-want +got):\n%s", restarting, diff)
			}
		})
	}
}

// recordAttempt writes what the JobController writes when it decides a gang restart.
func recordAttempt(t *testing.T, tj *mlv1.TrainingJob) {
	t.Helper()
	eventually(t, "status write", func(ctx context.Context) error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tj), tj); err != nil {
			return err
		}
		tj.Status.Attempt, tj.Status.RestartCount, tj.Status.State = 1, 1, mlv1.StateInitializing
		tj.Status.LastFailure = "rank 1 exited with code 137 (OOMKilled)"
		meta.SetStatusCondition(&tj.Status.Conditions, metav1.Condition{Type: mlv1.ConditionRestarting, Status: metav1.ConditionTrue,
			Reason: "Restarting", Message: "restart 1/3: " + tj.Status.LastFailure + "; starting attempt 1"})
		return env.Client.Status().Update(ctx, tj)
	})
}

func attempts(jobs []batchv1.Job) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.Labels[names.AttemptLabel])
	}
	return out
}

// TestGangRestartBeforeEveryWorkerRan: a rank that fails while the others start (the job still
// Initializing, so the restart changes no state) still gets its new attempt: the new Job is created
// (a regression the chaos suite found: the restart's status write woke no controller).
func TestGangRestartBeforeEveryWorkerRan(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	startControllerManager(t)
	startOperator(t, ns)
	tj := tjtest.NewTJ(ns, "early").Workers(2).GPUs(0).Image("busybox:1.36", "train").Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	pods := workerPods(t, tj, 2)
	waitForState(t, client.ObjectKeyFromObject(tj), mlv1.StateInitializing)
	setPodStatus(t, &pods[0], corev1.PodRunning, running(), 0)
	setPodStatus(t, &pods[1], corev1.PodFailed, terminated(137, "OOMKilled"), 0)
	eventually(t, "a Job of attempt 1", func(ctx context.Context) error {
		job, err := currentJob(ctx, tj)
		if err != nil {
			return err
		}
		if job.Labels[names.AttemptLabel] != "1" {
			return fmt.Errorf("job of attempt %q", job.Labels[names.AttemptLabel])
		}
		return nil
	})
}

// TestLostNodeCountsOnceTainted: rank 0's node stops reporting and rank 1 exits 1 on losing its peer. The
// node is not Ready at first without the NoSchedule taint the node lifecycle controller adds a moment
// later, and the scheduler may still place pods there: the gang waits. Once the node is tainted, the gang
// restarts without counting it, naming the node. (Restarted in that moment, the chaos suite's run had a
// rank of its new attempt placed on the lost node, and the attempt waited for it a minute.)
func TestLostNodeCountsOnceTainted(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	startControllerManager(t)
	startOperator(t, ns)
	node := newNode(t, ns+"-lost")
	tj := tjtest.NewTJ(ns, "lost").Workers(2).GPUs(0).Image("busybox:1.36", "train").Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	pods := workerPods(t, tj, 2)
	bindPod(t, &pods[0], node.Name)
	for i := range pods {
		setPodStatus(t, &pods[i], corev1.PodRunning, running(), 0)
	}
	waitForState(t, client.ObjectKeyFromObject(tj), mlv1.StateRunning)

	setNodeReady(t, node, corev1.ConditionUnknown)
	setPodStatus(t, &pods[1], corev1.PodFailed, terminated(1, "Error"), 0)
	eventually(t, "the Job controller marks the attempt failing", func(ctx context.Context) error {
		job, err := currentJob(ctx, tj)
		if err != nil || job.Labels[names.AttemptLabel] != "0" || derive.JobCondition(job, batchv1.JobFailureTarget) != nil {
			return err // a Job of a later attempt: the operator restarted already (the check below says so)
		}
		return fmt.Errorf("conditions %+v", job.Status.Conditions)
	})
	// The operator looks at an untainted node every second (nodeRecheck): three looks, no restart.
	time.Sleep(3 * time.Second)
	if got, err := getTJ(ctx, tj); err != nil || got.Status.Attempt != 0 || got.Status.State != mlv1.StateRunning {
		t.Fatalf("restarted on a node the scheduler may still use: %v, status %+v", err, got.Status)
	}

	taintNode(t, node, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule})
	eventually(t, "an uncounted gang restart naming the node", func(ctx context.Context) error {
		got := &mlv1.TrainingJob{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tj), got); err != nil {
			return err
		}
		notReady := "rank 0's node " + node.Name + " is not Ready"
		if got.Status.Attempt != 1 || got.Status.RestartCount != 0 || !strings.Contains(got.Status.LastFailure, notReady) {
			return fmt.Errorf("attempt %d, restartCount %d, lastFailure %q", got.Status.Attempt, got.Status.RestartCount, got.Status.LastFailure)
		}
		return nil
	})
}

// TestForceDeletedRankIsADisruption: `kubectl delete pod --force` of a running rank, then its peer exits 1
// (it lost the rank). The deleted pod leaves no exit of its own; the peer's error exit, a permanent code,
// used to fail the run for good (NonRetryableExitCode). It is a disruption: the gang restarts, not counted.
func TestForceDeletedRankIsADisruption(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	startControllerManager(t)
	startOperator(t, ns)
	tj := tjtest.NewTJ(ns, "forced").Workers(2).GPUs(0).Image("busybox:1.36", "train").Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	pods := workerPods(t, tj, 2)
	for i := range pods {
		setPodStatus(t, &pods[i], corev1.PodRunning, running(), 0)
	}
	waitForState(t, client.ObjectKeyFromObject(tj), mlv1.StateRunning)
	rank1 := &pods[0]
	if rank1.Labels[names.RankLabel] != "1" {
		rank1 = &pods[1]
	}
	rank0 := &pods[0]
	if rank1 == rank0 {
		rank0 = &pods[1]
	}
	if err := env.Client.Delete(ctx, rank1, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	setPodStatus(t, rank0, corev1.PodFailed, terminated(1, "Error"), 0)
	eventually(t, "an uncounted gang restart naming the deleted pod", func(ctx context.Context) error {
		got, err := getTJ(ctx, tj)
		if err != nil {
			return err
		}
		if got.Status.Attempt != 1 || got.Status.RestartCount != 0 || !strings.Contains(got.Status.LastFailure, "deleted at once") {
			return fmt.Errorf("state %s, attempt %d, restartCount %d, lastFailure %q", got.Status.State, got.Status.Attempt,
				got.Status.RestartCount, got.Status.LastFailure)
		}
		return nil
	})
}

// currentJob returns the workers' Job of tj's current attempt.
func currentJob(ctx context.Context, tj *mlv1.TrainingJob) (*batchv1.Job, error) {
	job := &batchv1.Job{}
	return job, env.Client.Get(ctx, client.ObjectKey{Namespace: tj.Namespace, Name: names.JobName(tj)}, job)
}

// newNode creates a Ready node (no kubelet: the test writes its status), deleted after the test. The API
// server taints a new node not-ready (admission); the test removes the taint as the node lifecycle
// controller does once the node is Ready.
func newNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
	setNodeReady(t, node, corev1.ConditionTrue)
	node.Spec.Taints = nil
	if err := env.Client.Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	return node
}

func setNodeReady(t *testing.T, node *corev1.Node, status corev1.ConditionStatus) {
	t.Helper()
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "Test",
		Message: "set by the test", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
}

func taintNode(t *testing.T, node *corev1.Node, taint corev1.Taint) {
	t.Helper()
	node.Spec.Taints = append(node.Spec.Taints, taint)
	if err := env.Client.Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
}

// bindPod places the pod on the node as the scheduler does.
func bindPod(t *testing.T, pod *corev1.Pod, node string) {
	t.Helper()
	binding := &corev1.Binding{Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := env.Client.SubResource("binding").Create(context.Background(), pod, binding); err != nil {
		t.Fatal(err)
	}
}

// TestRestartRejectedIsReported: when the API server refuses a restart's new Job (here an admission
// policy that refuses attempt 1), the TrainingJob says so (Created=False/CreateRejected with the API
// server's message, a Warning event) instead of waiting silently at "starting attempt 1". (A goodput
// run found it: Jobs avoiding two nodes were invalid and the run waited forever.)
func TestRestartRejectedIsReported(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: ns + "-no-retry"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"batch"}, APIVersions: []string{"v1"},
						Resources: []string{"jobs"}}}}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: `object.metadata.labels[?"` + names.AttemptLabel + `"].orValue("0") == "0"`,
				Message:    "no second attempts in this namespace"}}}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-no-retry"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}}}
	for _, o := range []client.Object{policy, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
	// The API server enforces a new policy a moment after its creation, and a restart is decided within
	// milliseconds of the kill: wait until the policy refuses a second attempt's Job.
	eventually(t, "the policy in force", func(ctx context.Context) error {
		probe := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe", Labels: map[string]string{names.AttemptLabel: "1"}},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}}}}}
		if err := env.Client.Create(ctx, probe, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "no second attempts") {
			return fmt.Errorf("a Job of attempt 1 is not refused by the policy yet: %v", err)
		}
		return nil
	})
	startControllerManager(t)
	startOperator(t, ns)
	tj := tjtest.NewTJ(ns, "refused").Workers(2).GPUs(0).Image("busybox:1.36", "train").Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	pods := workerPods(t, tj, 2)
	setPodStatus(t, &pods[0], corev1.PodRunning, running(), 0)
	setPodStatus(t, &pods[1], corev1.PodFailed, terminated(137, "OOMKilled"), 0)
	eventually(t, "Created=False CreateRejected naming the policy", func(ctx context.Context) error {
		got := &mlv1.TrainingJob{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tj), got); err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, mlv1.ConditionCreated)
		if got.Status.Attempt != 1 || c == nil || c.Reason != derive.ReasonCreateRejected ||
			!strings.Contains(c.Message, "no second attempts in this namespace") {
			var pods corev1.PodList
			_ = env.Client.List(ctx, &pods, client.InNamespace(ns))
			var left []string
			for _, p := range pods.Items {
				left = append(left, fmt.Sprintf("%s %s deleting=%t finalizers=%v attempt=%s",
					p.Name, p.Status.Phase, p.DeletionTimestamp != nil, p.Finalizers, p.Labels[names.AttemptLabel]))
			}
			return fmt.Errorf("state %s (%s), attempt %d, Created %+v; pods %v", got.Status.State,
				derive.ConditionMessage(got.Status, string(got.Status.State)), got.Status.Attempt, c, left)
		}
		return nil
	})
}
