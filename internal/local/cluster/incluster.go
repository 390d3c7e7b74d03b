package cluster

import (
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// KubernetesServiceIP is the ClusterIP of the `kubernetes` Service (the first address of envtest's
// service range), which pods' in-cluster clients connect to.
const KubernetesServiceIP = "10.0.0.1"

// inClusterCerts prepares what pods need to use the API server as in a cluster (Options.AdvertiseAddress):
// a serving certificate also valid for the `kubernetes` Service's address and the advertised one, signed
// by a CA of its own that clients (and pods, through kube-root-ca.crt) trust, and the ServiceAccount
// token signing key. envtest keeps certificates it finds in its directory.
func inClusterCerts(api *envtest.APIServer, certDir, advertise string) (caFile string, err error) {
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(KubernetesServiceIP), net.ParseIP(advertise)}
	dns := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	chain, key, err := certutil.GenerateSelfSignedCertKey("localhost", ips, dns)
	if err != nil {
		return "", fmt.Errorf("serving certificate: %w", err)
	}
	// The chain is the serving certificate, then the CA that signed it.
	_, rest := pem.Decode(chain)
	caBlock, _ := pem.Decode(rest)
	if caBlock == nil {
		return "", errors.New("serving certificate: no CA in the chain")
	}
	ca := pem.EncodeToMemory(caBlock)
	saKey, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return "", fmt.Errorf("service account key: %w", err)
	}
	caFile = filepath.Join(certDir, "serving-ca.crt")
	for name, data := range map[string][]byte{"apiserver.crt": chain, "apiserver.key": key, "serving-ca.crt": ca,
		"sa-signer.key": saKey, "sa-signer.crt": saKey} {
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o600); err != nil {
			return "", err
		}
	}
	api.CA = ca
	// Pods reach it on the advertised address (the `kubernetes` Service's endpoint), get ServiceAccount
	// tokens (the admission plugin envtest turns off), and the usual defaults.
	api.Configure().Set("advertise-address", advertise).Set("bind-address", "0.0.0.0").Disable("disable-admission-plugins")
	return caFile, nil
}
