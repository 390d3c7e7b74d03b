package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/node"
	"github.com/trainingjob-operator/trainingjob-operator/tests/stacktest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// failureScenario is one way a distributed run goes wrong, on the local stack (real API server, Job
// controller, scheduler, process nodes running the example trainer), and what the TrainingJob must end
// as. The trainer's --fail-at=RANK:EPOCH:CODE injects a rank's death as an epoch starts (137: SIGKILL,
// as an OOM kill; 1: an error exit), in a run that did not resume unless --fail-always.
type failureScenario struct {
	name string
	job  func(ns string) *tjtest.TJ
	// fault, when set, injects the fault from outside once every rank runs.
	fault        func(t *testing.T, ns, name string)
	wantState    mlv1.State
	wantReason   string // the Completed or Failed condition's
	wantRestarts int32  // status.restartCount: restarts counted against backoffLimit
	wantAttempt  int32  // status.attempt: gang restarts, disruptions included
	// check, when set, looks further at the finished job.
	check func(t *testing.T, tj *mlv1.TrainingJob, pids map[int]int)
}

// TestFailureHandling runs the table of failure scenarios: gang restarts from the newest checkpoint,
// permanent exit codes, disruptions, the restart budget, the deadline over restarts, workers that
// cannot be scheduled, and cleanup after the end.
func TestFailureHandling(t *testing.T) {
	t.Parallel() // its own namespace: runs beside the other long tests once the rest are done
	withCheckpoints := func(tj *tjtest.TJ) *tjtest.TJ { return tj.With(withPVCCheckpoints(3)) }
	scenarios := []failureScenario{{
		name: "retryable exit: the whole gang restarts and resumes from the newest checkpoint",
		job: func(ns string) *tjtest.TJ {
			return withCheckpoints(trainerJob(ns, "retry", 2, 6, "--epoch-delay=1s", "--fail-at=1:3:137"))
		},
		wantState: mlv1.StateCompleted, wantReason: "Succeeded", wantRestarts: 1, wantAttempt: 1,
		check: func(t *testing.T, tj *mlv1.TrainingJob, pids map[int]int) {
			// Rank 1 died as epoch 3 started, after checkpoint 2: the new gang resumes from it, not earlier.
			assertResumed(t, tj.Namespace, tj.Name, checkpointDir(t, tj.Namespace, tj.Name), 2, 6)
			assertEvent(t, tj.Namespace, "Restarting", "restart 1/3: rank 1 (pod retry-worker-1-", "exited with code 137", "starting attempt 1")
			// In place (restartStrategy's default): the pods were kept, every container ran again.
			assertEvent(t, tj.Namespace, "Restarting", "attempt 1: the 2 workers' pods restart in place")
			assertGone(t, pids) // no rank of the first attempt left waiting at the dead rendezvous
		},
	}, {
		name: "retryable exit while the other ranks block in the collective: none is left hanging",
		job: func(ns string) *tjtest.TJ {
			return withCheckpoints(trainerJob(ns, "blocked", 3, 5, "--epoch-delay=1s", "--fail-at=2:2:137", "--block-on-peer-loss"))
		},
		wantState: mlv1.StateCompleted, wantReason: "Succeeded", wantRestarts: 1, wantAttempt: 1,
		check: func(t *testing.T, tj *mlv1.TrainingJob, pids map[int]int) {
			assertGone(t, pids)
			logs := node.AllLogs(stack.DataRoot, tj.Namespace, "blocked-worker-0-*", names.ContainerName)
			if !strings.Contains(logs, "blocking, as a rank in a collective does") {
				t.Errorf("rank 0 of the first attempt did not block on losing rank 2:\n%s", logs)
			}
			if log := readLog(t, tj.Namespace, "blocked-worker-0-*", names.ContainerName); !strings.Contains(log, "training complete") {
				t.Errorf("rank 0 of the new attempt did not finish:\n%s", log)
			}
		},
	}, {
		name: "permanent exit code: failed at once, naming the rank and the code",
		job: func(ns string) *tjtest.TJ {
			// Rank 1 loses its peer and exits 1 in the same second: it is named as a rank that failed too.
			return trainerJob(ns, "permanent", 2, 6, "--epoch-delay=200ms", "--fail-at=0:2:1")
		},
		wantState: mlv1.StateFailed, wantReason: "NonRetryableExitCode",
		check: func(t *testing.T, tj *mlv1.TrainingJob, pids map[int]int) {
			assertContains(t, "failureReason", tj.Status.FailureReason, "NonRetryableExitCode: not retried",
				"rank 0 (pod permanent-worker-0-", "exited with code 1", "injected fault at epoch 2")
			assertGone(t, pids)
		},
	}, {
		name: "disruption (eviction): a gang restart that does not use the budget",
		job: func(ns string) *tjtest.TJ {
			return withCheckpoints(trainerJob(ns, "evicted", 2, 8, "--epoch-delay=500ms")).BackoffLimit(0, mlv1.RestartGang)
		},
		fault:     evictRank1,
		wantState: mlv1.StateCompleted, wantReason: "Succeeded", wantRestarts: 0, wantAttempt: 1,
		check: func(t *testing.T, tj *mlv1.TrainingJob, _ map[int]int) {
			assertEvent(t, tj.Namespace, "Restarting", "restart after a disruption (not counted against failurePolicy.backoffLimit)",
				"DisruptionTarget")
			// In place: rank 0 restarted in its pod, the evicted rank's pod was replaced alone.
			// (the evicted pod named while being deleted, or by its rank once gone)
			assertEvent(t, tj.Namespace, "Restarting", "attempt 1: 1 worker's pod restarts in place; the Job controller replaces ",
				"rank 1")
		},
	}, {
		name: "a rank's pod deleted at once (kubectl delete pod --force): replaced alone, the others restart in place, not counted",
		job: func(ns string) *tjtest.TJ {
			return withCheckpoints(trainerJob(ns, "forced", 3, 8, "--epoch-delay=500ms")).BackoffLimit(0, mlv1.RestartGang)
		},
		fault:     forceDeleteRank(1),
		wantState: mlv1.StateCompleted, wantReason: "Succeeded", wantRestarts: 0, wantAttempt: 1,
		check: func(t *testing.T, tj *mlv1.TrainingJob, _ map[int]int) {
			assertEvent(t, tj.Namespace, "Restarting", "restart after a disruption", "was deleted at once (grace period 0) while it ran")
			assertEvent(t, tj.Namespace, "Restarting", "attempt 1: the 2 workers' pods restart in place;",
				"the Job controller replaces pod forced-worker-1-")
			assertKeptPods(t, tj, 0, 2)
			assertResumed(t, tj.Namespace, tj.Name, checkpointDir(t, tj.Namespace, tj.Name), 1, 8)
		},
	}, {
		name: "stall: a rank stops mid-run, rank 0 blocks in the collective; a counted gang restart resumes",
		job: func(ns string) *tjtest.TJ {
			return withCheckpoints(trainerJob(ns, "stall", 2, 6, "--epoch-delay=500ms", "--hang-at=1:3")).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.FailurePolicy = &mlv1.FailurePolicy{StallTimeoutSeconds: ptr.To[int32](5)}
			})
		},
		wantState: mlv1.StateCompleted, wantReason: "Succeeded", wantRestarts: 1, wantAttempt: 1,
		check: func(t *testing.T, tj *mlv1.TrainingJob, pids map[int]int) {
			assertEvent(t, tj.Namespace, "ProgressStalled", "no progress for", "since epoch 2", "rank 1", "injected hang at epoch 3",
				"ranks holding the run back: behind the others (rank 0 at step", "): rank 1 (pod stall-worker-1-")
			assertEvent(t, tj.Namespace, "Restarting", "restart 1/3: Hang: no progress for", "since epoch 2", "starting attempt 1")
			assertResumed(t, tj.Namespace, tj.Name, checkpointDir(t, tj.Namespace, tj.Name), 2, 6)
			assertGone(t, pids)
			logFaultToAction(t, tj, "ProgressStalled", "Restarting")
		},
	}, {
		name: "no start: rank 0 never reports progress; onHang Fail ends the run Hung",
		job: func(ns string) *tjtest.TJ {
			return trainerJob(ns, "nostart", 2, 6, "--hang-at=0:1").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.FailurePolicy = &mlv1.FailurePolicy{StartupTimeoutSeconds: ptr.To[int32](4), OnHang: mlv1.HangFail}
			})
		},
		wantState: mlv1.StateFailed, wantReason: "Hung",
		check: func(t *testing.T, tj *mlv1.TrainingJob, pids map[int]int) {
			assertContains(t, "failureReason", tj.Status.FailureReason, "Hung: failurePolicy.onHang Fail: Hang: no progress for",
				"since all 2 workers of attempt 0 started running (failurePolicy.startupTimeoutSeconds 4s)", "rank 0", "injected hang at epoch 1")
			assertEvent(t, tj.Namespace, "NoProgressSinceStart", "no progress for")
			assertNoRunningWorker(t, tj)
			assertGone(t, pids)
			logFaultToAction(t, tj, "NoProgressSinceStart", "Failed")
		},
	}, {
		name: "rule by message: an OOM-like exit that would restart fails the run at once",
		job: func(ns string) *tjtest.TJ {
			return trainerJob(ns, "rulefail", 2, 6, "--epoch-delay=200ms", "--fail-at=1:2:137").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.FailurePolicy = &mlv1.FailurePolicy{Rules: []mlv1.FailureRule{
					{Name: "nccl-timeout", Action: mlv1.RuleRestartWithoutCounting, OnMessage: "NCCL.*[Tt]imeout"},
					{Name: "injected", Action: mlv1.RuleFail, OnMessage: `injected fault at epoch [0-9]+`}}}
			})
		},
		wantState: mlv1.StateFailed, wantReason: "FailureRule",
		check: func(t *testing.T, tj *mlv1.TrainingJob, _ map[int]int) {
			assertContains(t, "failureReason", tj.Status.FailureReason, "FailureRule: failed by failurePolicy.rules[1] injected: rank 1",
				"exited with code 137")
			logExitToAction(t, tj, 1, "Failed")
		},
	}, {
		name: "rule by exit code: an error exit restarts without using the budget, away from the failing rank's node",
		job: func(ns string) *tjtest.TJ {
			return withCheckpoints(trainerJob(ns, "ruleavoid", 2, 6, "--epoch-delay=300ms", "--fail-at=1:2:3")).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.FailurePolicy = &mlv1.FailurePolicy{BackoffLimit: ptr.To[int32](0), Rules: []mlv1.FailureRule{
					{Name: "ecc", Action: mlv1.RuleRestartWithoutCounting, OnExitCodes: []int32{3}, AvoidNode: true}}}
			})
		},
		wantState: mlv1.StateCompleted, wantReason: "Succeeded", wantRestarts: 0, wantAttempt: 1,
		check: func(t *testing.T, tj *mlv1.TrainingJob, _ map[int]int) {
			assertEvent(t, tj.Namespace, "Restarting",
				"restart after a disruption (not counted against failurePolicy.backoffLimit) (failurePolicy.rules[0] ecc)", "exited with code 3")
			assertPlacedAway(t, tj)
			logExitToAction(t, tj, 1, "Restarting")
		},
	}, {
		name: "preemption: rank 0 writes a checkpoint on SIGTERM and the next attempt resumes from it",
		job: func(ns string) *tjtest.TJ {
			return withCheckpoints(trainerJob(ns, "preempted", 2, 6, "--epoch-delay=1s")).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Checkpoint.OnPreemption = true
				tj.Spec.Checkpoint.PreemptionGraceSeconds = ptr.To[int32](30)
			})
		},
		fault:     evictRank(0),
		wantState: mlv1.StateCompleted, wantReason: "Succeeded", wantRestarts: 0, wantAttempt: 1,
		check: func(t *testing.T, tj *mlv1.TrainingJob, _ map[int]int) {
			c := tj.Status.Checkpoint
			if c == nil || !strings.Contains(c.ResumedFrom, "-step-") ||
				!strings.Contains(c.ResumedFromMessage, "resumed from the checkpoint written at preemption, epoch") {
				// Fatal: a panic below would leave the stack's processes running.
				t.Fatalf("status.checkpoint does not say the run resumed from the checkpoint written at preemption: %+v", c)
			}
			all := node.AllLogs(stack.DataRoot, tj.Namespace, "preempted-worker-0-*", names.ContainerName)
			assertContains(t, "rank 0's logs", all, "written at preemption (epoch", "resuming from "+c.ResumedFrom)
			logExitToAction(t, tj, 0, "Restarting")
		},
	}, {
		name: "budget exhausted: failed after backoffLimit restarts",
		job: func(ns string) *tjtest.TJ {
			return trainerJob(ns, "budget", 2, 6, "--epoch-delay=200ms", "--fail-at=1:2:137", "--fail-always").BackoffLimit(1, mlv1.RestartGang)
		},
		wantState: mlv1.StateFailed, wantReason: "BackoffLimitExceeded", wantRestarts: 1, wantAttempt: 1,
		check: func(t *testing.T, tj *mlv1.TrainingJob, _ map[int]int) {
			assertContains(t, "failureReason", tj.Status.FailureReason,
				"BackoffLimitExceeded: 1 restarts (failurePolicy.backoffLimit 1), last: rank 1 (pod budget-worker-1-", "exited with code 137")
		},
	}, {
		name: "deadline over a restart: failed and no worker left",
		job: func(ns string) *tjtest.TJ {
			job := trainerJob(ns, "deadline", 2, 100000, "--epoch-delay=200ms", "--fail-at=1:2:137")
			return withCheckpoints(job).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.FailurePolicy = &mlv1.FailurePolicy{ActiveDeadlineSeconds: ptr.To[int64](8)}
			})
		},
		wantState: mlv1.StateFailed, wantReason: "DeadlineExceeded", wantRestarts: 1, wantAttempt: 1,
		check: func(t *testing.T, tj *mlv1.TrainingJob, pids map[int]int) {
			if d := tj.Status.CompletionTime.Sub(tj.Status.StartTime.Time); d < 8*time.Second {
				t.Errorf("failed %s after the first start, before the deadline", d)
			}
			assertNoRunningWorker(t, tj)
			assertGone(t, pids)
		},
	}, {
		name: "no GPU for the workers: Initializing with the scheduler's message, then the scheduling timeout",
		job: func(ns string) *tjtest.TJ {
			return trainerJob(ns, "nogpu", 2, 6).GPUs(1).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Networking = &mlv1.NetworkingSpec{Backend: mlv1.BackendGloo}
				tj.Spec.Scheduling = &mlv1.SchedulingSpec{SchedulingTimeoutSeconds: ptr.To[int64](6)}
			})
		},
		fault: func(t *testing.T, ns, name string) {
			eventually(t, time.Minute, "Unschedulable with the scheduler's message", func() error {
				c := condition(getTJ(t, ns, name), mlv1.ConditionRunning)
				if c == nil || c.Reason != "Unschedulable" || !strings.Contains(c.Message, "Insufficient nvidia.com/gpu") {
					return fmt.Errorf("Running condition %+v", c)
				}
				return nil
			})
		},
		wantState: mlv1.StateFailed, wantReason: "SchedulingTimeout",
		check: func(t *testing.T, tj *mlv1.TrainingJob, _ map[int]int) {
			assertContains(t, "failureReason", tj.Status.FailureReason,
				"within scheduling.schedulingTimeoutSeconds (6s): Unschedulable: pod nogpu-worker-", "Insufficient nvidia.com/gpu")
			assertEvent(t, tj.Namespace, "Unschedulable", "Insufficient nvidia.com/gpu")
		},
	}, {
		name: "cleanup: pods deleted at the end, children after the TTL, checkpoints kept",
		job: func(ns string) *tjtest.TJ {
			return withCheckpoints(trainerJob(ns, "ttl", 1, 3, "--epoch-delay=300ms")).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Cleanup = &mlv1.CleanupPolicy{CleanPodPolicy: mlv1.CleanPodsAll, TTLSecondsAfterFinished: ptr.To[int32](3)}
			})
		},
		wantState: mlv1.StateCompleted, wantReason: "Succeeded",
		check: func(t *testing.T, tj *mlv1.TrainingJob, _ map[int]int) {
			eventually(t, time.Minute, "Job, Service, ConfigMap and pods deleted", func() error {
				for _, obj := range []client.Object{&batchv1.Job{}, &corev1.Service{}, &corev1.ConfigMap{}} {
					key := client.ObjectKey{Namespace: tj.Namespace, Name: childName(tj.Name, obj)}
					if err := stack.Client.Get(ctx, key, obj); !apierrors.IsNotFound(err) {
						return fmt.Errorf("%T still there (%v)", obj, err)
					}
				}
				if n := len(workerPods(t, tj.Namespace, tj.Name)); n > 0 {
					return fmt.Errorf("%d pods left", n)
				}
				return nil
			})
			if getTJ(t, tj.Namespace, tj.Name).Status.State != mlv1.StateCompleted {
				t.Errorf("the TrainingJob lost its state")
			}
			if ck := completeCheckpoints(t, tj.Namespace, tj.Name); len(ck) == 0 {
				t.Errorf("the checkpoints were removed by cleanup")
			}
		},
	}}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			runFailureScenario(t, sc)
		})
	}
}

func runFailureScenario(t *testing.T, sc failureScenario) {
	ns := newNamespace(t)
	tj := sc.job(ns).Obj()
	if tj.Spec.Checkpoint != nil {
		create(t, claim(ns))
	}
	create(t, tj)
	start := time.Now()
	var pids map[int]int
	if tj.Spec.GPUsPerWorker == nil || *tj.Spec.GPUsPerWorker == 0 {
		pids = runningPIDs(t, ns, tj.Name, int(tj.Spec.NumWorkers))
	}
	if sc.fault != nil {
		sc.fault(t, ns, tj.Name)
	}
	got := waitForState(t, ns, tj.Name, sc.wantState, 3*time.Minute)
	t.Logf("%s after %s: %s", got.Status.State, time.Since(start).Round(100*time.Millisecond), got.Status.FailureReason)
	reason := condition(got, string(sc.wantState))
	if reason == nil {
		t.Fatalf("no %s condition: %+v", sc.wantState, got.Status.Conditions)
	}
	type ended struct {
		Reason                string
		RestartCount, Attempt int32
	}
	gotEnd := ended{Reason: reason.Reason, RestartCount: got.Status.RestartCount, Attempt: got.Status.Attempt}
	wantEnd := ended{Reason: sc.wantReason, RestartCount: sc.wantRestarts, Attempt: sc.wantAttempt}
	if diff := cmp.Diff(wantEnd, gotEnd); diff != "" {
		t.Errorf("reason, restartCount, attempt (-want +got):\n%s", diff)
	}
	if sc.check != nil {
		sc.check(t, got, pids)
	}
}

// evictRank1 evicts rank 1's pod through the Eviction API, as a drain or the descheduler does: the API
// server marks it DisruptionTarget before deleting it.
func evictRank1(t *testing.T, ns, name string) { evictRank(1)(t, ns, name) }

// evictRank evicts a rank's pod once the run has trained an epoch.
func evictRank(rank int) func(t *testing.T, ns, name string) {
	return func(t *testing.T, ns, name string) {
		epochTrained(t, ns, name)
		stacktest.EvictRank(t, stack.Client, ns, name, rank)
	}
}

// epochTrained waits until the job runs and has trained an epoch.
func epochTrained(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, 2*time.Minute, "an epoch trained", func() error {
		if tj := getTJ(t, ns, name); tj.Status.State != mlv1.StateRunning || tj.Status.CurrentEpoch < 1 {
			return fmt.Errorf("%s at epoch %d", tj.Status.State, tj.Status.CurrentEpoch)
		}
		return nil
	})
}

// forceDeleteRank deletes a rank's pod at once (grace period 0) once the run has trained an epoch, as
// `kubectl delete pod --force` does.
func forceDeleteRank(rank int) func(t *testing.T, ns, name string) {
	return func(t *testing.T, ns, name string) {
		epochTrained(t, ns, name)
		pods := &corev1.PodList{}
		if err := stack.Client.List(ctx, pods, client.InNamespace(ns),
			client.MatchingLabels{names.NameLabel: name, names.RankLabel: fmt.Sprint(rank)}); err != nil || len(pods.Items) != 1 {
			t.Fatalf("rank %d's pods: %d, %v", rank, len(pods.Items), err)
		}
		if err := stack.Client.Delete(ctx, &pods.Items[0], client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
}

// assertKeptPods checks that each of ranks has one pod, created in attempt 0 and restarted in place into the
// job's attempt (its containers ran again: a restart count).
func assertKeptPods(t *testing.T, tj *mlv1.TrainingJob, ranks ...int) {
	t.Helper()
	for _, rank := range ranks {
		pods := &corev1.PodList{}
		if err := stack.Client.List(ctx, pods, client.InNamespace(tj.Namespace),
			client.MatchingLabels{names.NameLabel: tj.Name, names.RankLabel: fmt.Sprint(rank)}); err != nil || len(pods.Items) != 1 {
			t.Errorf("rank %d's pods: %d, %v; want the one kept", rank, len(pods.Items), err)
			continue
		}
		p := pods.Items[0]
		restarts := int32(0)
		for _, cs := range p.Status.ContainerStatuses {
			restarts = max(restarts, cs.RestartCount)
		}
		if p.Labels[names.AttemptLabel] != fmt.Sprint(tj.Status.Attempt) || restarts == 0 {
			t.Errorf("rank %d's pod %s: attempt label %q, restart count %d; want restarted in place into attempt %d",
				rank, p.Name, p.Labels[names.AttemptLabel], restarts, tj.Status.Attempt)
		}
	}
}

// assertPlacedAway checks the job avoids one node (the failing rank's) and no pod of the new attempt
// runs there.
func assertPlacedAway(t *testing.T, tj *mlv1.TrainingJob) {
	t.Helper()
	if len(tj.Status.AvoidedNodes) != 1 {
		t.Fatalf("status.avoidedNodes = %+v, want the failing rank's node", tj.Status.AvoidedNodes)
	}
	avoided := tj.Status.AvoidedNodes[0]
	pods := &corev1.PodList{}
	labels := client.MatchingLabels{names.NameLabel: tj.Name, names.AttemptLabel: "1"}
	if err := stack.Client.List(ctx, pods, client.InNamespace(tj.Namespace), labels); err != nil || len(pods.Items) == 0 {
		t.Fatalf("pods of attempt 1: %d, %v", len(pods.Items), err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == avoided.Name {
			t.Errorf("pod %s of the new attempt runs on the avoided node %s (%s)", p.Name, avoided.Name, avoided.Reason)
		}
	}
}

// logFaultToAction logs the time from the fault's detection (the first event of reason detected) to the
// action (the first event of reason action), and from the run's last advance to the detection.
func logFaultToAction(t *testing.T, tj *mlv1.TrainingJob, detected, action string) {
	first := firstEvents(t, tj)
	t.Logf("detected (%s) %s → action (%s) %s: %s", detected, first[detected].Format(time.RFC3339Nano), action,
		first[action].Format(time.RFC3339Nano), first[action].Sub(first[detected]).Round(10*time.Millisecond))
}

// logExitToAction logs the time from a rank's exit in attempt 0 (the last write to its log, the oldest
// of its pods' logs: its last words come just before it exits) to the action (the first event of reason
// action).
func logExitToAction(t *testing.T, tj *mlv1.TrainingJob, rank int, action string) {
	var exited time.Time // the earliest last write: attempt 0's
	for _, f := range node.LogPaths(stack.DataRoot, tj.Namespace, fmt.Sprintf("%s-worker-%d-*", tj.Name, rank), names.ContainerName) {
		if fi, err := os.Stat(f); err == nil && (exited.IsZero() || fi.ModTime().Before(exited)) {
			exited = fi.ModTime()
		}
	}
	acted := firstEvents(t, tj)[action]
	t.Logf("rank %d exited %s → action (%s) %s: %s", rank, exited.Format(time.RFC3339Nano), action,
		acted.Format(time.RFC3339Nano), acted.Sub(exited).Round(10*time.Millisecond))
}

// firstEvents returns when the job's first event of each reason was recorded.
func firstEvents(t *testing.T, tj *mlv1.TrainingJob) map[string]time.Time {
	events := &eventsv1.EventList{}
	if err := stack.Client.List(ctx, events, client.InNamespace(tj.Namespace)); err != nil {
		t.Fatal(err)
	}
	first := map[string]time.Time{}
	for _, e := range events.Items {
		at := e.EventTime.Time
		if old, ok := first[e.Reason]; e.Regarding.Name == tj.Name && (!ok || at.Before(old)) {
			first[e.Reason] = at
		}
	}
	return first
}

// checkpointDir returns where the job's checkpoints are on the claim "checkpoints", as the trainer sees them.
func checkpointDir(t *testing.T, ns, name string) string {
	return runDir(t, "checkpoints", ns, name) + "/"
}

func assertContains(t *testing.T, what, s string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(s, p) {
			t.Errorf("%s %q does not contain %q", what, s, p)
		}
	}
}

// assertEvent checks an event of the given reason on the TrainingJob whose note has every part.
func assertEvent(t *testing.T, ns, reason string, parts ...string) {
	t.Helper()
	eventually(t, 30*time.Second, "a "+reason+" event", func() error {
		events := &eventsv1.EventList{}
		if err := stack.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
			return err
		}
		var notes []string
		for _, e := range events.Items {
			if e.Reason != reason || e.Regarding.Kind != "TrainingJob" {
				continue
			}
			matches := true
			for _, p := range parts {
				matches = matches && strings.Contains(e.Note, p)
			}
			if matches {
				return nil
			}
			notes = append(notes, e.Note)
		}
		return fmt.Errorf("no %s event with %q among %q", reason, parts, notes)
	})
}

// assertGone checks the trainer processes seen running have exited.
func assertGone(t *testing.T, pids map[int]int) {
	t.Helper()
	eventually(t, time.Minute, "the first attempt's trainers exited", func() error {
		for rank, pid := range pids {
			if processAlive(pid) {
				return fmt.Errorf("rank %d (pid %d) still runs", rank, pid)
			}
		}
		return nil
	})
}

// assertNoRunningWorker checks no pod of the job runs any more and no trainer process is left.
func assertNoRunningWorker(t *testing.T, tj *mlv1.TrainingJob) {
	t.Helper()
	eventually(t, time.Minute, "no worker left", func() error {
		pods := &corev1.PodList{}
		if err := stack.Client.List(ctx, pods, client.InNamespace(tj.Namespace), client.MatchingLabels{names.NameLabel: tj.Name}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodPending {
				return fmt.Errorf("pod %s is %s", p.Name, p.Status.Phase)
			}
		}
		return nil
	})
}
