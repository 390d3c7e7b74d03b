package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// The MultiKueue worker side against a real API server, the test playing Kueue: what a tenant can do with
// the prebuilt Workload key and the origin label (found by the attack run of issue 62).

var kueueCRDsOnce sync.Once

// kueueCRDs installs Kueue's CRDs ($KUEUE_ASSETS/crds) once, before an operator that must see them starts.
func kueueCRDs(t *testing.T) {
	t.Helper()
	var err error
	kueueCRDsOnce.Do(func() {
		err = local.ApplyCRDs(context.Background(), env.Config, filepath.Join(os.Getenv("KUEUE_ASSETS"), "crds"))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// tenant returns a client acting as user, who may do anything to TrainingJobs and ConfigMaps in ns and read
// Workloads (what a namespace's user has).
func tenant(t *testing.T, ns, user string) client.Client {
	t.Helper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-" + user}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{mlv1.GroupVersion.Group}, Resources: []string{"trainingjobs"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}},
		{APIGroups: []string{kueue.SchemeGroupVersion.Group}, Resources: []string{"workloads"}, Verbs: []string{"get", "list", "watch"}},
	}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-" + user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	for _, o := range []client.Object{role, rb} {
		if err := env.Client.Create(context.Background(), o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: controllers.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func cpuJob(ns, name string) *tjtest.TJ {
	return tjtest.NewTJ(ns, name).Workers(1).GPUs(0).Image("busybox:1.36", "train").With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Resources = &mlv1.Resources{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
	})
}

// admit plays Kueue: it reserves quota for the Workload and admits it.
func admit(t *testing.T, key client.ObjectKey) {
	t.Helper()
	eventually(t, "admitting "+key.Name, func(ctx context.Context) error {
		wl := &kueue.Workload{}
		if err := env.Client.Get(ctx, key, wl); err != nil {
			return err
		}
		wl.Status.Admission = &kueue.Admission{ClusterQueue: "cq", PodSetAssignments: []kueue.PodSetAssignment{{
			Name: names.WorkerPodSet, Flavors: map[corev1.ResourceName]kueue.ResourceFlavorReference{corev1.ResourceCPU: "default"},
			ResourceUsage: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}, Count: ptr.To(wl.Spec.PodSets[0].Count)}}}
		now := metav1.Now()
		meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue,
			Reason: "QuotaReserved", Message: "Quota reserved in ClusterQueue cq", LastTransitionTime: now})
		meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: kueue.WorkloadAdmitted, Status: metav1.ConditionTrue,
			Reason: "Admitted", Message: "The workload is admitted", LastTransitionTime: now})
		return env.Client.Status().Update(ctx, wl)
	})
}

// workloadOf returns the Workload the job controls.
func workloadOf(t *testing.T, tj *mlv1.TrainingJob) *kueue.Workload {
	t.Helper()
	var found *kueue.Workload
	eventually(t, "the Workload of "+tj.Name, func(ctx context.Context) error {
		list := &kueue.WorkloadList{}
		if err := env.Client.List(ctx, list, client.InNamespace(tj.Namespace)); err != nil {
			return err
		}
		for i := range list.Items {
			if o := metav1.GetControllerOf(&list.Items[i]); o != nil && o.Kind == "TrainingJob" && o.Name == tj.Name {
				found = &list.Items[i]
				return nil
			}
		}
		return fmt.Errorf("none of %d", len(list.Items))
	})
	return found
}

// TestForeignWorkloadIsNeverFinished: a tenant whose job has finished names a running job's Workload as its
// prebuilt Workload, origin label included: the Workload stays unfinished, its finalizer kept, so Kueue
// keeps charging its quota.
func TestForeignWorkloadIsNeverFinished(t *testing.T) {
	ctx := context.Background()
	kueueCRDs(t)
	ns := newNamespace(t)
	startControllerManager(t)
	startOperator(t, ns)
	err := env.Client.Create(ctx, &kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "default"}}) // admit's flavor
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	alice, mallory := tenant(t, ns, "alice"), tenant(t, ns, "mallory")
	victim := cpuJob(ns, "victim").Queue("lq").Obj()
	if err := alice.Create(ctx, victim); err != nil {
		t.Fatal(err)
	}
	wl := workloadOf(t, victim)
	admit(t, client.ObjectKeyFromObject(wl))
	pods := workerPods(t, victim, 1)
	setPodStatus(t, &pods[0], corev1.PodRunning, running(), 0)
	waitForState(t, client.ObjectKeyFromObject(victim), mlv1.StateRunning)

	done := cpuJob(ns, "done").Obj()
	if err := mallory.Create(ctx, done); err != nil {
		t.Fatal(err)
	}
	pods = workerPods(t, done, 1)
	setPodStatus(t, &pods[0], corev1.PodSucceeded, terminated(0, "Completed"), 0)
	waitForState(t, client.ObjectKeyFromObject(done), mlv1.StateCompleted)
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"manager"},"annotations":{%q:%q}}}`,
		names.MultiKueueOriginLabel, names.PrebuiltWorkloadKey, wl.Name)
	if err := mallory.Patch(ctx, done, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	// The patch is reconciled within the watch's delivery; 5 s bounds the look, it measures nothing.
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		got := &kueue.Workload{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(wl), got); err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, kueue.WorkloadFinished); c != nil || len(got.Finalizers) == 0 {
			t.Fatalf("the victim's Workload was finished by another job: Finished %+v, finalizers %v", c, got.Finalizers)
		}
	}
}

// TestForgedDispatchedRunID: a job created with a dispatched copy's labels records that copy's run ID but never
// runs under it (no Workload is made for it); once the labels go it runs under a run ID of its own, the UID.
func TestForgedDispatchedRunID(t *testing.T) {
	ctx := context.Background()
	kueueCRDs(t)
	ns := newNamespace(t)
	startOperator(t, ns)
	mallory := tenant(t, ns, "mallory")
	forged := cpuJob(ns, "train").Label(names.MultiKueueOriginLabel, "manager").With(func(tj *mlv1.TrainingJob) {
		tj.Annotations = map[string]string{names.PrebuiltWorkloadKey: "trainingjob-train-0badf00d"}
	}).Obj()
	if err := mallory.Create(ctx, forged); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(forged)
	waitForState(t, key, mlv1.StateSuspended) // waiting for MultiKueue's Workload
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:null},"annotations":{%q:null}}}`,
		names.MultiKueueOriginLabel, names.PrebuiltWorkloadKey)
	if err := mallory.Patch(ctx, forged, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a run ID of its own", func(ctx context.Context) error {
		got := &mlv1.TrainingJob{}
		if err := env.Client.Get(ctx, key, got); err != nil {
			return err
		}
		if got.Status.RunID != string(got.UID) {
			return fmt.Errorf("run ID %q, UID %s", got.Status.RunID, got.UID)
		}
		return nil
	})
}
