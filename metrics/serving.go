package metrics

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The manager asks the API server who a scraper is and whether it may read /metrics.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// ReaderClusterRole is the ClusterRole (deploy/rbac/metrics_reader_role.yaml, and the chart's) that allows
// GET on the non-resource URL /metrics: bind it to the scraper's ServiceAccount.
const ReaderClusterRole = "trainingjob-operator-metrics-reader"

// Serving is how the manager serves its metrics. By default they are served over HTTPS to clients whose
// bearer token the API server authenticates (a TokenReview) and allows `get` on the non-resource URL
// /metrics (a SubjectAccessReview): without a token the answer is 401, with a token whose identity may not
// read them 403. The series name every team's jobs with their losses and progress, so no pod of another
// tenant may read them unasked.
type Serving struct {
	// BindAddress is where the endpoint listens; "0" disables it.
	BindAddress string
	// InsecureHTTP serves plain HTTP to anyone who reaches the port, with no TLS, authentication or
	// authorization (for a cluster whose network already keeps scrapers apart).
	InsecureHTTP bool
	// CertDir holds the serving certificate and key (tls.crt, tls.key: a mounted kubernetes.io/tls Secret,
	// cert-manager's for example), reloaded when they change; without them the endpoint uses a self-signed
	// certificate made at start.
	CertDir string
}

// Options returns the manager's metrics server options.
func (s Serving) Options() metricsserver.Options {
	if s.InsecureHTTP {
		return metricsserver.Options{BindAddress: s.BindAddress}
	}
	return metricsserver.Options{
		BindAddress:    s.BindAddress,
		SecureServing:  true,
		FilterProvider: authFilter,
		CertDir:        s.CertDir,
		// HTTP/1.1 only: HTTP/2's rapid-reset and stream floods (CVE-2023-44487, CVE-2023-39325) stay out of
		// reach, as in kubebuilder's scaffold; Prometheus scrapes over HTTP/1.1.
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
}

// reviewBackoff retries a TokenReview or SubjectAccessReview the API server could not answer (the API
// server's own default for its authentication webhooks).
var reviewBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// authFilter lets through a request whose bearer token the API server authenticates (TokenReview, answers
// cached a minute) and whose user may get the request's path (SubjectAccessReview on the non-resource URL;
// allowed cached 5 minutes, denied 30 s). It is controller-runtime's filters.WithAuthenticationAndAuthorization
// except that a token the API server rejects is 401, as the API server and kube-rbac-proxy answer it, not 500.
func authFilter(config *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	authn, err := authenticationv1.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, err
	}
	authz, err := authorizationv1.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, err
	}
	tokens, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous: &apiserver.AnonymousAuthConfig{Enabled: false}, CacheTTL: time.Minute,
		TokenAccessReviewClient: authn, TokenAccessReviewTimeout: 10 * time.Second, WebhookRetryBackoff: &reviewBackoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("the metrics endpoint's authenticator: %w", err)
	}
	access, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: authz, AllowCacheTTL: 5 * time.Minute, DenyCacheTTL: 30 * time.Second, WebhookRetryBackoff: &reviewBackoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("the metrics endpoint's authorizer: %w", err)
	}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if allow(log, tokens, access, w, req) {
				next.ServeHTTP(w, req)
			}
		}), nil
	}, nil
}

// allow answers a request that may not go on (401, 403, or 500 when the API server could not say) and
// reports whether it may.
func allow(log logr.Logger, tokens authenticator.Request, access authorizer.Authorizer, w http.ResponseWriter, req *http.Request) bool {
	res, ok, err := tokens.AuthenticateRequest(req)
	if err != nil || !ok {
		log.V(4).Info("metrics request not authenticated", "error", err)
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return false
	}
	attrs := authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(req.Method), Path: req.URL.Path}
	decision, reason, err := access.Authorize(req.Context(), attrs)
	switch {
	case err != nil:
		log.Error(err, "authorizing a metrics request", "user", res.User.GetName())
		http.Error(w, "Authorization failed", http.StatusInternalServerError)
	case decision != authorizer.DecisionAllow:
		log.V(4).Info("metrics request forbidden", "user", res.User.GetName(), "reason", reason)
		http.Error(w, fmt.Sprintf("Forbidden: %s may not %s %s", res.User.GetName(), attrs.Verb, attrs.Path), http.StatusForbidden)
	default:
		return true
	}
	return false
}
