package local

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	mathrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/trainingjob-operator/trainingjob-operator/internal/local/cluster"
)

// Kueue in the local stack (Options.Kueue): the real Kueue manager, built from its Go module by
// hack/kueue.sh, against the local API server, with TrainingJob as an external framework.
//
// Its webhooks are not registered with the API server: they default and validate Kueue's own objects
// and suspend the Jobs and pods of Kueue's built-in integrations at creation. The operator needs none of
// that: it writes its Workloads complete (priority included) and creates a queued job's Job only once
// Kueue has admitted it. Kueue's CRDs are applied with only the stored version (v1beta2) in use, so no
// conversion webhook is called.

// KueueMetricsCertDir is where the Kueue manager reads its metrics certificate when it does not manage
// certificates itself: a fixed path in its code (cmd/kueue), read even with metrics off.
const KueueMetricsCertDir = "/etc/kueue/metrics/certs"

// KueueNamespace is the namespace the Kueue manager runs in (its configuration's namespace).
const KueueNamespace = "kueue-system"

// kueueConfig is the manager's configuration: no leader election, certificates from certDir, no
// metrics or probes, waitForPodsReady on, batch Jobs and TrainingJobs integrated.
const kueueConfig = `apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: ` + KueueNamespace + `
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
health:
  healthProbeBindAddress: "0"
metrics:
  bindAddress: "0"
waitForPodsReady:
  timeout: 10m
  blockAdmission: false
integrations:
  frameworks: ["batch/job"]
  externalFrameworks: ["TrainingJob.v1.ml.example.com"]
`

// multiKueueConfig is added on a MultiKueue manager (Options.MultiKueueManager): TrainingJob dispatched by
// the generic adapter, MultiKueueOrigin on what it makes on the workers, a short garbage collection interval
// and the given time a lost worker keeps its Workloads.
const multiKueueConfig = `multiKueue:
  gcInterval: 10s
  origin: ` + MultiKueueOrigin + `
  workerLostTimeout: %s
  externalFrameworks:
  - name: TrainingJob.v1.ml.example.com
`

// MultiKueueOrigin is the origin a local MultiKueue manager marks its workers' objects with
// (names.MultiKueueOriginLabel).
const MultiKueueOrigin = "trainingjob-local"

// startKueue applies Kueue's CRDs (Options.Kueue/crds), waits until they are served, and starts the
// Kueue manager (Options.Kueue/kueue), logging to Dir/kueue.log.
func (s *Stack) startKueue(ctx context.Context) error {
	dir := s.opts.Kueue
	if err := ApplyCRDs(ctx, s.Cluster.Config, filepath.Join(dir, "crds")); err != nil {
		return fmt.Errorf("installing Kueue's CRDs (hack/kueue.sh copies them): %w", err)
	}
	err := s.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KueueNamespace}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", KueueNamespace, err)
	}
	certDir := filepath.Join(s.opts.Dir, "kueue-certs")
	for _, d := range []string{certDir, KueueMetricsCertDir} {
		if err := WriteSelfSigned(d); err != nil {
			return fmt.Errorf("a certificate for Kueue in %s: %w", d, err)
		}
	}
	// The webhook server's port is chosen free, but another process may take it before the manager binds
	// it: then the manager exits, and starts again on another.
	for try := 1; ; try++ {
		err := s.runKueue(dir, certDir)
		if err == nil || !errors.Is(err, errPortTaken) || try == 3 {
			return err
		}
	}
}

var errPortTaken = errors.New("its webhook port was taken")

// runKueue starts the Kueue manager with its webhook server on a free port and waits until it serves.
func (s *Stack) runKueue(dir, certDir string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	config := filepath.Join(s.opts.Dir, "kueue-config.yaml")
	data := fmt.Appendf(nil, kueueConfig, port, certDir)
	if lost := s.opts.MultiKueueManager; lost > 0 {
		data = fmt.Appendf(data, multiKueueConfig, lost)
	}
	if err := os.WriteFile(config, data, 0o600); err != nil {
		return err
	}
	logPath := filepath.Join(s.opts.Dir, "kueue.log")
	p, err := cluster.StartProcess(filepath.Join(dir, "kueue"), []string{"--config=" + config, "--kubeconfig=" + s.Cluster.Kubeconfig,
		"--feature-gates=VisibilityOnDemand=false", "--zap-log-level=info"}, logPath)
	if err != nil {
		return err
	}
	serving := fmt.Sprintf(`"msg":"Serving webhook server","host":"127.0.0.1","port":%d`, port)
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		data, _ := os.ReadFile(logPath) // not written yet: read again
		if exited, _ := p.Exited(); exited {
			if bytes.Contains(data, []byte("address already in use")) {
				return errPortTaken
			}
			return fmt.Errorf("the Kueue manager exited at start: see %s", logPath)
		}
		if bytes.Contains(data, []byte(serving)) {
			s.kueue = p
			return nil
		}
	}
	p.Stop()
	return fmt.Errorf("the Kueue manager did not start serving within 2 minutes: see %s", logPath)
}

// ApplyCRDs creates the CRDs of the YAML files in dir (Kueue's, the peers' of tests/performance/peers) and waits
// until the API server serves them.
func ApplyCRDs(ctx context.Context, cfg *rest.Config, dir string) error {
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return errors.Join(err, fmt.Errorf("no CRD in %s", dir))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if err := c.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
		}
		if err := waitEstablished(ctx, c, crd.Name); err != nil {
			return err
		}
	}
	return nil
}

func waitEstablished(ctx context.Context, c client.Client, name string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// WriteSelfSigned writes tls.crt and tls.key for 127.0.0.1 into dir, unless both exist: for Kueue's and
// the benchmarks' peers' webhook and metrics servers, which will not start without one.
func WriteSelfSigned(dir string) error {
	crt, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if _, err := os.Stat(crt); err == nil {
		if _, err := os.Stat(keyFile); err == nil {
			return nil
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "kueue-local"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(crt, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
}

// freePort returns a TCP port free on 127.0.0.1 now, below Linux's ephemeral range (32768 and up) where
// outgoing connections would soon take it again.
func freePort() (int, error) {
	for range 100 {
		port := 20000 + mathrand.IntN(12000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			_ = l.Close() // only its number was wanted
			return port, nil
		}
	}
	return 0, errors.New("no free port on 127.0.0.1 between 20000 and 32000")
}
