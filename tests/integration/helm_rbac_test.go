package integration

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	"github.com/trainingjob-operator/trainingjob-operator/deploy"
)

// clusterScoped says, for every GROUP/RESOURCE the generated RBAC (deploy/rbac/role.yaml) names, whether it
// is cluster-scoped. The chart keeps its own list of the cluster-scoped ones (clusterScopedResources in
// _helpers.tpl) to split the rules; TestHelmRBACWatchNamespaces holds the chart to this table, and fails on
// a resource the table does not know, so a resource new in the markers is classified in both.
var clusterScoped = map[string]bool{
	"core/nodes":                                true,
	"scheduling.k8s.io/priorityclasses":         true,
	"kueue.x-k8s.io/resourceflavors":            true,
	"kueue.x-k8s.io/workloadpriorityclasses":    true,
	"kueue.x-k8s.io/clusterqueues":              true,
	"kueue.x-k8s.io/admissionchecks":            true,
	"kueue.x-k8s.io/localqueues":                false,
	"authentication.k8s.io/tokenreviews":        true,
	"authorization.k8s.io/subjectaccessreviews": true,
	"core/configmaps":                           false,
	"core/events":                               false,
	"core/persistentvolumeclaims":               false,
	"core/pods":                                 false,
	"core/pods/log":                             false,
	"core/secrets":                              false,
	"core/services":                             false,
	"batch/jobs":                                false,
	"events.k8s.io/events":                      false,
	"kueue.x-k8s.io/workloads":                  false,
	"kueue.x-k8s.io/workloads/status":           false,
	"ml.example.com/trainingjobs":               false,
	"ml.example.com/trainingjobs/status":        false,
	"scheduling.volcano.sh/podgroups":           false,
	"scheduling.x-k8s.io/podgroups":             false,
	"coordination.k8s.io/leases":                false,
}

// grants flattens rules into GROUP/RESOURCE:VERB (with [NAMES] when the rule names its objects), sorted.
func grants(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		names := ""
		if len(r.ResourceNames) > 0 {
			names = "[" + strings.Join(r.ResourceNames, ",") + "]"
		}
		for _, url := range r.NonResourceURLs {
			for _, v := range r.Verbs {
				out = append(out, url+":"+v)
			}
		}
		for _, g := range r.APIGroups {
			if g == "" {
				g = "core"
			}
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out = append(out, g+"/"+res+":"+v+names)
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// generatedRules returns the rules of the generated ClusterRole and of the generated Role (leader election).
func generatedRules(t *testing.T) (cluster, release []rbacv1.PolicyRule) {
	t.Helper()
	objs, err := deploy.RBAC()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetName() != releaseName {
			continue // the metrics reader's ClusterRole, the binding, the ServiceAccount
		}
		switch o.GetKind() {
		case "ClusterRole":
			cluster = toRole(t, o).Rules
		case "Role":
			release = toRole(t, o).Rules
		}
	}
	if cluster == nil || release == nil {
		t.Fatalf("deploy/rbac lacks the ClusterRole or the Role %s", releaseName)
	}
	return cluster, release
}

func toRole(t *testing.T, o *unstructured.Unstructured) rbacv1.ClusterRole {
	t.Helper()
	var role rbacv1.ClusterRole // a Role has the same fields
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
		t.Fatal(err)
	}
	return role
}

// TestHelmRBACWatchNamespaces renders the chart's RBAC with and without watchNamespaces. Without, the
// operator has the generated ClusterRole as it is. With, each watched namespace has a Role and RoleBinding
// with the generated rules on namespaced resources, and the ClusterRole keeps only the rules on
// cluster-scoped ones: no ClusterRole grants anything on Secrets, pods, ConfigMaps or Jobs. Either way the
// rendered rules together grant every rule of deploy/rbac/role.yaml (in every namespace the operator
// works in) and nothing else, and every role is bound to the operator's ServiceAccount.
func TestHelmRBACWatchNamespaces(t *testing.T) {
	const release, ns = "ml", "ml-system"
	fullname := release + "-" + releaseName
	generated, leaderElection := generatedRules(t)
	var clusterWide, namespaced []string // the generated grants by their resource's scope
	for _, g := range grants(generated) {
		resource, _, _ := strings.Cut(g, ":")
		scoped, known := clusterScoped[resource]
		if !known {
			t.Fatalf("deploy/rbac/role.yaml grants %s: add %s to clusterScoped (and, if it is cluster-scoped, "+
				"to clusterScopedResources in the chart's _helpers.tpl)", g, resource)
		}
		if scoped {
			clusterWide = append(clusterWide, g)
		} else {
			namespaced = append(namespaced, g)
		}
	}
	// Resources no ClusterRole may grant anything on once the operator is limited to namespaces.
	neverClusterWide := []string{"core/secrets", "core/pods", "core/configmaps", "batch/jobs"}

	cases := []struct {
		name, set string
		// watched are the namespaces the operator works in (none: all).
		watched []string
		// want are the grants of the operator's roles by where they apply: "cluster" for the ClusterRole,
		// else the Role's namespace.
		want map[string][]string
	}{{
		name: "all namespaces",
		want: map[string][]string{"cluster": grants(generated), ns: grants(leaderElection)},
	}, {
		name:    "team-a and team-b",
		set:     "watchNamespaces={team-a,team-b}",
		watched: []string{"team-a", "team-b"},
		want:    map[string][]string{"cluster": clusterWide, "team-a": namespaced, "team-b": namespaced, ns: grants(leaderElection)},
	}, {
		name:    "the release's namespace watched too, and listed twice",
		set:     "watchNamespaces={team-a," + ns + ",team-a}",
		watched: []string{"team-a", ns},
		want:    map[string][]string{"cluster": clusterWide, "team-a": namespaced, ns: sortedUnion(namespaced, grants(leaderElection))},
	}, {
		name:    "the operator-wide MLflow credentials: that Secret only",
		set:     "watchNamespaces={team-a},mlflow.credentialsSecret=mlflow",
		watched: []string{"team-a"},
		want: map[string][]string{"cluster": clusterWide, "team-a": namespaced,
			ns: sortedUnion(grants(leaderElection), []string{"core/secrets:get[mlflow]"})},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", release, chartDir, "--namespace", ns, "--kube-version", "1.36.3"}
			if tc.set != "" {
				args = append(args, "--set", tc.set)
			}
			roles := map[string][]rbacv1.PolicyRule{} // kind/namespace/name
			bound := map[string]bool{}                // roles bound to the operator's ServiceAccount
			for _, o := range decode(t, helm(t, args...)) {
				key := o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
				switch o.GetKind() {
				case "ClusterRole", "Role":
					if o.GetName() != fullname+"-metrics-reader" { // the scrapers' role (TestHelmMetricsValues)
						roles[key] = toRole(t, o).Rules
					}
				case "ClusterRoleBinding", "RoleBinding":
					var b rbacv1.RoleBinding // a ClusterRoleBinding has the same fields
					if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
						t.Fatal(err)
					}
					want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: fullname, Namespace: ns}}
					if diff := cmp.Diff(want, b.Subjects); diff != "" {
						t.Errorf("%s subjects (-want +got):\n%s", key, diff)
					}
					roleKind := strings.TrimSuffix(o.GetKind(), "Binding")
					bound[roleKind+"/"+o.GetNamespace()+"/"+b.RoleRef.Name] = b.RoleRef.Kind == roleKind
				}
			}
			got := map[string][]string{}
			for key, rules := range roles {
				if !bound[key] {
					t.Errorf("%s is not bound to the operator's ServiceAccount", key)
				}
				kind, rest, _ := strings.Cut(key, "/")
				where, _, _ := strings.Cut(rest, "/")
				if kind == "ClusterRole" {
					where = "cluster"
					if len(tc.watched) > 0 {
						for _, g := range grants(rules) {
							if r, _, _ := strings.Cut(g, ":"); slices.Contains(neverClusterWide, r) {
								t.Errorf("%s grants %s although the operator watches only some namespaces", key, g)
							}
						}
					}
				}
				got[where] = sortedUnion(got[where], grants(rules))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("the operator's grants by where they apply (-want +got):\n%s", diff)
			}
			// Nothing of the generated RBAC is lost: each rule holds cluster-wide, or in every namespace the
			// operator works in (the watched ones; the release's for the generated Role).
			for _, g := range grants(generated) {
				switch {
				case slices.Contains(got["cluster"], g):
				case len(tc.watched) == 0:
					t.Errorf("%s of deploy/rbac/role.yaml is not granted cluster-wide", g)
				default:
					for _, w := range tc.watched {
						if !slices.Contains(got[w], g) {
							t.Errorf("%s of deploy/rbac/role.yaml is granted neither cluster-wide nor in %s", g, w)
						}
					}
				}
			}
			for _, g := range grants(leaderElection) {
				if !slices.Contains(got[ns], g) {
					t.Errorf("%s of deploy/rbac/role.yaml's Role is not granted in %s", g, ns)
				}
			}
			// The QueueController keeps its list in the operator's namespace, watched or not.
			list := "[" + names.MultiKueueQueuesConfigMap + "]"
			for _, g := range []string{"core/configmaps:create", "core/configmaps:get" + list, "core/configmaps:update" + list} {
				anyName, _, _ := strings.Cut(g, "[")
				if !slices.Contains(got[ns], g) && !slices.Contains(got[ns], anyName) && !slices.Contains(got["cluster"], anyName) {
					t.Errorf("the QueueController may not %s in %s, the operator's namespace", g, ns)
				}
			}
		})
	}
}

// sortedUnion returns the sorted union of a and b.
func sortedUnion(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}
