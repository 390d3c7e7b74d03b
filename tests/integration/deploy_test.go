package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/yaml"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/deploy"
	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

type kustomization struct {
	Namespace string   `json:"namespace"`
	Resources []string `json:"resources"`
}

// deployObjects reads every object the kustomization in deploy/ lists.
func deployObjects(t *testing.T) (kustomization, []*unstructured.Unstructured) {
	t.Helper()
	dir := filepath.Join(testenv.RepoRoot(), "deploy")
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, res := range k.Resources {
		more, err := deploy.ReadFile(filepath.Join(dir, res))
		if err != nil {
			t.Fatalf("kustomization resource: %v", err)
		}
		objs = append(objs, more...)
	}
	return k, objs
}

// TestDeployManifestsAreAccepted sends every install manifest to the real API server (dry run after the
// namespace), so a schema error in deploy/ fails here rather than in a user's cluster.
func TestDeployManifestsAreAccepted(t *testing.T) {
	ctx := context.Background()
	k, objs := deployObjects(t)
	for _, u := range objs {
		if k := u.GetKind(); k == "CustomResourceDefinition" || strings.HasPrefix(k, "ValidatingAdmissionPolicy") ||
			strings.HasPrefix(k, "MutatingAdmissionPolicy") {
			continue // installed by the test environment from the same files
		}
		if u.GetKind() != "Namespace" && u.GetNamespace() == "" && isNamespaced(u.GetKind()) {
			u.SetNamespace(k.Namespace)
		}
		var opts []client.CreateOption
		if u.GetKind() != "Namespace" {
			opts = append(opts, client.DryRunAll)
		}
		if err := env.Client.Create(ctx, u, opts...); err != nil {
			t.Errorf("%s %s rejected: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

func isNamespaced(kind string) bool {
	return !slices.Contains([]string{"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "Namespace",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}, kind)
}

// TestDeployManagerIsHardened: the manager runs non-root, read-only, without capabilities, with probes.
func TestDeployManagerIsHardened(t *testing.T) {
	_, objs := deployObjects(t)
	var dep appsv1.Deployment
	for _, u := range objs {
		if u.GetKind() == "Deployment" {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &dep); err != nil {
				t.Fatal(err)
			}
		}
	}
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("deployment containers = %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	type hardening struct {
		NonRoot, ReadOnly, DropAll, Probes, Requests bool
	}
	got := hardening{
		NonRoot:  pod.SecurityContext != nil && *pod.SecurityContext.RunAsNonRoot,
		ReadOnly: sc != nil && *sc.ReadOnlyRootFilesystem && !*sc.AllowPrivilegeEscalation,
		DropAll:  sc != nil && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}),
		Probes:   c.LivenessProbe != nil && c.ReadinessProbe != nil,
		Requests: c.Resources.Requests.Cpu().MilliValue() > 0 && c.Resources.Requests.Memory().Value() > 0,
	}
	want := hardening{NonRoot: true, ReadOnly: true, DropAll: true, Probes: true, Requests: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("nonRoot, readOnly, dropAll, probes, requests (-want +got):\n%s", diff)
	}
}

// TestReservedEnvNamesMatchCRD keeps the CRD's CEL rule on spec.env and builders.ReservedEnvNames equal
// (builders' TestWorkerEnvFollowsContract checks every injected name against the contract).
func TestReservedEnvNamesMatchCRD(t *testing.T) {
	crd := loadCRD(t)
	envSchema := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["env"]
	if len(envSchema.XValidations) != 1 {
		t.Fatalf("spec.env has %d CEL rules, want 1", len(envSchema.XValidations))
	}
	var inRule []string
	for _, m := range regexp.MustCompile(`'([A-Z_]+)'`).FindAllStringSubmatch(envSchema.XValidations[0].Rule, -1) {
		inRule = append(inRule, m[1])
	}
	want := slices.Clone(builders.ReservedEnvNames)
	slices.Sort(want)
	slices.Sort(inRule)
	if diff := cmp.Diff(want, inRule); diff != "" {
		t.Errorf("CEL rule names vs builders.ReservedEnvNames (-want +got):\n%s", diff)
	}
	for _, name := range builders.DefaultEnvNames {
		if slices.Contains(builders.ReservedEnvNames, name) {
			t.Errorf("%s is both reserved and a default", name)
		}
	}
}

// TestExamplesAreAccepted creates every object in examples/*.yaml on the real API server; TrainingJobs
// must decode strictly (no unknown or misspelt fields). Kueue's objects (examples/kueue.yaml) decode
// strictly into Kueue's own types here: this API server serves no Kueue API (TestQueuedWithoutKueue needs
// it so), and cmd/trainingjob-local's TestUpWithKueue creates them on one that does.
func TestExamplesAreAccepted(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples (%v)", err)
	}
	ns := newNamespace(t)
	for _, f := range files {
		objs, err := deploy.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range objs {
			typed, ok := strictTypes[u.GroupVersionKind()]
			if ok {
				data, _ := json.Marshal(u.Object)
				if err := yaml.UnmarshalStrict(data, typed()); err != nil {
					t.Errorf("%s: %s %s: %v", filepath.Base(f), u.GetKind(), u.GetName(), err)
				}
			}
			if u.GroupVersionKind().Group == kueue.SchemeGroupVersion.Group {
				if !ok {
					t.Errorf("%s: %s %s: add its Kueue type to strictTypes", filepath.Base(f), u.GetKind(), u.GetName())
				}
				continue
			}
			u.SetNamespace(ns)
			if err := env.Client.Create(context.Background(), u); err != nil {
				t.Errorf("%s: %s %s rejected: %v", filepath.Base(f), u.GetKind(), u.GetName(), err)
			}
		}
	}
}

// strictTypes are the kinds of the examples that decode strictly into Go types, each a new empty object.
var strictTypes = map[schema.GroupVersionKind]func() any{
	mlv1.GroupVersion.WithKind("TrainingJob"):                  func() any { return &mlv1.TrainingJob{} },
	kueue.SchemeGroupVersion.WithKind("ResourceFlavor"):        func() any { return &kueue.ResourceFlavor{} },
	kueue.SchemeGroupVersion.WithKind("ClusterQueue"):          func() any { return &kueue.ClusterQueue{} },
	kueue.SchemeGroupVersion.WithKind("LocalQueue"):            func() any { return &kueue.LocalQueue{} },
	kueue.SchemeGroupVersion.WithKind("WorkloadPriorityClass"): func() any { return &kueue.WorkloadPriorityClass{} },
	kueue.SchemeGroupVersion.WithKind("Topology"):              func() any { return &kueue.Topology{} },
}

// TestEveryFieldIsDocumented: `kubectl explain trainingjob.spec...` has a description for every field,
// and ours start with their JSON name as the API conventions ask.
func TestEveryFieldIsDocumented(t *testing.T) {
	crd := loadCRD(t)
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	var walk func(path string, s apiextensionsv1.JSONSchemaProps, ours bool)
	walk = func(path string, s apiextensionsv1.JSONSchemaProps, ours bool) {
		for name, p := range s.Properties {
			child := path + "." + name
			if p.Description == "" {
				t.Errorf("%s has no description", child)
			}
			// Our types are documented "<jsonName> ..."; core types (env, affinity, ...) keep their own docs.
			if ours && !strings.HasPrefix(p.Description, name+" ") {
				t.Errorf("%s: description %q does not start with %q", child, firstLine(p.Description), name)
			}
			walk(child, p, ours && !coreType(child))
			if p.Items != nil && p.Items.Schema != nil {
				walk(child+"[]", *p.Items.Schema, ours && !coreType(child))
			}
		}
	}
	walk("spec", root.Properties["spec"], true)
	walk("status", root.Properties["status"], true)
}

// coreType reports whether the field's schema comes from a Kubernetes core or meta type.
func coreType(path string) bool {
	for _, p := range []string{"spec.env", "spec.scheduling.affinity", "spec.scheduling.tolerations",
		"spec.checkpoint.storage.secretRef", "spec.inputs.secretRef", "status.checkpointStorage.secretRef", "status.conditions",
		"spec.resources.limits", "spec.resources.requests",
		"spec.workerPod.imagePullSecrets", "spec.workerPod.volumes", "spec.workerPod.volumeMounts", "spec.workerPod.envFrom"} {
		if path == p {
			return true
		}
	}
	for _, list := range []string{"initContainers", "sidecars"} {
		for _, f := range []string{"env", "envFrom", "volumeMounts", "ports", "resources.limits", "resources.requests"} {
			if path == "spec.workerPod."+list+"[]."+f {
				return true
			}
		}
	}
	return false
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

// loadCRD reads the generated CRD.
func loadCRD(t *testing.T) apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "deploy", "crd", "ml.example.com_trainingjobs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	return crd
}
