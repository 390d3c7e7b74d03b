package builders_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestInputsInThePod: where each kind of source reaches the workers, and what the fetcher gets.
func TestInputsInThePod(t *testing.T) {
	for _, tc := range []struct {
		name, model, dataset string
		wantEnv              map[string]string
		wantVolumes          []string
		wantFetch            []string // the fetcher's source arguments; nil: no fetcher
		wantClaim            bool
	}{
		{name: "plain names", model: "cnn", dataset: "mnist", wantEnv: map[string]string{}, wantVolumes: nil, wantFetch: nil, wantClaim: false},
		{
			name:        "a claim and an export, mounted",
			model:       "pvc://models/bert",
			dataset:     "nfs://10.0.0.5/exports/squad",
			wantEnv:     map[string]string{"MODEL_DIR": "/inputs/model/bert", "DATASET_DIR": "/inputs/dataset"},
			wantVolumes: []string{"model-source", "dataset-source"},
			wantFetch:   nil,
			wantClaim:   false,
		},
		{
			name:        "s3 and the hub, fetched",
			model:       "hf://google-bert/bert-base-uncased",
			dataset:     "s3://datasets/squad",
			wantEnv:     map[string]string{"MODEL_DIR": "/inputs/cache/model", "DATASET_DIR": "/inputs/cache/dataset"},
			wantVolumes: []string{"inputs-cache"},
			wantFetch:   []string{"--model=hf://google-bert/bert-base-uncased", "--dataset=s3://datasets/squad"},
			wantClaim:   true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "a").With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Model, tj.Spec.Dataset = tc.model, tc.dataset
				tj.Spec.Inputs = &mlv1.InputsSpec{SecretRef: &corev1.LocalObjectReference{Name: "keys"}, Endpoint: "http://s3:9000"}
			}).Obj()
			spec := builders.Job(tj, builders.Options{}).Spec.Template.Spec
			env := map[string]string{}
			for _, e := range spec.Containers[0].Env {
				if e.Name == "MODEL_DIR" || e.Name == "DATASET_DIR" {
					env[e.Name] = e.Value
				}
			}
			if diff := cmp.Diff(tc.wantEnv, env); diff != "" {
				t.Errorf("trainer env (-want +got):\n%s", diff)
			}
			for _, v := range tc.wantVolumes {
				i := slices.IndexFunc(spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == v })
				if i < 0 || !spec.Containers[0].VolumeMounts[i].ReadOnly {
					t.Errorf("the trainer does not mount %s read-only", v)
				}
			}
			i := slices.IndexFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == names.InputsContainerName })
			if (i >= 0) != (tc.wantFetch != nil) {
				t.Fatalf("fetcher present %v, want %v", i >= 0, tc.wantFetch != nil)
			}
			if i >= 0 {
				f := spec.InitContainers[i]
				for _, a := range tc.wantFetch {
					if !slices.Contains(f.Args, a) {
						t.Errorf("fetcher args %v lack %s", f.Args, a)
					}
				}
				secretKeys := map[string]string{}
				for _, e := range f.Env {
					if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
						secretKeys[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
					}
				}
				want := map[string]string{"AWS_ACCESS_KEY_ID": "keys/AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY": "keys/AWS_SECRET_ACCESS_KEY",
					"AWS_SESSION_TOKEN": "keys/AWS_SESSION_TOKEN", "HF_TOKEN": "keys/HF_TOKEN"}
				if diff := cmp.Diff(want, secretKeys); diff != "" || len(f.EnvFrom) != 0 || len(spec.Containers[0].EnvFrom) != 0 {
					t.Errorf("the fetcher gets the keys it reads, and only it (-want +got):\n%s\nfetcher envFrom %v, trainer envFrom %v",
						diff, f.EnvFrom, spec.Containers[0].EnvFrom)
				}
				if !slices.Contains(f.Args, "--max-bytes=53687091200") || !slices.Contains(f.Args, "--budget-name=inputs.cacheSize (default 50Gi)") {
					t.Errorf("fetcher args %v lack the budget of the default inputs.cacheSize", f.Args)
				}
			}
			claim := builders.InputsCacheClaim(tj)
			if tc.wantClaim && (claim.Name != "a-inputs" || claim.Spec.AccessModes[0] != corev1.ReadWriteMany ||
				claim.Spec.Resources.Requests.Storage().String() != "50Gi") {
				t.Errorf("input cache %s %v %v; want a-inputs, ReadWriteMany, 50Gi", claim.Name, claim.Spec.AccessModes, claim.Spec.Resources.Requests)
			}
		})
	}
}

// TestInputsCache: where fetched sources are kept, chosen by inputs.cache or the operator's default, is
// what the fetcher writes and the trainer reads.
func TestInputsCache(t *testing.T) {
	perNode := builders.Options{InputsNodeCacheDir: "/var/lib/tj-inputs", InputsNodeCacheMaxSize: ptr.To(resource.MustParse("20Gi"))}
	type mounts struct {
		Volume                    corev1.VolumeSource
		Fetcher, Trainer          corev1.VolumeMount
		Dir, Budget               string
		PerNode, RunAsUserDefault bool
	}
	claim := corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "a-inputs"}}
	// PerNode: the pod's volume is the job's own directory on the node, never the whole cache.
	node := corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
		Path: "/var/lib/tj-inputs/ml_a_uid-1", Type: ptr.To(corev1.HostPathDirectoryOrCreate),
	}}
	shared := mounts{Volume: claim, Fetcher: corev1.VolumeMount{Name: "inputs-cache", MountPath: "/inputs/cache"},
		Trainer: corev1.VolumeMount{Name: "inputs-cache", MountPath: "/inputs/cache", ReadOnly: true},
		Dir:     "/inputs/cache", RunAsUserDefault: true, Budget: "inputs.cacheSize 30Gi"}
	onNode := mounts{Volume: node, Fetcher: corev1.VolumeMount{Name: "inputs-cache", MountPath: "/inputs/cache"},
		Trainer: corev1.VolumeMount{Name: "inputs-cache", MountPath: "/inputs/cache", ReadOnly: true},
		Dir:     "/inputs/cache", PerNode: true, Budget: "the operator's node cache limit per job (--inputs-node-cache-max-size) 20Gi"}
	for _, tc := range []struct {
		name  string
		cache mlv1.InputsCache
		opts  builders.Options
		want  mounts
	}{
		{name: "unset: shared", cache: "", opts: perNode, want: shared},
		{name: "PerNode", cache: mlv1.InputsCachePerNode, opts: perNode, want: onNode},
		{name: "unset, the operator's default PerNode", cache: "", opts: withCache(perNode, mlv1.InputsCachePerNode), want: onNode},
		{
			name:  "Shared over the operator's default",
			cache: mlv1.InputsCacheShared,
			opts:  withCache(perNode, mlv1.InputsCachePerNode),
			want:  shared,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "a").Workers(4).With(func(tj *mlv1.TrainingJob) {
				tj.UID = "uid-1"
				tj.Spec.Dataset = "s3://datasets/squad"
				tj.Spec.SecurityContext = &mlv1.WorkerSecurityContext{RunAsUser: ptr.To(int64(1000))}
				tj.Spec.Inputs = &mlv1.InputsSpec{Cache: tc.cache, CacheSize: ptr.To(resource.MustParse("30Gi"))}
			}).Obj()
			spec := builders.Job(tj, tc.opts).Spec.Template.Spec
			var got mounts
			for _, v := range spec.Volumes {
				if v.Name == "inputs-cache" {
					got.Volume = v.VolumeSource
				}
			}
			trainerMounts := spec.Containers[0].VolumeMounts
			got.Trainer = trainerMounts[slices.IndexFunc(trainerMounts, func(m corev1.VolumeMount) bool { return m.Name == "inputs-cache" })]
			f := spec.InitContainers[slices.IndexFunc(spec.InitContainers, func(c corev1.Container) bool {
				return c.Name == names.InputsContainerName
			})]
			got.Fetcher = f.VolumeMounts[0]
			for _, a := range f.Args {
				if v, ok := strings.CutPrefix(a, "--dir="); ok {
					got.Dir = v
				}
				if v, ok := strings.CutPrefix(a, "--budget-name="); ok {
					got.Budget = v
				}
				got.PerNode = got.PerNode || a == "--per-node"
			}
			got.RunAsUserDefault = ptr.Deref(f.SecurityContext.RunAsUser, -1) == 1000
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("input cache (-want +got):\n%s", diff)
			}
			if got := builders.SharedInputsCache(tj, tc.opts); got != !tc.want.PerNode {
				t.Errorf("SharedInputsCache = %v, want %v", got, !tc.want.PerNode)
			}
		})
	}
}

func withCache(o builders.Options, c mlv1.InputsCache) builders.Options {
	o.InputsCache = c
	return o
}

// TestNodeCacheKey: a job has its own node directory; the jobs of an inputs.cacheGroup share the group's
// only where the fetched bytes and who may read them are the same.
func TestNodeCacheKey(t *testing.T) {
	job := func(name, uid, group string, edit func(*mlv1.TrainingJob)) *mlv1.TrainingJob {
		return tjtest.NewTJ("ml", name).With(func(tj *mlv1.TrainingJob) {
			tj.UID = types.UID(uid)
			tj.Spec.Model = "hf://google-bert/bert-base-uncased"
			tj.Spec.Dataset = "s3://datasets/squad"
			tj.Spec.Inputs = &mlv1.InputsSpec{Cache: mlv1.InputsCachePerNode, CacheGroup: group, Endpoint: "http://minio:9000",
				SecretRef: &corev1.LocalObjectReference{Name: "keys"}}
			if edit != nil {
				edit(tj)
			}
		}).Obj()
	}
	trial0 := builders.NodeCacheKey(job("trial-0", "uid-0", "study", nil))
	for _, tc := range []struct {
		name      string
		job       *mlv1.TrainingJob
		wantKey   string // "" : not checked
		wantShare bool   // the same directory as trial-0's
	}{
		{name: "no group: the job's own", job: job("a", "uid-1", "", nil), wantKey: "ml_a_uid-1"},
		{name: "another trial of the group", job: job("trial-1", "uid-1", "study", nil), wantShare: true},
		{name: "a plain name model changes nothing", job: job("trial-2", "uid-2", "study", func(tj *mlv1.TrainingJob) {
			tj.Spec.Hyperparameters = &mlv1.Hyperparameters{Epochs: ptr.To(int32(3))}
		}), wantShare: true},
		{name: "another group", job: job("trial-3", "uid-3", "other", nil)},
		{name: "another dataset", job: job("trial-4", "uid-4", "study", func(tj *mlv1.TrainingJob) {
			tj.Spec.Dataset = "s3://datasets/squad-v2"
		})},
		{name: "another Secret", job: job("trial-5", "uid-5", "study", func(tj *mlv1.TrainingJob) {
			tj.Spec.Inputs.SecretRef = nil
		})},
		{name: "another endpoint", job: job("trial-6", "uid-6", "study", func(tj *mlv1.TrainingJob) {
			tj.Spec.Inputs.Endpoint = "http://evil:9000"
		})},
		{name: "another ServiceAccount", job: job("trial-8", "uid-8", "study", func(tj *mlv1.TrainingJob) {
			tj.Spec.WorkerPod = &mlv1.WorkerPodSpec{ServiceAccountName: "no-bucket-access"}
		})},
		{name: "another namespace", job: job("trial-7", "uid-7", "study", func(tj *mlv1.TrainingJob) { tj.Namespace = "ml2" })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := builders.NodeCacheKey(tc.job)
			if tc.wantKey != "" && got != tc.wantKey {
				t.Errorf("NodeCacheKey = %q, want %q", got, tc.wantKey)
			}
			if share := got == trial0; share != tc.wantShare {
				t.Errorf("NodeCacheKey = %q beside trial-0's %q: shared %v, want %v", got, trial0, share, tc.wantShare)
			}
			if g := tc.job.Spec.Inputs.CacheGroup; g != "" && !strings.HasPrefix(got, tc.job.Namespace+"_"+g+"_") {
				t.Errorf("NodeCacheKey = %q, want NAMESPACE_GROUP_HASH", got)
			}
		})
	}
}
