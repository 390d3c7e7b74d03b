package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestGangSchedulingPodGroups: a job for Volcano or the coscheduler gets the PodGroup its scheduler reads
// (minMember = numWorkers, minResources of all workers, owned by the TrainingJob) and pods that name it.
// Before the scheduler's CRDs are installed, the job stays Pending and says what to install; once they
// are, it goes on by itself.
func TestGangSchedulingPodGroups(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	startControllerManager(t)
	startOperator(t, ns)
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "training-high"}, Value: 1000}
	if err := env.Client.Create(ctx, pc); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cases := []struct {
		name, label, annotation, scheduler string
		gvk                                schema.GroupVersionKind
		tj                                 *mlv1.TrainingJob
		wantSpec                           map[string]any
	}{
		{
			name:       "volcano",
			label:      "",
			annotation: builders.VolcanoGroupAnnotation,
			scheduler:  "volcano",
			gvk:        builders.VolcanoPodGroup,
			tj: tjtest.NewTJ(ns, "vc").Workers(3).GPUs(2).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Scheduling = &mlv1.SchedulingSpec{SchedulerName: "volcano", Priority: "training-high"}
			}).Obj(),
			wantSpec: map[string]any{"minMember": int64(3), "minResources": map[string]any{"nvidia.com/gpu": "6"},
				"priorityClassName": "training-high"},
		},
		{
			name:       "coscheduling",
			label:      builders.CoschedulingGroupLabel,
			annotation: "",
			scheduler:  "scheduler-plugins-scheduler",
			gvk:        builders.CoschedulingPodGroup,
			tj: tjtest.NewTJ(ns, "co").Workers(2).GPUs(1).With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Scheduling = &mlv1.SchedulingSpec{Gang: &mlv1.GangScheduling{Scheduler: mlv1.GangCoscheduling,
					ScheduleTimeoutSeconds: ptr.To[int32](60)}}
			}).Obj(),
			wantSpec: map[string]any{"minMember": int64(2), "minResources": map[string]any{"nvidia.com/gpu": "2"},
				"scheduleTimeoutSeconds": int64(60)},
		},
	}
	for _, tc := range cases {
		if err := env.Client.Create(ctx, tc.tj); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range cases {
		eventually(t, tc.name+": Pending, naming the CRDs to install", func(ctx context.Context) error {
			got := &mlv1.TrainingJob{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tc.tj), got); err != nil {
				return err
			}
			c := condition(got, mlv1.ConditionCreated)
			install := "install " + string(builders.GangScheduler(tc.tj)) + "'s CRDs"
			if got.Status.State != mlv1.StatePending || c.Reason != "CreateRejected" || !strings.Contains(c.Message, install) {
				return fmt.Errorf("state %s, Created %+v", got.Status.State, c)
			}
			return nil
		})
	}
	installCRDs(t, "testdata/podgroup-crds.yaml")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pg := &unstructured.Unstructured{}
			pg.SetGroupVersionKind(tc.gvk)
			eventually(t, "the PodGroup", func(ctx context.Context) error {
				return env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: names.PodGroupName(tc.tj)}, pg)
			})
			spec, _, _ := unstructured.NestedMap(pg.Object, "spec")
			if fmt.Sprint(spec) != fmt.Sprint(tc.wantSpec) {
				t.Errorf("spec = %v, want %v", spec, tc.wantSpec)
			}
			if owners := pg.GetOwnerReferences(); len(owners) != 1 || owners[0].Name != tc.tj.Name {
				t.Errorf("owners = %+v, want the TrainingJob", owners)
			}
			pod := workerPods(t, tc.tj, int(tc.tj.Spec.NumWorkers))[0]
			type placement struct {
				SchedulerName, GroupLabel, GroupAnnotation string
			}
			got := placement{
				SchedulerName:   pod.Spec.SchedulerName,
				GroupLabel:      pod.Labels[tc.label],
				GroupAnnotation: pod.Annotations[tc.annotation],
			}
			want := placement{SchedulerName: tc.scheduler}
			if tc.label != "" {
				want.GroupLabel = pg.GetName()
			} else {
				want.GroupAnnotation = pg.GetName()
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("pod schedulerName, group label, group annotation (-want +got):\n%s", diff)
			}
		})
	}
}

// installCRDs creates the CRDs of a YAML file and waits until they are served.
func installCRDs(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			break
		}
		if len(obj.Object) == 0 {
			continue
		}
		if err := env.Client.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
		eventually(t, "CRD "+obj.GetName()+" established", func(ctx context.Context) error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
			return fmt.Errorf("conditions %v", conds)
		})
	}
}
