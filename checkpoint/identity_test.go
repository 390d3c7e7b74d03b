package checkpoint_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
)

// TestS3IdentityIsThePods: without a key (no secretRef), the S3 client is configured with no static
// credentials, and the SDK's default chain finds the pod's identity: on EKS, the web identity token and role
// that IAM roles for service accounts inject for the ServiceAccount. With a key, the key.
func TestS3IdentityIsThePods(t *testing.T) {
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("eyJ.web.identity"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", token)
	t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/detector-trainer")
	cases := []struct {
		name                string
		access, secret      string
		static, webIdentity bool
	}{
		{name: "no key: the pod's web identity", access: "", secret: "", static: false, webIdentity: true},
		{name: "a key from the Secret", access: "AKIAEXAMPLE", secret: "secret", static: true, webIdentity: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := checkpoint.NewS3Store(context.Background(),
				checkpoint.S3Options{Bucket: "b", Region: "us-east-1", AccessKey: tc.access, SecretKey: tc.secret})
			if err != nil {
				t.Fatal(err)
			}
			cache, ok := s.Client().Options().Credentials.(*aws.CredentialsCache)
			if !ok {
				t.Fatalf("credentials %T, want the SDK's cache", s.Client().Options().Credentials)
			}
			if got := cache.IsCredentialsProvider(credentials.StaticCredentialsProvider{}); got != tc.static {
				t.Errorf("static credentials: %t, want %t", got, tc.static)
			}
			if got := cache.IsCredentialsProvider(&stscreds.WebIdentityRoleProvider{}); got != tc.webIdentity {
				t.Errorf("web identity: %t, want %t", got, tc.webIdentity)
			}
		})
	}
}
