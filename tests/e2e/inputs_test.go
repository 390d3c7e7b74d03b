package e2e

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/inputs/hubtest"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/node"
)

// withS3Dataset takes the dataset from s3://datasets/squad on the test's S3 server, with its keys.
func withS3Dataset(endpoint, uri string) func(*mlv1.TrainingJob) {
	return func(tj *mlv1.TrainingJob) {
		tj.Spec.Dataset = uri
		tj.Spec.Inputs = &mlv1.InputsSpec{Endpoint: endpoint, SecretRef: &corev1.LocalObjectReference{Name: "s3-keys"}}
	}
}

// TestInputsFetchedOnce: a dataset in a real S3 server (versitygw) is fetched by rank 0 into the job's
// input cache once: after a gang restart the second attempt reads nothing from the server (Reused), and
// the job completes with InputsReady and the bytes in its status.
func TestInputsFetchedOnce(t *testing.T) {
	ns, name := newNamespace(t), "inputs"
	gw, store := startS3(t, "datasets")
	// INPUTS_BYTES (make bench-inputs: 1 GiB) sizes train.json; the test's own 3 MiB keep make test quick.
	size := 3 << 20
	if v, err := strconv.Atoi(os.Getenv("INPUTS_BYTES")); err == nil && v > 0 {
		size = v
	}
	total := putDataset(t, store, map[string]int{"squad/train.json": size, "squad/dev.json": 1 << 20, "squad/vocab/words.txt": 4096})
	create(t, s3Keys(ns, "s3-keys", e2eSecretKey))
	start := time.Now()
	var seen []string // each InputsReady reason, with when it was first seen after the job's creation
	var firstRead int64
	create(t, claim(ns), trainerJob(ns, name, 2, 5, "--epoch-delay=300ms", "--fail-at=1:2:137").
		With(withPVCCheckpoints(3)).With(withS3Dataset(gw.Endpoint, "s3://datasets/squad")).Obj())
	var reasons []string
	eventually(t, 10*time.Minute, "Completed after a gang restart, the dataset reused", func() error {
		tj := getTJ(t, ns, name)
		if c := condition(tj, mlv1.ConditionInputsReady); c != nil && (len(reasons) == 0 || reasons[len(reasons)-1] != c.Reason) {
			reasons = append(reasons, c.Reason)
			seen = append(seen, fmt.Sprintf("%s at %.2fs", c.Reason, time.Since(start).Seconds()))
			if c.Reason == "Fetched" && len(tj.Status.Inputs) == 1 {
				firstRead = tj.Status.Inputs[0].FetchedBytes
			}
		}
		if tj.Status.State != mlv1.StateCompleted {
			return fmt.Errorf("state %s, attempt %d, InputsReady reasons %v", tj.Status.State, tj.Status.Attempt, reasons)
		}
		return nil
	})
	tj := getTJ(t, ns, name)
	type restarted struct {
		Restarts int32
		Inputs   int
	}
	gotRestarts := restarted{Restarts: tj.Status.RestartCount, Inputs: len(tj.Status.Inputs)}
	if diff := cmp.Diff(restarted{Restarts: 1, Inputs: 1}, gotRestarts); diff != "" {
		t.Fatalf("inputs %+v; want one restart, one input (-want +got):\n%s", tj.Status.Inputs, diff)
	}
	type input struct {
		Name, Source        string
		Bytes, FetchedBytes int64
		Files               int32
		Ready               bool
	}
	in := tj.Status.Inputs[0]
	gotInput := input{Name: in.Name, Source: in.Source, Bytes: in.Bytes, FetchedBytes: in.FetchedBytes, Files: in.Files,
		Ready: in.ReadyTime != nil}
	wantInput := input{Name: "dataset", Source: "s3://datasets/squad", Bytes: total, FetchedBytes: 0, Files: 3, Ready: true}
	if diff := cmp.Diff(wantInput, gotInput); diff != "" {
		t.Errorf("status.inputs %+v; want the dataset's %d bytes in 3 files, none read by the second attempt (-want +got):\n%s",
			in, total, diff)
	}
	if c := condition(tj, mlv1.ConditionInputsReady); c == nil || c.Status != metav1.ConditionTrue || c.Reason != "Reused" {
		t.Errorf("InputsReady %+v, want True/Reused", c)
	}
	if firstRead != total {
		t.Errorf("the first attempt read %d bytes, want all %d", firstRead, total)
	}
	if !containsInOrder(reasons, "Fetched", "Reused") {
		t.Errorf("InputsReady reasons %v, want Fetched (the first attempt) then Reused", reasons)
	}
	t.Logf("%d bytes, 2 ranks: InputsReady after the job's creation (polled every 100 ms): %s; "+
		"the first attempt read %d bytes, the restarted one %d", total, strings.Join(seen, ", "), firstRead, in.FetchedBytes)
}

// TestInputsFailure: a source that cannot be fetched (a bucket that does not exist, keys the server
// refuses) fails the run at once with InputsFailed naming it; no restart is spent on it.
func TestInputsFailure(t *testing.T) {
	ns := newNamespace(t)
	gw, _ := startS3(t, "datasets")
	create(t, s3Keys(ns, "s3-keys", e2eSecretKey), s3Keys(ns, "bad-keys", "wrong"))
	create(t, trainerJob(ns, "nobucket", 2, 3).With(withS3Dataset(gw.Endpoint, "s3://no-such-bucket/squad")).Obj(),
		trainerJob(ns, "badkeys", 2, 3).With(withS3Dataset(gw.Endpoint, "s3://datasets/squad")).With(func(tj *mlv1.TrainingJob) {
			tj.Spec.Inputs.SecretRef.Name = "bad-keys"
		}).Obj(),
		// Restarted in place, the fetcher would run again and again until the Job's backoffLimit.
		trainerJob(ns, "inplace", 2, 3).BackoffLimit(100, mlv1.RestartOnFailure).
			With(withS3Dataset(gw.Endpoint, "s3://no-such-bucket/squad")).Obj())
	for name, want := range map[string]string{"nobucket": "NoSuchBucket", "badkeys": "403", "inplace": "NoSuchBucket"} {
		eventually(t, 2*time.Minute, name+" Failed/InputsFailed", func() error {
			tj := getTJ(t, ns, name)
			c := condition(tj, mlv1.ConditionFailed)
			if tj.Status.State != mlv1.StateFailed || c == nil || c.Reason != "InputsFailed" || !strings.Contains(c.Message, want) {
				return fmt.Errorf("state %s, Failed %+v", tj.Status.State, c)
			}
			if ready := condition(tj, mlv1.ConditionInputsReady); ready == nil || ready.Reason != "InputsFailed" {
				return fmt.Errorf("InputsReady %+v", ready)
			}
			if tj.Status.RestartCount != 0 {
				return fmt.Errorf("%d restarts spent", tj.Status.RestartCount)
			}
			return failedEventSays(tj, "InputsFailed")
		})
	}
}

// failedEventSays: the job's Failed transition event is recorded and its note holds want.
func failedEventSays(tj *mlv1.TrainingJob, want string) error {
	events := &eventsv1.EventList{}
	if err := stack.Client.List(ctx, events, client.InNamespace(tj.Namespace)); err != nil {
		return err
	}
	for _, e := range events.Items {
		if e.Regarding.Name == tj.Name && e.Reason == string(mlv1.StateFailed) && strings.Contains(e.Note, want) {
			return nil
		}
	}
	return fmt.Errorf("no Failed event saying %q yet", want)
}

func containsInOrder(got []string, want ...string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// putDataset uploads objects of zeros (key -> bytes) to the datasets bucket and returns their bytes together.
func putDataset(t *testing.T, store *checkpoint.S3Store, objects map[string]int) int64 {
	t.Helper()
	var total int64
	for k, n := range objects {
		if err := putZeros(store, k, n); err != nil {
			t.Fatal(err)
		}
		total += int64(n)
	}
	return total
}

// putZeros uploads n zero bytes as one object, read from a sparse file (a 1 GiB object is not held in
// memory).
func putZeros(store *checkpoint.S3Store, key string, n int) error {
	f, err := os.CreateTemp("", "inputs-*")
	if err != nil {
		return err
	}
	defer func() { _ = f.Close(); _ = os.Remove(f.Name()) }()
	if err := f.Truncate(int64(n)); err != nil {
		return err
	}
	_, err = store.Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("datasets"), Key: aws.String(key),
		Body: f, ContentLength: aws.Int64(int64(n))})
	return err
}

// TestInputsFromTheHub: a model from a hub (a local stand-in of the Hugging Face Hub's file API at
// inputs.hubEndpoint, with HF_TOKEN from the Secret) is fetched once into the cache; a repository the hub
// does not have fails the run with the hub's 404.
func TestInputsFromTheHub(t *testing.T) {
	ns := newNamespace(t)
	hub := &hubtest.Hub{Token: "hf_e2e", Repos: map[string]map[string]string{
		"models/google-bert/bert-tiny": {"config.json": `{"model_type": "bert"}`, "model.safetensors": strings.Repeat("w", 65536)}}}
	srv := httptest.NewServer(hub)
	t.Cleanup(srv.Close)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hf", Namespace: ns}, StringData: map[string]string{"HF_TOKEN": "hf_e2e"}})
	fromHub := func(name, model string) *mlv1.TrainingJob {
		return trainerJob(ns, name, 2, 2).With(func(tj *mlv1.TrainingJob) {
			tj.Spec.Model = model
			tj.Spec.Inputs = &mlv1.InputsSpec{HubEndpoint: srv.URL, SecretRef: &corev1.LocalObjectReference{Name: "hf"}}
		}).Obj()
	}
	create(t, fromHub("bert", "hf://google-bert/bert-tiny"), fromHub("missing", "hf://google-bert/no-such-model"))
	waitForState(t, ns, "bert", mlv1.StateCompleted, 2*time.Minute)
	in := getTJ(t, ns, "bert").Status.Inputs
	if len(in) != 1 || in[0].Name != "model" || in[0].Files != 2 || in[0].Bytes != 65536+22 || in[0].FetchedBytes != in[0].Bytes ||
		hub.Served.Load() != in[0].Bytes {
		t.Errorf("status.inputs %+v, hub served %d bytes; want the model's 2 files, read once", in, hub.Served.Load())
	}
	eventually(t, time.Minute, "missing Failed/InputsFailed with the hub's 404", func() error {
		tj := getTJ(t, ns, "missing")
		c := condition(tj, mlv1.ConditionFailed)
		if tj.Status.State != mlv1.StateFailed || c == nil || c.Reason != "InputsFailed" || !strings.Contains(c.Message, "404") {
			return fmt.Errorf("state %s, Failed %+v", tj.Status.State, c)
		}
		return nil
	})
}

// TestInputsCacheReadWriteManyUnsupported: two ranks need a ReadWriteMany input cache; a StorageClass whose
// driver supports only ReadWriteOnce refuses it. The job does not wait silently: InputsReady is False with
// the driver's ProvisioningFailed text and what to change, and a Warning event says so.
func TestInputsCacheReadWriteManyUnsupported(t *testing.T) {
	ns, name := newNamespace(t), "rwx-inputs"
	class := rwoOnlyClass(t, ns)
	create(t, trainerJob(ns, name, 2, 3).With(withS3Dataset("http://127.0.0.1:1", "s3://datasets/squad")).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Inputs.StorageClassName = ptr.To(class.Name)
	}).Obj())
	want := "access mode ReadWriteMany is not supported"
	eventually(t, time.Minute, "InputsReady False ProvisioningFailed, and a Warning event", func() error {
		tj := getTJ(t, ns, name)
		c := condition(tj, mlv1.ConditionInputsReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "ProvisioningFailed" || !strings.Contains(c.Message, want) ||
			!strings.Contains(c.Message, "inputs.storageClassName") {
			return fmt.Errorf("InputsReady %+v (state %s)", c, tj.Status.State)
		}
		events := &eventsv1.EventList{}
		if err := stack.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Regarding.Kind == "TrainingJob" && e.Type == corev1.EventTypeWarning && e.Reason == "ProvisioningFailed" &&
				strings.Contains(e.Note, "input cache") {
				return nil
			}
		}
		return fmt.Errorf("no Warning event on the TrainingJob names it")
	})
}

// TestInputsPerNodeCache: where the StorageClass offers no ReadWriteMany, inputs.cache PerNode keeps the
// dataset in the operator's node cache: no claim, and the bytes read from the server over the whole run,
// a gang restart included, are the dataset's once (the stack's nodes share one machine, so one node cache:
// the first rank fetches, the other ranks and the restarted attempt find it there).
func TestInputsPerNodeCache(t *testing.T) {
	ns, name := newNamespace(t), "pernode"
	gw, store := startS3(t, "datasets")
	data := map[string]int{"squad/train.json": 2 << 20, "squad/dev.json": 64 << 10}
	total := putDataset(t, store, data)
	create(t, s3Keys(ns, "s3-keys", e2eSecretKey))
	class := rwoOnlyClass(t, ns)
	create(t, claim(ns), trainerJob(ns, name, 3, 4, "--epoch-delay=300ms", "--fail-at=1:2:137").
		With(withPVCCheckpoints(3)).With(withS3Dataset(gw.Endpoint, "s3://datasets/squad")).With(func(tj *mlv1.TrainingJob) {
		tj.Spec.Inputs.StorageClassName = ptr.To(class.Name)
		tj.Spec.Inputs.Cache = mlv1.InputsCachePerNode
	}).Obj())
	eventually(t, 5*time.Minute, "Completed after a gang restart", func() error {
		tj := getTJ(t, ns, name)
		if tj.Status.State == mlv1.StateFailed {
			t.Fatalf("Failed: %+v", condition(tj, mlv1.ConditionFailed))
		}
		if tj.Status.State != mlv1.StateCompleted {
			return fmt.Errorf("state %s, attempt %d, InputsReady %+v", tj.Status.State, tj.Status.Attempt, condition(tj, mlv1.ConditionInputsReady))
		}
		return nil
	})
	tj := getTJ(t, ns, name)
	// Every run of every fetcher (a pod restarted in place runs its init containers again; its log keeps
	// every run's lines): the bytes each read from the server.
	runs, sum := fetcherReads(ns, name)
	type fetched struct {
		Restarts int32
		Fetchers int
		Bytes    int64
	}
	gotFetched := fetched{Restarts: tj.Status.RestartCount, Fetchers: len(runs), Bytes: sum}
	if diff := cmp.Diff(fetched{Restarts: 1, Fetchers: 6, Bytes: total}, gotFetched); diff != "" {
		t.Errorf("fetcher runs read %v; want one restart, 6 fetcher runs reading %d bytes in all (-want +got):\n%s", runs, total, diff)
	}
	if c := condition(tj, mlv1.ConditionInputsReady); c == nil || c.Status != metav1.ConditionTrue || len(tj.Status.Inputs) != 1 ||
		tj.Status.Inputs[0].Bytes != total {
		t.Errorf("InputsReady %+v, inputs %+v; want True with %d bytes", c, tj.Status.Inputs, total)
	}
	if err := stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-inputs"}, &corev1.PersistentVolumeClaim{}); err == nil {
		t.Error("a PerNode cache created the claim " + name + "-inputs")
	}
	dir := filepath.Join(stack.NodeCacheDir(), ns+"_"+name+"_"+string(tj.UID), "dataset", "train.json")
	if info, err := os.Stat(dir); err != nil || info.Size() != int64(data["squad/train.json"]) {
		t.Errorf("the node cache's copy: %v, %v", info, err)
	}
}

// TestInputsCacheGroup: the trials of a search (inputs.cacheGroup, as the Python client's optimize sets it)
// share each node's copy: two TrainingJobs of two workers each, started together, read the dataset from the
// server once in all (the stack's nodes share one node cache), and each has it all in its status.
func TestInputsCacheGroup(t *testing.T) {
	ns := newNamespace(t)
	gw, store := startS3(t, "datasets")
	total := putDataset(t, store, map[string]int{"squad/train.json": 1 << 20, "squad/dev.json": 64 << 10})
	create(t, s3Keys(ns, "s3-keys", e2eSecretKey))
	trials := []string{"trial-0", "trial-1"}
	for _, name := range trials {
		create(t, trainerJob(ns, name, 2, 2, "--epoch-delay=200ms").With(withS3Dataset(gw.Endpoint, "s3://datasets/squad")).
			With(func(tj *mlv1.TrainingJob) {
				tj.Spec.Inputs.Cache = mlv1.InputsCachePerNode
				tj.Spec.Inputs.CacheGroup = "study-1"
			}).Obj())
	}
	var uids []string
	for _, name := range trials {
		eventually(t, 5*time.Minute, name+" Completed", func() error {
			tj := getTJ(t, ns, name)
			if tj.Status.State == mlv1.StateFailed {
				t.Fatalf("%s Failed: %+v", name, condition(tj, mlv1.ConditionFailed))
			}
			if tj.Status.State != mlv1.StateCompleted {
				return fmt.Errorf("state %s, InputsReady %+v", tj.Status.State, condition(tj, mlv1.ConditionInputsReady))
			}
			return nil
		})
		tj := getTJ(t, ns, name)
		if len(tj.Status.Inputs) != 1 || tj.Status.Inputs[0].Bytes != total {
			t.Errorf("%s: inputs %+v; want the dataset's %d bytes", name, tj.Status.Inputs, total)
		}
		uids = append(uids, string(tj.UID))
	}
	var runs []int64
	var sum int64
	for _, name := range trials {
		r, n := fetcherReads(ns, name)
		runs, sum = append(runs, r...), sum+n
	}
	type fetched struct {
		Fetchers int
		Bytes    int64
	}
	if diff := cmp.Diff(fetched{Fetchers: 4, Bytes: total}, fetched{Fetchers: len(runs), Bytes: sum}); diff != "" {
		t.Errorf("fetcher runs read %v; want 4 runs reading the dataset's %d bytes once in all (-want +got):\n%s", runs, total, diff)
	}
	for _, uid := range uids {
		if _, err := os.Stat(filepath.Join(stack.NodeCacheDir(), ns+"_trial-0_"+uid)); err == nil {
			t.Errorf("a trial has a directory of its own beside the group's")
		}
	}
}

// fetcherReads returns the bytes each run of a job's fetchers read from the source (a pod restarted in place
// runs its init containers again; its log keeps every run's lines), and their sum.
func fetcherReads(ns, name string) (runs []int64, sum int64) {
	logs := node.AllLogs(stack.DataRoot, ns, name+"-worker-*", names.InputsContainerName)
	for _, m := range fetcherRead.FindAllStringSubmatch(logs, -1) {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		runs, sum = append(runs, n), sum+n
	}
	return runs, sum
}

var fetcherRead = regexp.MustCompile(`bytes in [0-9]+ files, ([0-9]+) read in`)
