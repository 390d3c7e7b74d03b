package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/cluster"
)

// replica is one manager process with leader election and its metrics address.
type replica struct {
	name    string
	metrics string
	proc    *cluster.Process
}

// reconciles returns how many JobController reconciles the replica has finished (0 while it is not leader:
// a follower starts no controller).
func (r *replica) reconciles() int {
	n, _ := reconciles(r.metrics)
	return n
}

// TestLeaderElection: two replicas with --leader-elect; only the leader reconciles (the follower finishes
// no reconcile); the leader is SIGKILLed mid-lifecycle (its lease is not released), the follower takes
// over once the lease expires (controller-runtime's defaults: lease 15 s, renew deadline 10 s, retry
// 2 s), and the jobs end correctly.
func TestLeaderElection(t *testing.T) {
	stack.KillOperator() // the suite's own operator does not elect a leader
	t.Cleanup(func() {
		if err := stack.StartOperator(); err != nil {
			t.Error(err)
		}
	})
	for i := 0; i < repeats(); i++ {
		t.Run(fmt.Sprint(i), killLeaderMidRun)
	}
}

func killLeaderMidRun(t *testing.T) {
	ctx := context.Background()
	system := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "trainingjob-system"}}
	if err := stack.Client.Create(ctx, system); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	var replicas []*replica
	for _, name := range []string{"replica-a", "replica-b"} {
		addr, err := freeAddr()
		if err != nil {
			t.Fatal(err)
		}
		p, err := stack.StartManager(name, addr, "--leader-elect", "--leader-election-namespace=trainingjob-system")
		if err != nil {
			t.Fatal(err)
		}
		r := &replica{name: name, metrics: addr, proc: p}
		replicas = append(replicas, r)
		t.Cleanup(p.Stop)
	}
	ns := newNamespace(t)
	var tjs []*mlv1.TrainingJob
	for _, lc := range lifecycles[:2] {
		tjs = append(tjs, createJob(t, ns, lc))
	}
	leader, follower := electedLeader(t, replicas)
	if n := follower.reconciles(); n != 0 {
		t.Errorf("the follower %s finished %d reconciles while %s leads", follower.name, n, leader.name)
	}
	time.Sleep(2 * time.Second) // mid-lifecycle
	killed := time.Now()
	leader.proc.Kill()
	for follower.reconciles() == 0 {
		if time.Since(killed) > time.Minute {
			t.Fatalf("%s did not take over within a minute of %s's death", follower.name, leader.name)
		}
		time.Sleep(100 * time.Millisecond)
	}
	takeover := time.Since(killed)
	correct := 0
	for i, lc := range lifecycles[:2] {
		if checkJob(t, tjs[i], lc, follower.metrics) {
			correct++
		}
	}
	record("leader SIGKILLed (2 replicas, leader election)", "kill → the other replica's first reconcile", 1, len(tjs), correct, takeover)
	t.Logf("leader election report: %s led, SIGKILLed mid-run; %s reconciled first %s later (lease 15 s); %d of %d jobs ended correctly",
		leader.name, follower.name, takeover.Round(100*time.Millisecond), correct, len(tjs))
}

// electedLeader waits until one replica reconciles and returns it and the other.
func electedLeader(t *testing.T, rs []*replica) (leader, follower *replica) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for i, r := range rs {
			if r.reconciles() > 0 {
				return r, rs[1-i]
			}
		}
	}
	t.Fatal("no replica became leader within a minute")
	return nil, nil
}
