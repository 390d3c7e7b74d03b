package tracking_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking"
)

// TestCredentialsSecret: the job's own Secret goes wherever the job's run is; the operator-wide Secret
// only to the operator-wide server (the same scheme, host and port, however written); else none.
func TestCredentialsSecret(t *testing.T) {
	const platform = "http://mlflow.mlflow:5000"
	own := types.NamespacedName{Namespace: "team-a", Name: "my-mlflow"}
	wide := types.NamespacedName{Namespace: "trainingjob-system", Name: "mlflow"}
	none := types.NamespacedName{}
	cases := []struct {
		name       string
		uri        string
		jobSecret  types.NamespacedName
		platform   string
		wideSecret types.NamespacedName
		want       types.NamespacedName
	}{
		{name: "the operator-wide server", uri: platform, platform: platform, wideSecret: wide, want: wide},
		{name: "the same server, spelt otherwise", uri: "HTTP://MLflow.mlflow:5000/", platform: platform, wideSecret: wide, want: wide},
		{name: "the same server, another path", uri: platform + "/mlflow", platform: platform, wideSecret: wide, want: wide},
		{name: "a default port written or not", uri: "https://mlflow.example.com:443", platform: "https://mlflow.example.com", wideSecret: wide,
			want: wide},
		{name: "a tenant's server", uri: "http://evil.team-a:5000", platform: platform, wideSecret: wide, want: none},
		{name: "the same host, another port", uri: "http://mlflow.mlflow:5001", platform: platform, wideSecret: wide, want: none},
		{name: "the same host and port, another scheme", uri: "https://mlflow.mlflow:5000", platform: platform, wideSecret: wide, want: none},
		{name: "http's default port against https's", uri: "http://mlflow.example.com", platform: "https://mlflow.example.com", wideSecret: wide,
			want: none},
		{name: "a host that only begins like the platform's", uri: "http://mlflow.mlflow.evil.example:5000", platform: platform, wideSecret: wide,
			want: none},
		{name: "user information naming the platform's host", uri: "http://mlflow.mlflow:5000@evil.example:5000", platform: platform,
			wideSecret: wide, want: none},
		{name: "no operator-wide server", uri: platform, platform: "", wideSecret: wide, want: none},
		{name: "no operator-wide Secret", uri: platform, platform: platform, want: none},
		{name: "the job's own Secret to its own server", uri: "http://evil.team-a:5000", jobSecret: own, platform: platform, wideSecret: wide,
			want: own},
		{name: "the job's own Secret to the operator-wide server", uri: platform, jobSecret: own, platform: platform, wideSecret: wide,
			want: own},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tracking.CredentialsSecret(tc.uri, tc.jobSecret, tc.platform, tc.wideSecret)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("CredentialsSecret(%q) (-want +got):\n%s", tc.uri, diff)
			}
		})
	}
}
