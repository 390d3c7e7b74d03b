package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

// TestStartFromLeftoversAndFailures: `up` starts from what an earlier run of either mode (or a killed run)
// left in its state directory, and a start that fails returns an error that says what failed and where
// its log is, with every process it had started stopped.
func TestStartFromLeftoversAndFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the local stack: make test runs it, make unit (go test -short) does not")
	}
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := testenv.BuildWorkerTools(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	file := trainerJob(t, "short", 1, 2, "10ms") // completes in a few seconds
	cases := []struct {
		name string
		// prepare leaves what an earlier run left in state, and returns the assets directory to use.
		prepare func(t *testing.T, state string) string
		// wantErr matches the error of `up`; empty: the job runs to Completed.
		wantErr string
		// wantLog is a file of the state directory and what it must hold.
		wantLog, wantLogLine string
	}{{
		name: "a real-node run's in-cluster certificate",
		prepare: func(t *testing.T, state string) string {
			foreignServingCert(t, filepath.Join(state, "apiserver-certs"))
			return assets
		},
	}, {
		name: "kube-apiserver does not come up",
		prepare: func(t *testing.T, _ string) string {
			return assetsWith(t, assets, "kube-apiserver", "#!/bin/sh\n[ \"$1\" = --help ] && exit 0  # envtest reads the flags first\n"+
				"echo 'kube-apiserver: refusing to start for the test' >&2\nexit 1\n")
		},
		wantErr:     `kube-apiserver to start.*logs: .*/kube-apiserver\.log`,
		wantLog:     "kube-apiserver.log",
		wantLogLine: "refusing to start for the test",
	}, {
		name: "kube-controller-manager is not there",
		prepare: func(t *testing.T, _ string) string {
			return assetsWith(t, assets, "kube-controller-manager", "")
		},
		wantErr: `kube-controller-manager missing in .* \(build it with hack/testbin.sh`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			dir := tc.prepare(t, state)
			var out bytes.Buffer
			err := up(context.Background(), &out, []string{"--assets", dir, "--state-dir", state, "--path", bin, "-f", file, "--exit-when-done"})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("up: %v\n%s", err, out.String())
			case tc.wantErr == "" && !strings.Contains(out.String(), "Completed"):
				t.Errorf("the job did not complete:\n%s", out.String())
			case tc.wantErr != "" && (err == nil || !regexp.MustCompile(tc.wantErr).MatchString(err.Error())):
				t.Errorf("up returned %v, want an error matching %q", err, tc.wantErr)
			}
			if tc.wantLog != "" {
				if data, _ := os.ReadFile(filepath.Join(state, tc.wantLog)); !strings.Contains(string(data), tc.wantLogLine) {
					t.Errorf("%s lacks %q:\n%s", tc.wantLog, tc.wantLogLine, data)
				}
			}
			if kids := children(t); len(kids) > 0 {
				t.Errorf("processes left behind: %v", kids)
			}
		})
	}
}

// foreignServingCert leaves in dir what a real-node run leaves: a serving certificate and key signed by a
// CA of their own, which this run's clients do not know.
func foreignServingCert(t *testing.T, dir string) {
	t.Helper()
	chain, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
	if err != nil {
		t.Fatal(err)
	}
	saKey, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"apiserver.crt": chain, "apiserver.key": key, "serving-ca.crt": chain,
		"sa-signer.key": saKey, "sa-signer.crt": saKey} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// assetsWith returns a copy of the assets directory (links to its binaries) in which name is the given shell
// script instead, or missing when the script is empty.
func assetsWith(t *testing.T, assets, name, script string) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(assets)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Symlink(filepath.Join(assets, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	if script != "" {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
