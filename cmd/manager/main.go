// Command manager runs the trainingjob-operator: the TrainingJob controllers, health probes and the
// Prometheus metrics endpoint.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking/mlflow"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

type config struct {
	metricsAddr, probeAddr string
	metricsInsecureHTTP    bool
	metricsCertDir         string
	pprofAddr              string
	leaderElect            bool
	leaderElectionNS       string
	namespaces             string
	clusterName            string
	checkpointMountRoot    string
	kubeconfig             string
	images                 map[mlv1.Framework]*string
	progressInterval       time.Duration
	scrapeTimeout          time.Duration
	scrapeWorkers          int
	jobWorkers             int
	qps                    float64
	burst                  int
	agentImage             string
	agentCommand           string
	supervisorCommand      string
	agentInterval          time.Duration
	agentTokenKeyFile      string
	checkpointStorage      string
	checkpointClaimSize    string
	checkpointStorageClass string
	gpuResource            string
	mlflowURI              string
	mlflowCredentials      string
	mlflowTimeout          time.Duration
	mlflowRetry            time.Duration
	workerDefaults         string
	inputsCache            string
	inputsNodeCacheDir     string
	inputsNodeCacheMax     string
	goodputInterval        time.Duration
	statusWriteQPS         float64
}

func parseFlags(args []string) (config, zap.Options) {
	fs := flag.NewFlagSet("manager", flag.ExitOnError)
	c := config{images: map[mlv1.Framework]*string{}}
	fs.StringVar(&c.metricsAddr, "metrics-bind-address", ":8443",
		"address of the Prometheus metrics endpoint (HTTPS; a scraper needs a token allowed to get /metrics, "+
			"as the metrics-reader ClusterRole allows); 0 disables it")
	fs.BoolVar(&c.metricsInsecureHTTP, "metrics-insecure-http", false,
		"serve the metrics over plain HTTP to anyone who reaches the port: no TLS, no authentication, no authorization")
	fs.StringVar(&c.metricsCertDir, "metrics-cert-dir", "",
		"directory of the metrics endpoint's tls.crt and tls.key (a mounted kubernetes.io/tls Secret), reloaded when they change; "+
			"empty: a self-signed certificate")
	fs.StringVar(&c.probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz probes")
	fs.StringVar(&c.pprofAddr, "pprof-bind-address", "0", "address of Go's /debug/pprof profiles; 0 disables them")
	fs.BoolVar(&c.leaderElect, "leader-elect", false, "elect a leader so that only one replica reconciles")
	fs.StringVar(&c.leaderElectionNS, "leader-election-namespace", "", "namespace of the leader-election lease (default: the pod's)")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "path to a kubeconfig (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fs.StringVar(&c.checkpointMountRoot, "checkpoint-mount-root", "", "for process nodes only (the local stack): the host "+
		"directory they mount volumes from, under which their checkpoint agents name mounted checkpoints; empty on a cluster")
	fs.StringVar(&c.clusterName, "cluster-name", "", "this cluster's name in each job's status.clusterName (on a MultiKueue worker: "+
		"the name the manager shows); empty: none")
	fs.StringVar(&c.namespaces, "watch-namespaces", "", "comma-separated namespaces to watch; empty watches all")
	fs.DurationVar(&c.progressInterval, "progress-interval", 5*time.Second,
		"time between two reads of a running job's rank-0 progress (monitoring.scrapeIntervalSeconds overrides it)")
	fs.DurationVar(&c.scrapeTimeout, "scrape-timeout", 2*time.Second, "time limit of one read of rank 0's progress")
	fs.IntVar(&c.scrapeWorkers, "scrape-workers", 16,
		"reads of rank-0 progress and of checkpoint agents that may run at once, over all jobs "+
			"(the status and checkpoint controllers' concurrent reconciles)")
	fs.IntVar(&c.jobWorkers, "max-concurrent-reconciles", 10,
		"TrainingJobs the job controller reconciles at once (its reconciles mostly wait on the API server)")
	fs.Float64Var(&c.qps, "kube-api-qps", -1,
		"client-side limit of requests per second to the API server; negative: none (the API server's priority and fairness protects it)")
	fs.IntVar(&c.burst, "kube-api-burst", 0, "requests above --kube-api-qps allowed in a burst (with a positive --kube-api-qps)")
	fs.Float64Var(&c.statusWriteQPS, "status-write-qps", controllers.DefaultStatusWriteQPS,
		"status writes per second, over all jobs, that routine updates (progress, worker counts, the goodput shown) share in turn; "+
			"state changes are written at once; 0 or negative: no budget")
	fs.StringVar(&c.agentImage, "checkpoint-agent-image", builders.DefaultAgentImage,
		"image of the checkpoint agent beside the workers (the operator's own)")
	fs.StringVar(&c.agentCommand, "checkpoint-agent-command", "/manager", "command of the checkpoint agent in its image (the manager binary)")
	fs.StringVar(&c.supervisorCommand, "supervisor-command", builders.DefaultSupervisorCommand,
		"command, in the checkpoint agent's image, of the supervisor "+
			"copied into worker pods (it reads progress from the trainer's output); empty: "+builders.DefaultSupervisorCommand)
	fs.DurationVar(&c.agentInterval, "checkpoint-sync-interval", 30*time.Second, "time between two checkpoint rotations by the agent")
	fs.StringVar(&c.agentTokenKeyFile, "agent-token-key-file", "", "file holding the key (at least 32 bytes) from which each job's "+
		"checkpoint agent token is derived; empty: the Secret "+agentTokenKeySecret+" in the operator's namespace, made when missing")
	fs.StringVar(&c.checkpointStorage, "default-checkpoint-storage", "",
		"storage of jobs whose checkpoints name none: s3://BUCKET[/PREFIX][?endpoint=URL&region=R&secret=NAME], "+
			"gs://BUCKET[/PREFIX][?secret=NAME] or pvc://CLAIM[/PREFIX] (a claim of that name in each job's namespace); "+
			"empty: a claim per job, NAME-checkpoints")
	fs.StringVar(&c.gpuResource, "gpu-resource-name", string(builders.DefaultGPUResource),
		"extended resource that gpusPerWorker counts when a job's gpuResourceName is empty "+
			"(nvidia.com/gpu, amd.com/gpu, a MIG slice such as nvidia.com/mig-1g.10gb)")
	fs.StringVar(&c.checkpointClaimSize, "default-checkpoint-claim-size", builders.DefaultClaimSize.String(),
		"size of a per-job checkpoint claim whose storage names no size")
	fs.StringVar(&c.checkpointStorageClass, "default-checkpoint-storage-class", "",
		"StorageClass of a per-job checkpoint claim whose storage names none; empty: the cluster's default StorageClass")
	fs.StringVar(&c.mlflowURI, "mlflow-tracking-uri", "",
		"MLflow tracking server of jobs whose monitoring.mlflowTrackingUri is empty (http:// or https://); "+
			"empty: only jobs that name one are tracked")
	fs.StringVar(&c.mlflowCredentials, "mlflow-credentials-secret", "",
		"NAMESPACE/NAME of a Secret with the tracking server's credentials "+
			"(MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD) "+
			"for jobs whose monitoring.mlflowCredentialsSecret is empty")
	fs.DurationVar(&c.mlflowTimeout, "mlflow-timeout", 5*time.Second,
		"time limit of one round of calls to a tracking server; a tracked job's first workers wait at most this long for its run")
	fs.StringVar(&c.workerDefaults, "worker-defaults", "",
		"YAML file of the cluster's worker defaults (labels, annotations, nodeSelector, tolerations, priorityClassName, env, "+
			"imagePullSecrets, volumes, volumeMounts, sharedMemory), applied beneath each job's own settings; the chart's workerDefaults")
	fs.StringVar(&c.inputsCache, "inputs-cache", string(mlv1.InputsCacheShared),
		"input cache of jobs whose inputs.cache is unset: Shared (a claim per job, ReadWriteMany with more than one worker) "+
			"or PerNode (--inputs-node-cache-dir on each node)")
	fs.StringVar(&c.inputsNodeCacheDir, "inputs-node-cache-dir", "",
		"absolute directory on every node for PerNode input caches (a hostPath written as root, a directory per job); "+
			"empty: PerNode jobs are refused")
	fs.StringVar(&c.inputsNodeCacheMax, "inputs-node-cache-max-size", "100Gi", "the most one PerNode job's inputs may take on a node "+
		"(a quantity); a job's smaller inputs.cacheSize is its limit; empty: inputs.cacheSize alone")
	fs.DurationVar(&c.goodputInterval, "goodput-interval", 0,
		"deprecated and ignored: status.goodput is no longer written on a timer, only when its category changes and with the "+
			"status's other writes; the metrics and the kubectl plugin add the time since (docs/goodput.md)")
	fs.DurationVar(&c.mlflowRetry, "mlflow-retry-interval", 30*time.Second, "wait before calling a tracking server again after it failed")
	for fw, img := range builders.DefaultImages() {
		c.images[fw] = fs.String("default-image-"+string(fw), img, "worker image for "+string(fw)+" jobs without spec.image")
	}
	// JSON logs in a cluster, console logs elsewhere; --zap-devel and friends override.
	zo := zap.Options{Development: os.Getenv("KUBERNETES_SERVICE_HOST") == ""}
	zo.BindFlags(fs)
	_ = fs.Parse(args) // ExitOnError: Parse exits on a bad flag
	return c, zo
}

func main() {
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "checkpoint-agent":
		err = runAgent(ctrl.SetupSignalHandler(), os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "fetch-inputs":
		err = runFetchInputs(ctrl.SetupSignalHandler(), os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "prune-node-cache":
		err = runPruneNodeCache(ctrl.SetupSignalHandler(), os.Args[2:])
	default:
		err = run(ctrl.SetupSignalHandler(), os.Args[1:], ctrl.GetConfigOrDie)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(1)
	}
}

// run runs the manager until ctx is done. restConfig is called after flags are parsed (it reads --kubeconfig).
func run(ctx context.Context, args []string, restConfig func() *rest.Config) error {
	c, zo := parseFlags(args)
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zo)))
	if c.kubeconfig != "" {
		if err := os.Setenv("KUBECONFIG", c.kubeconfig); err != nil {
			return fmt.Errorf("setting KUBECONFIG: %w", err)
		}
	}
	var namespaces []string
	if c.namespaces != "" {
		namespaces = strings.Split(c.namespaces, ",")
	}
	rc := restConfig()
	rc.QPS, rc.Burst = float32(c.qps), c.burst
	mgr, err := ctrl.NewManager(rc, managerOptions(c, rc, namespaces))
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	cfg, err := controllersConfig(ctx, c, rc, mgr)
	if err != nil {
		return err
	}
	if errs := validation.IsDNS1123Label(c.clusterName); c.clusterName != "" && len(errs) > 0 {
		return fmt.Errorf("--cluster-name %q: %s", c.clusterName, strings.Join(errs, "; "))
	}
	cfg.Namespaces, cfg.ClusterName = namespaces, c.clusterName
	if c.checkpointMountRoot != "" {
		if !filepath.IsAbs(c.checkpointMountRoot) {
			return fmt.Errorf("--checkpoint-mount-root %q: not an absolute path", c.checkpointMountRoot)
		}
		cfg.CheckpointMountRoots = []string{filepath.Clean(c.checkpointMountRoot)}
	}
	cfg.Namespace, _ = operatorNamespace(serviceAccountNamespace)
	if err := controllers.Setup(mgr, cfg); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding healthz: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding readyz: %w", err)
	}
	ctrl.Log.Info("starting manager", "namespaces", namespaces)
	if c.goodputInterval != 0 {
		ctrl.Log.Info("--goodput-interval is deprecated and ignored: goodput is written with the status's other writes")
	}
	return mgr.Start(ctx)
}

// managerOptions returns the controller-runtime manager's options from the flags.
func managerOptions(c config, rc *rest.Config, namespaces []string) ctrl.Options {
	serving := metrics.Serving{BindAddress: c.metricsAddr, InsecureHTTP: c.metricsInsecureHTTP, CertDir: c.metricsCertDir}
	return ctrl.Options{
		Scheme:                  controllers.NewScheme(),
		Cache:                   controllers.CacheOptions(rc, namespaces),
		Metrics:                 serving.Options(),
		HealthProbeBindAddress:  c.probeAddr,
		PprofBindAddress:        c.pprofAddr,
		LeaderElection:          c.leaderElect,
		LeaderElectionID:        "trainingjob-operator.ml.example.com",
		LeaderElectionNamespace: c.leaderElectionNS,
		// Hand the Lease over on a graceful stop (a rolling update): the next replica leads at once instead
		// of after the 15 s lease. Safe because main exits as soon as the manager has stopped.
		LeaderElectionReleaseOnCancel: true,
	}
}

// controllersConfig returns the controllers' configuration from the flags, with the agents' token key read
// (or created) in the operator's namespace.
func controllersConfig(ctx context.Context, c config, rc *rest.Config, mgr ctrl.Manager) (controllers.Config, error) {
	opts, err := buildersOptions(ctx, c, rc, mgr)
	if err != nil {
		return controllers.Config{}, err
	}
	cfg := controllers.Config{Builders: opts, ProgressInterval: c.progressInterval, ScrapeTimeout: c.scrapeTimeout,
		ScrapeWorkers: c.scrapeWorkers, JobWorkers: c.jobWorkers, MLflowTimeout: c.mlflowTimeout, MLflowRetry: c.mlflowRetry,
		StatusWriteQPS: c.statusWriteQPS}
	if c.statusWriteQPS <= 0 {
		cfg.StatusWriteQPS = -1 // no budget
	}
	cfg.MLflowCredentials, err = mlflowFlags(c)
	return cfg, err
}

// buildersOptions returns the builders' settings from the flags.
func buildersOptions(ctx context.Context, c config, rc *rest.Config, mgr ctrl.Manager) (builders.Options, error) {
	opts := builders.Options{DefaultImages: map[mlv1.Framework]string{}, AgentImage: c.agentImage,
		AgentCommand: []string{c.agentCommand}, AgentInterval: c.agentInterval, GPUResource: corev1.ResourceName(c.gpuResource),
		MLflowTrackingURI: c.mlflowURI}
	if c.supervisorCommand != "" {
		opts.SupervisorCommand = []string{c.supervisorCommand}
	}
	for fw, img := range c.images {
		opts.DefaultImages[fw] = *img
	}
	if !builders.ExtendedResourceName.MatchString(c.gpuResource) {
		return opts, fmt.Errorf("--gpu-resource-name %q is not an extended resource name (DOMAIN/NAME, as nvidia.com/gpu)", c.gpuResource)
	}
	// Read uncached: the manager's cache would watch every Secret of the cluster.
	direct, err := client.New(rc, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return opts, fmt.Errorf("a client for the agents' token key: %w", err)
	}
	ns, nsKnown := operatorNamespace(serviceAccountNamespace)
	log := ctrl.Log.WithName("agent-token")
	if opts.AgentTokenKey, err = agentTokenKey(ctx, direct, c.agentTokenKeyFile, ns, nsKnown, log); err != nil {
		return opts, err
	}
	if opts.DefaultCheckpointStorage, err = defaultCheckpointStorage(c); err != nil {
		return opts, err
	}
	if opts.WorkerDefaults, err = readWorkerDefaults(c.workerDefaults); err != nil {
		return opts, err
	}
	return opts, inputsFlags(c, &opts)
}

// defaultCheckpointStorage returns the storage of jobs whose checkpoints name none: --default-checkpoint-storage,
// else a claim per job with --default-checkpoint-claim-size and --default-checkpoint-storage-class.
func defaultCheckpointStorage(c config) (*mlv1.CheckpointStorage, error) {
	if c.checkpointStorage != "" {
		return builders.ParseStorageURI(c.checkpointStorage)
	}
	size, err := resource.ParseQuantity(c.checkpointClaimSize)
	if err != nil || size.Sign() <= 0 {
		return nil, fmt.Errorf("--default-checkpoint-claim-size %q is not a positive quantity", c.checkpointClaimSize)
	}
	s := &mlv1.CheckpointStorage{Type: mlv1.StoragePVC, Size: &size}
	if c.checkpointStorageClass != "" {
		s.StorageClassName = &c.checkpointStorageClass
	}
	return s, nil
}

// mlflowFlags checks --mlflow-tracking-uri and returns the Secret --mlflow-credentials-secret names.
func mlflowFlags(c config) (client.ObjectKey, error) {
	if c.mlflowURI != "" {
		if _, err := mlflow.ParseBaseURL(c.mlflowURI); err != nil {
			return client.ObjectKey{}, fmt.Errorf("--mlflow-tracking-uri: %w", err)
		}
	}
	if c.mlflowCredentials == "" {
		return client.ObjectKey{}, nil
	}
	ns, name, ok := strings.Cut(c.mlflowCredentials, "/")
	if !ok || ns == "" || name == "" {
		return client.ObjectKey{}, fmt.Errorf("--mlflow-credentials-secret %q is not NAMESPACE/NAME", c.mlflowCredentials)
	}
	return client.ObjectKey{Namespace: ns, Name: name}, nil
}

// readWorkerDefaults reads --worker-defaults (strictly: a misspelt field is an error, not a silent no-op)
// and refuses defaults that would break the operator's wiring.
func readWorkerDefaults(path string) (builders.WorkerDefaults, error) {
	var d builders.WorkerDefaults
	if path == "" {
		return d, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return d, fmt.Errorf("--worker-defaults: %w", err)
	}
	if err := yaml.UnmarshalStrict(data, &d); err != nil {
		return d, fmt.Errorf("--worker-defaults %s: %w", path, err)
	}
	if err := d.Check(); err != nil {
		return d, fmt.Errorf("--worker-defaults %s: %w", path, err)
	}
	return d, nil
}
