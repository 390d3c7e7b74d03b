package controllers

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking/mlflow/mlflowtest"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// trackingFixture is a TrackingReconciler whose operator-wide tracking server (platform) wants the
// operator-wide Secret's token, beside a tenant's own tracking server that wants none.
type trackingFixture struct {
	platform, tenant *mlflowtest.Server
	wideSecret       types.NamespacedName
}

const (
	platformToken = "platform-token-5f1c"
	tenantToken   = "tenant-token-77aa"
)

func newTrackingFixture(t *testing.T) *trackingFixture {
	f := &trackingFixture{platform: mlflowtest.NewServer(), tenant: mlflowtest.NewServer(),
		wideSecret: types.NamespacedName{Namespace: "trainingjob-system", Name: "mlflow"}}
	f.platform.Authorization = "Bearer " + platformToken
	t.Cleanup(f.platform.Close)
	t.Cleanup(f.tenant.Close)
	return f
}

// reconcile runs one Reconcile of a job with monitoring m (and, when m names one, its own Secret holding
// tenantToken) with a server's fake client, and returns the job as written.
func (f *trackingFixture) reconcile(t *testing.T, name string, m *mlv1.MonitoringSpec) *mlv1.TrainingJob {
	t.Helper()
	tj := tjtest.NewTJ("ml", name).With(func(tj *mlv1.TrainingJob) {
		tj.UID, tj.Spec.Monitoring = types.UID("uid-"+name), m
	}).Obj()
	secrets := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.wideSecret.Namespace, Name: f.wideSecret.Name},
			Data: map[string][]byte{builders.MLflowTokenKey: []byte(platformToken)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "own-mlflow"},
			Data: map[string][]byte{builders.MLflowTokenKey: []byte(tenantToken)}},
	}
	c := fake.NewClientBuilder().WithScheme(NewScheme()).WithObjects(append(secrets, tj)...).WithStatusSubresource(&mlv1.TrainingJob{}).Build()
	r := &TrackingReconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(10), Clock: clocktesting.NewFakeClock(t0.Time),
		Options: builders.Options{MLflowTrackingURI: f.platform.URL}, Credentials: f.wideSecret, HTTP: &http.Client{},
		Timeout: time.Second, Retry: time.Minute}
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tj)}); err != nil {
		t.Fatal(err)
	}
	got := &mlv1.TrainingJob{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(tj), got); err != nil {
		t.Fatal(err)
	}
	return got
}

// distinct returns the set of values, in order of first appearance.
func distinct(values []string) []string {
	var out []string
	for _, v := range values {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// TestTrackingCredentialsGoOnlyToTheirServer: the operator-wide Secret's token goes to the operator-wide
// tracking server (however its URI is written) and never to a server a job names; a job's own Secret goes
// to its own server. Each server records the Authorization header of every request it got.
func TestTrackingCredentialsGoOnlyToTheirServer(t *testing.T) {
	f := newTrackingFixture(t)
	cases := []struct {
		name         string
		monitoring   func() *mlv1.MonitoringSpec
		wantPlatform []string // the distinct Authorization headers each server got; nil: no request
		wantTenant   []string
	}{
		{name: "a-tenant-server", monitoring: func() *mlv1.MonitoringSpec {
			return &mlv1.MonitoringSpec{MLflowTrackingURI: f.tenant.URL}
		}, wantTenant: []string{""}},
		{name: "the-operator-wide-server", monitoring: func() *mlv1.MonitoringSpec { return &mlv1.MonitoringSpec{} },
			wantPlatform: []string{"Bearer " + platformToken}},
		{name: "the-operator-wide-server-named-by-the-job", monitoring: func() *mlv1.MonitoringSpec {
			return &mlv1.MonitoringSpec{MLflowTrackingURI: strings.Replace(f.platform.URL, "http://", "HTTP://", 1) + "/"}
		}, wantPlatform: []string{"Bearer " + platformToken}},
		{name: "a-tenant-server-with-its-own-secret", monitoring: func() *mlv1.MonitoringSpec {
			return &mlv1.MonitoringSpec{MLflowTrackingURI: f.tenant.URL, MLflowCredentialsSecret: "own-mlflow"}
		}, wantTenant: []string{"Bearer " + tenantToken}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			platformBefore, tenantBefore := len(f.platform.Authorizations()), len(f.tenant.Authorizations())
			tj := f.reconcile(t, tc.name, tc.monitoring())
			if c := meta.FindStatusCondition(tj.Status.Conditions, mlv1.ConditionExperimentTracked); c == nil || c.Reason != derive.ReasonRunActive {
				t.Errorf("ExperimentTracked %+v, want %s", c, derive.ReasonRunActive)
			}
			type authorizations struct {
				Platform, Tenant []string
			}
			got := authorizations{
				Platform: distinct(f.platform.Authorizations()[platformBefore:]),
				Tenant:   distinct(f.tenant.Authorizations()[tenantBefore:]),
			}
			if diff := cmp.Diff(authorizations{Platform: tc.wantPlatform, Tenant: tc.wantTenant}, got); diff != "" {
				t.Errorf("Authorization headers the platform's and the tenant's servers got (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTrackingRefusesURIs: a tracking URI with a query, a fragment or user information is refused before
// any request (to it or to the operator-wide server): ExperimentTracked is False with reason
// TrackingURIInvalid and a message naming spec.monitoring.mlflowTrackingUri, and never the URI's password.
func TestTrackingRefusesURIs(t *testing.T) {
	f := newTrackingFixture(t)
	host := strings.TrimPrefix(f.tenant.URL, "http://")
	cases := []struct {
		name    string
		uri     string
		problem string
	}{
		{name: "query", uri: f.tenant.URL + "/?", problem: "it has a query"},
		{name: "query-with-a-value", uri: f.tenant.URL + "/?to=x", problem: "it has a query"},
		{name: "fragment", uri: f.tenant.URL + "/#x", problem: "it has a fragment"},
		{name: "user-information", uri: "http://user:pw-91d2@" + host, problem: "it carries user information"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tj := f.reconcile(t, tc.name, &mlv1.MonitoringSpec{MLflowTrackingURI: tc.uri, MLflowCredentialsSecret: "own-mlflow"})
			c := meta.FindStatusCondition(tj.Status.Conditions, mlv1.ConditionExperimentTracked)
			if c == nil {
				t.Fatal("no ExperimentTracked condition")
			}
			type condition struct {
				Status          metav1.ConditionStatus
				Reason, Message string
			}
			want := condition{
				Status:  metav1.ConditionFalse,
				Reason:  derive.ReasonTrackingURIInvalid,
				Message: "spec.monitoring.mlflowTrackingUri: the MLflow tracking URI is refused: " + tc.problem,
			}
			got := condition{Status: c.Status, Reason: c.Reason, Message: strings.SplitN(c.Message, " (want", 2)[0]}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("ExperimentTracked status, reason, message (-want +got):\n%s", diff)
			}
			if strings.Contains(c.Message, "pw-91d2") {
				t.Errorf("message %q holds the URI's password", c.Message)
			}
			if n := len(f.platform.Authorizations()) + len(f.tenant.Authorizations()); n != 0 {
				t.Errorf("%d requests were made", n)
			}
		})
	}
}

// TestTrackingConditionLeavesTheAnswerOut: what a server answers an error with (MLflow's error JSON, or a
// cluster-internal service's text) never reaches ExperimentTracked's message, which the job's owner
// reads: the message holds the HTTP status and at most MLflow's error_code.
func TestTrackingConditionLeavesTheAnswerOut(t *testing.T) {
	cases := []struct {
		name     string
		status   int
		body     string
		secret   string
		reason   string
		wantCode string
	}{
		{name: "mlflow-error-json", status: http.StatusInternalServerError,
			body:   `{"error_code":"INTERNAL_ERROR","message":"AKIA-SECRET-XYZ"}`,
			secret: "AKIA-SECRET-XYZ", reason: derive.ReasonTrackingServerUnavailable,
			wantCode: "HTTP 500 Internal Server Error (INTERNAL_ERROR)"},
		{name: "plain-text", status: http.StatusNotFound, body: "root:x:0:0 secret",
			secret: "root:x:0:0", reason: derive.ReasonTrackingRequestRejected, wantCode: "HTTP 404 Not Found;"},
		{name: "plain-text-2xx", status: http.StatusOK, body: "root:x:0:0 secret",
			secret: "root:x:0:0", reason: derive.ReasonTrackingServerUnavailable, wantCode: "HTTP 200: the answer is not MLflow's JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newTrackingFixture(t)
			s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer s.Close()
			tj := f.reconcile(t, "answer-"+tc.name, &mlv1.MonitoringSpec{MLflowTrackingURI: s.URL})
			c := meta.FindStatusCondition(tj.Status.Conditions, mlv1.ConditionExperimentTracked)
			if c == nil {
				t.Fatal("no ExperimentTracked condition")
			}
			if strings.Contains(c.Message, tc.secret) || !strings.Contains(c.Message, tc.wantCode) {
				t.Errorf("message %q: want %q in it, and nothing of the answer", c.Message, tc.wantCode)
			}
			type condition struct {
				Status metav1.ConditionStatus
				Reason string
			}
			want := condition{Status: metav1.ConditionFalse, Reason: tc.reason}
			if diff := cmp.Diff(want, condition{Status: c.Status, Reason: c.Reason}); diff != "" {
				t.Errorf("ExperimentTracked status, reason (-want +got):\n%s", diff)
			}
		})
	}
}
