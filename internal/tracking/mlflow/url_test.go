package mlflow_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking/mlflow"
)

// TestParseBaseURL: an http or https URL with a host, and a path or not, is accepted; a query, a
// fragment, user information, another scheme or no host is refused with a *URIError that says which and
// never quotes the URI (it may carry a password).
func TestParseBaseURL(t *testing.T) {
	cases := []struct {
		name    string
		uri     string
		problem string // "" when accepted
	}{
		{name: "http", uri: "http://mlflow.mlflow:5000"},
		{name: "https with a path", uri: "https://mlflow.example.com/tracking/"},
		{name: "IPv6", uri: "http://[fd00::1]:5000"},
		{name: "a query", uri: "http://mlflow:5000/?x=1", problem: "it has a query"},
		{name: "an empty query", uri: "http://attacker.example/?", problem: "it has a query"},
		{name: "a fragment", uri: "http://mlflow:5000/#x", problem: "it has a fragment"},
		{name: "an empty fragment", uri: "http://mlflow:5000#", problem: "it has a fragment"},
		{name: "user information", uri: "http://user:pw-secret@mlflow:5000", problem: "it carries user information"},
		{name: "another scheme", uri: "file:///etc/passwd", problem: `its scheme "file" is not http or https`},
		{name: "no scheme", uri: "mlflow:5000", problem: `its scheme "mlflow" is not http or https`},
		{name: "no host", uri: "http:///api", problem: "it has no host"},
		{name: "only a port", uri: "http://:5000", problem: "it has no host"},
		{name: "not a URL", uri: "http://pw-secret%zz@x", problem: "it is not a URL"},
		{name: "empty", uri: "", problem: `its scheme "" is not http or https`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mlflow.ParseBaseURL(tc.uri)
			var uriErr *mlflow.URIError
			got := ""
			if errors.As(err, &uriErr) {
				got = uriErr.Problem
			} else if err != nil {
				t.Fatalf("error %v is not a *URIError", err)
			}
			if diff := cmp.Diff(tc.problem, got); diff != "" {
				t.Errorf("ParseBaseURL(%q) problem (-want +got):\n%s", tc.uri, diff)
			}
			if err != nil && tc.uri != "" && containsAny(err.Error(), tc.uri, "pw-secret") {
				t.Errorf("error %q quotes the URI", err)
			}
		})
	}
}

// TestSameServer: one server is the same scheme, host (in any case) and port (a default one written or
// not); paths do not count, and a URI ParseBaseURL refuses is no server.
func TestSameServer(t *testing.T) {
	cases := []struct {
		name string
		a, b string
		want bool
	}{
		{name: "identical", a: "http://mlflow:5000", b: "http://mlflow:5000", want: true},
		{name: "case and a trailing slash", a: "HTTP://MLFLOW:5000/", b: "http://mlflow:5000", want: true},
		{name: "another path", a: "http://mlflow:5000/a", b: "http://mlflow:5000/b", want: true},
		{name: "http's default port", a: "http://mlflow:80", b: "http://mlflow", want: true},
		{name: "https's default port", a: "https://mlflow", b: "https://mlflow:443", want: true},
		{name: "a port with a leading zero", a: "http://mlflow:05000", b: "http://mlflow:5000", want: true},
		{name: "another port", a: "http://mlflow:5000", b: "http://mlflow:5001"},
		{name: "another scheme", a: "http://mlflow:443", b: "https://mlflow"},
		{name: "another host", a: "http://mlflow.team-a:5000", b: "http://mlflow:5000"},
		{name: "a trailing dot", a: "http://mlflow.:5000", b: "http://mlflow:5000"},
		{name: "user information", a: "http://u:p@mlflow:5000", b: "http://mlflow:5000"},
		{name: "a query", a: "http://mlflow:5000?", b: "http://mlflow:5000"},
		{name: "empty", a: "", b: ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := mlflow.SameServer(tc.a, tc.b); got != tc.want {
				t.Errorf("SameServer(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
}
