package deploy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/trainingjob-operator/trainingjob-operator/deploy"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// used is every permission the operator's code uses, and why. The generated RBAC (from the controllers'
// +kubebuilder:rbac markers) must grant exactly these: no wildcard, no verb nobody calls. The chaos suite
// runs the manager as the ServiceAccount with this RBAC, so a verb missing here fails there.
var used = map[string][]string{
	// JobController: the cache (list, watch; get is served by it, and list reveals no less), createOwned
	// (create), ensure (update: ensureConfigMap's config.json, ensureService's ports and selector), TTL
	// cleanup (delete: deleteChildren).
	//
	// configmaps' patch: the CheckpointController's RESUME_FROM, the TrackingController's MLFLOW_RUN_ID
	"core/configmaps": {"create", "delete", "get", "list", "patch", "update", "watch"},
	"core/services":   {"create", "delete", "get", "list", "update", "watch"},
	// patch: suspend; delete: a replaced attempt
	"batch/jobs": {"create", "delete", "get", "list", "patch", "watch"},
	// delete, patch: a gang restart stops the old attempt's pods and releases their Job tracking finalizers
	// once their Job is gone (stopPod); deletecollection: cleanPodPolicy All (deletePods' DeleteAllOf)
	"core/pods": {"delete", "deletecollection", "get", "list", "patch", "watch"},
	// the StatusController: each rank's last log lines in a hang's message
	"core/pods/log": {"get"},
	// an unbound claim's events (read, not cached)
	"core/events": {"list"},
	// a failed attempt's nodes: one lost or not Ready makes the failure a disruption; list: the nodes its
	// workers could move to, so that avoidance leaves them room
	"core/nodes": {"get", "list"},
	// a failed attempt's nodes' heartbeats (kube-node-lease): a verdict waits for a node that stopped renewing
	"coordination.k8s.io/leases":  {"get"},
	"core/persistentvolumeclaims": {"create", "get", "list", "watch"},
	// create: an MPI job's SSH keys and every job's tokens (NAME-tokens), in its namespace, never read;
	// get: MLflow credentials, read uncached (no Secret is cached): a job's own in its namespace, the
	// operator-wide one (--mlflow-credentials-secret) by name
	"core/secrets":         {"create", "get"},
	"events.k8s.io/events": {"create", "patch"},
	// delete: ttl with deleteTrainingJob; patch: a MultiKueue copy's origin-created annotation, once
	"ml.example.com/trainingjobs": {"delete", "get", "list", "patch", "watch"},
	// server-side apply, one field manager per controller
	"ml.example.com/trainingjobs/status": {"patch"},
	"scheduling.volcano.sh/podgroups":    {"create", "get"},
	// Kueue (controllers/job_kueue.go): one Workload per job (cache; create; patch: active, queue, pod set,
	// finalizer; delete: an admitted elastic job resized), its status (update: PodsReady, Finished, the
	// quota released after an eviction), the admission's flavors and the queue priority's classes.
	"kueue.x-k8s.io/workloads":               {"create", "delete", "get", "list", "patch", "watch"},
	"kueue.x-k8s.io/workloads/status":        {"update"},
	"kueue.x-k8s.io/resourceflavors":         {"get"},
	"kueue.x-k8s.io/workloadpriorityclasses": {"get"},
	// the QueueController (cache): which LocalQueues dispatch through MultiKueue; it writes the result into
	// one ConfigMap in the operator's namespace (trainingjob-system:core/configmaps below)
	"kueue.x-k8s.io/localqueues":        {"get", "list", "watch"},
	"kueue.x-k8s.io/clusterqueues":      {"get", "list", "watch"},
	"kueue.x-k8s.io/admissionchecks":    {"get", "list", "watch"},
	"scheduling.k8s.io/priorityclasses": {"get"},
	// The metrics endpoint: who a scraper's token is, and whether it may get /metrics.
	"authentication.k8s.io/tokenreviews":        {"create"},
	"authorization.k8s.io/subjectaccessreviews": {"create"},
	"scheduling.x-k8s.io/podgroups":             {"create", "get"},
	// Leader election (namespaced Role): the Lease, and its events.
	"trainingjob-system:coordination.k8s.io/leases": {"create", "get", "update"},
	"trainingjob-system:core/events":                {"create", "patch"},
	// The key of the checkpoint agents' tokens, in the operator's own namespace (cmd/manager agentTokenKey):
	// read by name, created when missing.
	"trainingjob-system:core/secrets": {"create", "get"},
	// The QueueController's list of MultiKueue LocalQueues (names.MultiKueueQueuesConfigMap): get uncached,
	// update and delete by name, create when missing. A Role, so a chart limited to watchNamespaces keeps it.
	"trainingjob-system:core/configmaps": {"create", "delete", "get", "update"},
}

func TestRBACIsLeastPrivilege(t *testing.T) {
	objs, err := deploy.RBAC()
	if err != nil {
		t.Fatal(err)
	}
	granted := map[string][]string{}
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" || o.GetName() == metrics.ReaderClusterRole {
			continue // the metrics reader's role is the scrapers', not the operator's (TestMetricsReaderRole)
		}
		var role rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
			t.Fatal(err)
		}
		prefix := ""
		if ns := o.GetNamespace(); ns != "" {
			prefix = ns + ":"
		}
		for _, r := range role.Rules {
			for _, f := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.ResourceNames, r.NonResourceURLs} {
				if slices.Contains(f, "*") {
					t.Errorf("%s %s grants a wildcard: %+v", o.GetKind(), o.GetName(), r)
				}
			}
			for _, g := range r.APIGroups {
				if g == "" {
					g = "core"
				}
				for _, res := range r.Resources {
					key := fmt.Sprintf("%s%s/%s", prefix, g, res)
					granted[key] = append(granted[key], r.Verbs...)
				}
			}
		}
	}
	for k, v := range granted {
		slices.Sort(v)
		granted[k] = slices.Compact(v)
	}
	if diff := cmp.Diff(used, granted); diff != "" {
		t.Errorf("granted permissions differ from what the code uses (-used +granted):\n%s\n"+
			"(change the +kubebuilder:rbac markers, run make generate, and say here why a verb is needed)", strings.TrimSpace(diff))
	}
}

// TestMetricsReaderRole: the ClusterRole a scraper is bound to allows reading /metrics and nothing else.
func TestMetricsReaderRole(t *testing.T) {
	objs, err := deploy.RBAC()
	if err != nil {
		t.Fatal(err)
	}
	var got []rbacv1.PolicyRule
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" && o.GetName() == metrics.ReaderClusterRole {
			var role rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
				t.Fatal(err)
			}
			got = role.Rules
		}
	}
	want := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ClusterRole %s (-want +got):\n%s", metrics.ReaderClusterRole, diff)
	}
}
