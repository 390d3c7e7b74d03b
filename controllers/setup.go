package controllers

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// NewScheme returns the scheme of the operator: the built-in types and the TrainingJob API.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err) // registering static types cannot fail
	}
	if err := mlv1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := kueue.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// CacheOptions limits the manager's informers to the watched namespaces (all when empty) and to the
// operator's objects, slimmed to what the controllers read (slimPod and others). It caches Kueue's
// Workloads only where cfg's discovery shows Kueue's API.
func CacheOptions(cfg *rest.Config, namespaces []string) cache.Options {
	// A fixed, valid requirement cannot fail.
	owned, _ := labels.NewRequirement(names.NameLabel, selection.Exists, nil)
	sel := labels.NewSelector().Add(*owned)
	opts := cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}:       {Label: sel, Transform: slimPod},
		&batchv1.Job{}:      {Label: sel, Transform: slimJob},
		&corev1.Service{}:   {Label: sel, Transform: slimService},
		&corev1.ConfigMap{}: {Label: sel, Transform: slimConfigMap},
		// Checkpoint claims the operator created; users' own claims are not held.
		&corev1.PersistentVolumeClaim{}: {Label: sel},
		&mlv1.TrainingJob{}:             {Transform: defaultTrainingJob},
	}}
	if KueueServed(cfg) {
		opts.ByObject[&kueue.Workload{}] = cache.ByObject{Label: sel}
	}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// KueueServed reports whether the cluster serves Kueue's Workload API (kueue.x-k8s.io/v1beta2), so
// the operator caches and watches Workloads. Kueue installed later is seen at the next start; until
// then queued jobs are rechecked every queueRecheck.
func KueueServed(cfg *rest.Config) bool {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false
	}
	list, err := dc.ServerResourcesForGroupVersion(kueue.SchemeGroupVersion.String())
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == "workloads" {
			return true
		}
	}
	return false
}

// defaultTrainingJob caches a TrainingJob defaulted (mlv1.TrainingJob.Default), so cache readers
// outside a reconcile see the defaults too. It drops managedFields and kubectl's
// last-applied-configuration, which are never read.
func defaultTrainingJob(obj any) (any, error) {
	if tj, ok := obj.(*mlv1.TrainingJob); ok {
		tj.ManagedFields = nil
		delete(tj.Annotations, corev1.LastAppliedConfigAnnotation)
		tj.Default()
	}
	return obj, nil
}

// slimPod keeps only what the controllers read of a worker pod: name, times, finalizers, controller
// owner reference, operatorLabels, node and status. The spec, annotations and other labels go; pods
// are never updated from the cache, only deleted or patched.
func slimPod(obj any) (any, error) {
	if p, ok := obj.(*corev1.Pod); ok {
		var owners []metav1.OwnerReference
		if ref := metav1.GetControllerOf(p); ref != nil {
			owners = []metav1.OwnerReference{*ref}
		}
		p.ObjectMeta = metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
			DeletionGracePeriodSeconds: p.DeletionGracePeriodSeconds, Finalizers: p.Finalizers, Labels: operatorLabels(p.Labels),
			OwnerReferences: owners}
		p.Spec = corev1.PodSpec{NodeName: p.Spec.NodeName, InitContainers: agentTokenOnly(p.Spec.InitContainers),
			Containers: podUIDOnly(p.Spec.Containers)}
	}
	return obj, nil
}

// agentTokenOnly keeps only the checkpoint agent's token (agentapi.TokenEnv) of a pod's init
// containers, its value or where it is read from. The CheckpointController sends a value back, since
// a running pod's token works whatever key the operator holds now.
func agentTokenOnly(cs []corev1.Container) []corev1.Container {
	return envOnly(cs, names.AgentContainerName, agentapi.TokenEnv, true)
}

// podUIDOnly keeps only the trainer's controlapi.PodUIDEnv, without its value, of a pod's
// containers; it tells tokenPodUID whether the supervisor uses per-pod tokens.
func podUIDOnly(cs []corev1.Container) []corev1.Container {
	return envOnly(cs, names.ContainerName, controlapi.PodUIDEnv, false)
}

// envOnly returns the container name of cs with only its variable env, value (or its source)
// included when keepValue; nil when it has none.
func envOnly(cs []corev1.Container, name, env string, keepValue bool) []corev1.Container {
	for _, c := range cs {
		if c.Name != name {
			continue
		}
		for _, e := range c.Env {
			if e.Name == env {
				kept := corev1.EnvVar{Name: e.Name}
				if keepValue {
					kept.Value, kept.ValueFrom = e.Value, e.ValueFrom
				}
				return []corev1.Container{{Name: c.Name, Env: []corev1.EnvVar{kept}}}
			}
		}
	}
	return nil
}

// operatorLabels returns the pod labels the controllers select and read by: the job, attempt, rank
// and controlling Job.
func operatorLabels(l map[string]string) map[string]string {
	out := make(map[string]string, 5)
	for _, k := range []string{names.NameLabel, names.ManagedByLabel, names.AttemptLabel, names.RankLabel, names.ControllerUIDLabel} {
		if v, ok := l[k]; ok {
			out[k] = v
		}
	}
	return out
}

// slimJob keeps only a Job's size, completion mode and suspend. The controllers compare the spec
// hash annotation and change a Job only by merge patches of suspend, parallelism and completions.
func slimJob(obj any) (any, error) {
	if j, ok := obj.(*batchv1.Job); ok {
		j.ManagedFields = nil
		j.Spec = batchv1.JobSpec{Parallelism: j.Spec.Parallelism, Completions: j.Spec.Completions,
			CompletionMode: j.Spec.CompletionMode, Suspend: j.Spec.Suspend}
	}
	return obj, nil
}

// slimService keeps what ensureService compares (ports, selector) and what the owner watch reads
// (labels, owner). An update rereads the whole Service.
func slimService(obj any) (any, error) {
	if s, ok := obj.(*corev1.Service); ok {
		s.ObjectMeta = metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, UID: s.UID, ResourceVersion: s.ResourceVersion,
			CreationTimestamp: s.CreationTimestamp, DeletionTimestamp: s.DeletionTimestamp, Labels: s.Labels,
			OwnerReferences: s.OwnerReferences}
		s.Spec = corev1.ServiceSpec{Ports: s.Spec.Ports, Selector: s.Spec.Selector}
		s.Status = corev1.ServiceStatus{}
	}
	return obj, nil
}

// slimConfigMap caches a job's ConfigMap with its config.json replaced by configDigest. The
// JobController only compares it with the one it builds, and updates the ConfigMap with the whole
// file or patches other keys.
func slimConfigMap(obj any) (any, error) {
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		cm.ManagedFields = nil
		if v, ok := cm.Data[names.ConfigFileName]; ok {
			cm.Data[names.ConfigFileName] = configDigest(v)
		}
	}
	return obj, nil
}

// configDigest is how the cache holds a config.json.
func configDigest(config string) string {
	sum := sha256.Sum256([]byte(config))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Config configures the controllers.
type Config struct {
	// Builders shape the built objects.
	Builders builders.Options
	// Namespaces are those the manager watches (its cache's); empty: all.
	Namespaces []string
	// ProgressInterval is the time between two scrapes of a job's rank 0 (default 5 s).
	ProgressInterval time.Duration
	// ScrapeTimeout bounds one scrape (default 2 s).
	ScrapeTimeout time.Duration
	// ScrapeWorkers is how many scrapes run at once, over all jobs (default 16): the
	// StatusController's and the CheckpointController's concurrent reconciles.
	ScrapeWorkers int
	// Namespace is the operator's own (default DefaultNamespace): the QueueController's ConfigMap lives there.
	Namespace string
	// ClusterName names the cluster the operator runs in, in each job's status.clusterName (on a MultiKueue
	// worker, what the manager shows); empty: none.
	ClusterName string
	// JobWorkers is how many TrainingJobs the JobController reconciles at once (default 10). Its
	// reconciles mostly wait on the API server.
	JobWorkers int
	// MLflowCredentials is the operator-wide Secret with the tracking server's credentials (keys
	// MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and _PASSWORD) for jobs that name none; the
	// default server itself is Builders.MLflowTrackingURI.
	MLflowCredentials client.ObjectKey
	// MLflowTimeout bounds one reconcile's calls to a tracking server (default 5 s); a tracked job's
	// first workers wait at most that long for the run. MLflowRetry is the wait after a failure
	// (default 30 s).
	MLflowTimeout, MLflowRetry time.Duration
	// StatusWriteQPS is the rate of routine status writes over all jobs (progress, worker counts,
	// goodput percent); urgent ones (state changes) go at once (writeBudget). 0 means
	// DefaultStatusWriteQPS; negative, no budget.
	StatusWriteQPS float64
	// CheckpointMountRoots are host directories process nodes mount volumes from (the local stack's data
	// root): an agent there names mounted checkpoints under them, not under the worker's mount path. Empty
	// on a cluster: a report must name builders.CheckpointMountPath.
	CheckpointMountRoots []string
}

// DefaultNamespace is the operator's namespace where it cannot tell (outside a pod), as deploy/ installs it.
const DefaultNamespace = "trainingjob-system"

// Setup takes over the status fields that moved to another controller (takeOverMovedFields), then
// registers the controllers and the trainingjob_total collector with mgr.
func Setup(mgr ctrl.Manager, cfg Config) error {
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("a clientset for the ranks' logs: %w", err)
	}
	w := wiring{mgr: mgr, cfg: cfg, logs: ClientsetLogs{Clientset: cs},
		recorder: limitedRecorder{mgr.GetEventRecorder(eventReporter)},
		interval: orDefault(cfg.ProgressInterval, 5*time.Second), timeout: orDefault(cfg.ScrapeTimeout, 2*time.Second),
		writes: &statusWrites{budget: newWriteBudget(orDefaultQPS(cfg.StatusWriteQPS), clock.RealClock{})}}
	w.http = endpointClient(w.interval)
	if err := takeOverMovedFields(mgr, cfg.Namespaces); err != nil {
		return err
	}
	jc, sc := w.jobReconciler(), w.statusReconciler()
	// Goodput's checkpoint time, as rank 0 reports it.
	jc.checkpointSeconds = sc.checkpointSeconds
	jc.restartSupport = &inPlaceSupport{served: inPlaceRestartServed(mgr), reader: mgr.GetAPIReader()}
	controllers := []struct {
		name  string
		setup func(ctrl.Manager) error
	}{
		{name: "job", setup: jc.SetupWithManager},
		{name: "status", setup: sc.SetupWithManager},
		{name: "checkpoint", setup: w.checkpointReconciler().SetupWithManager},
		{name: "tracking", setup: w.trackingReconciler().SetupWithManager},
	}
	if KueueServed(mgr.GetConfig()) {
		q := &QueueReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Namespace: cmp.Or(cfg.Namespace, DefaultNamespace)}
		controllers = append(controllers, struct {
			name  string
			setup func(ctrl.Manager) error
		}{name: queueController, setup: q.SetupWithManager})
	}
	for _, c := range controllers {
		if err := c.setup(mgr); err != nil {
			return fmt.Errorf("setting up the %s controller: %w", c.name, err)
		}
	}
	metrics.SetStateReader(mgr.GetClient())
	return nil
}

// wiring is what the controllers Setup registers share: the manager, the config, the log and
// endpoint clients, the event recorder and the pace of rank 0's reads.
type wiring struct {
	mgr               ctrl.Manager
	cfg               Config
	logs              LogReader
	recorder          events.EventRecorder
	http              *http.Client
	interval, timeout time.Duration
	writes            *statusWrites
}

func (w wiring) jobReconciler() *JobReconciler {
	return &JobReconciler{writes: w.writes, Client: w.mgr.GetClient(), APIReader: w.mgr.GetAPIReader(), Scheme: w.mgr.GetScheme(),
		Recorder: w.recorder, Clock: clock.RealClock{}, Options: w.cfg.Builders, Workers: orDefaultInt(w.cfg.JobWorkers, 10),
		ClusterName: w.cfg.ClusterName,
		// Worker counts and reasons are written at most as often as progress.
		Logs: w.logs, DetailInterval: w.interval,
		Control: &controlapi.Client{HTTP: w.http, Timeout: w.timeout}}
}

func (w wiring) statusReconciler() *StatusReconciler {
	return &StatusReconciler{writes: w.writes, Client: w.mgr.GetClient(), Clock: clock.RealClock{}, Interval: w.interval, Timeout: w.timeout,
		Workers: w.scrapeWorkers(), HTTP: w.http, Logs: w.logs, Recorder: w.recorder}
}

func (w wiring) checkpointReconciler() *CheckpointReconciler {
	return &CheckpointReconciler{writes: w.writes, Client: w.mgr.GetClient(), APIReader: w.mgr.GetAPIReader(), Recorder: w.recorder,
		Clock: clock.RealClock{}, Agent: &agentapi.Client{HTTP: w.http, Timeout: w.timeout}, Interval: w.interval,
		Workers: w.scrapeWorkers(), TokenKey: w.cfg.Builders.AgentTokenKey, MountRoots: w.cfg.CheckpointMountRoots}
}

func (w wiring) trackingReconciler() *TrackingReconciler {
	return &TrackingReconciler{writes: w.writes, Client: w.mgr.GetClient(), APIReader: w.mgr.GetAPIReader(), Recorder: w.recorder,
		Clock: clock.RealClock{}, Options: w.cfg.Builders, Credentials: w.cfg.MLflowCredentials, HTTP: &http.Client{},
		Timeout: orDefault(w.cfg.MLflowTimeout, 5*time.Second), Retry: orDefault(w.cfg.MLflowRetry, 30*time.Second), Workers: 4}
}

// scrapeWorkers returns how many rank endpoint reads run at once in each of the StatusController
// and the CheckpointController.
func (w wiring) scrapeWorkers() int { return orDefaultInt(w.cfg.ScrapeWorkers, 16) }

func orDefaultInt(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}

func orDefaultQPS(qps float64) float64 {
	if qps == 0 {
		return DefaultStatusWriteQPS
	}
	return qps
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Leader election uses a Lease in the operator's namespace.
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=trainingjob-system,resources=leases,verbs=get;create;update
// +kubebuilder:rbac:groups="",namespace=trainingjob-system,resources=events,verbs=create;patch
// The key of the checkpoint agents' tokens is a Secret in the operator's namespace (cmd/manager
// gets it, or creates it when missing).
// +kubebuilder:rbac:groups="",namespace=trainingjob-system,resources=secrets,resourceNames=trainingjob-agent-token-key,verbs=get
// +kubebuilder:rbac:groups="",namespace=trainingjob-system,resources=secrets,verbs=create
