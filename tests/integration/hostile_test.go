package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestHostileRulesCostNoMorePerStatusWrite: a job with sixteen hostile onMessage patterns ((?:aaa…a){1000},
// 1,011 characters each) costs the real kube-apiserver no more per status write than a plain job, measured
// in the same run, writes interleaved. When the CRD compiled onMessage in CEL, each status write of such a
// job took 1.6-2.0 s of API-server CPU (3-8 ms for a plain one): the API server must never compile a
// tenant's pattern. The bound is loose (4x and 50 ms): it catches that hole by two orders of magnitude,
// never the machine's noise.
func TestHostileRulesCostNoMorePerStatusWrite(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	var rules []mlv1.FailureRule
	for i := range 16 {
		rules = append(rules, mlv1.FailureRule{Action: mlv1.RuleFail, OnMessage: "^(?:" + strings.Repeat(string(rune('a'+i)), 1000) + "){1000}"})
	}
	plain := tjtest.NewTJ(ns, "plain").GPUs(0).Obj()
	hostile := tjtest.NewTJ(ns, "hostile").GPUs(0).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.FailurePolicy = &mlv1.FailurePolicy{Rules: rules}
	}).Obj()
	// The API server's first create of the kind is slow.
	if err := env.Client.Create(ctx, tjtest.NewTJ(ns, "warm-up").GPUs(0).Obj()); err != nil {
		t.Fatal(err)
	}
	created := map[string]time.Duration{}
	for _, tj := range []*mlv1.TrainingJob{plain, hostile} {
		start := time.Now()
		if err := env.Client.Create(ctx, tj); err != nil {
			t.Fatalf("creating %s: %v", tj.Name, err)
		}
		created[tj.Name] = time.Since(start)
	}
	const writes = 15
	took := map[string][]time.Duration{}
	for i := range writes {
		for _, tj := range []*mlv1.TrainingJob{plain, hostile} {
			patch := client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"status":{"progress":"%d%%"}}`, i))
			start := time.Now()
			if err := env.Client.Status().Patch(ctx, tj, patch); err != nil {
				t.Fatalf("status write %d of %s: %v", i, tj.Name, err)
			}
			took[tj.Name] = append(took[tj.Name], time.Since(start))
		}
	}
	p, h := median(took["plain"]), median(took["hostile"])
	t.Logf("per status write (median of %d): plain %v, 16 hostile rules %v (ratio %.2f); create: plain %v, hostile %v",
		writes, p, h, float64(h)/float64(p), created["plain"], created["hostile"])
	if h > 4*p+50*time.Millisecond {
		t.Errorf("a status write of the job with hostile rules took %v, a plain job's %v: the API server runs the tenant's patterns", h, p)
	}
	if c := created["hostile"]; c > 4*created["plain"]+50*time.Millisecond {
		t.Errorf("creating the job with hostile rules took %v, a plain job %v", c, created["plain"])
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
