package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/storetest"
	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// TestCheckResumeFromAnotherBucket: resumeFrom may name a checkpoint in another bucket than the job's
// storage (a fine-tune of an earlier run); the resume check looks there, with the same identity, and
// names the URI when the checkpoint is missing or incomplete.
func TestCheckResumeFromAnotherBucket(t *testing.T) {
	ctx := context.Background()
	endpoint := storetest.StartVersityGW(t, "k", "secret-key")
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret-key")
	old, err := checkpoint.NewS3Store(ctx, checkpoint.S3Options{Bucket: "old-runs", Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"old-runs", "new-runs"} {
		if _, err := old.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{
		"ml/a/checkpoint-epoch-4/model.bin", "ml/a/checkpoint-epoch-4/_COMPLETE", "ml/a/checkpoint-epoch-5/model.bin",
	} {
		if err := old.Put(ctx, key, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	st := func() *mlv1.CheckpointStorage {
		return &mlv1.CheckpointStorage{Type: mlv1.StorageS3, S3Bucket: "new-runs", Endpoint: endpoint}
	}
	cases := []struct{ from, wantErr string }{
		{from: "s3://old-runs/ml/a/checkpoint-epoch-4", wantErr: ""},
		{from: "s3://old-runs/ml/a/checkpoint-epoch-5", wantErr: "s3://old-runs/ml/a/checkpoint-epoch-5 is not a complete checkpoint"},
		{from: "s3://new-runs/ml/a/checkpoint-epoch-4", wantErr: "s3://new-runs/ml/a/checkpoint-epoch-4 does not exist"},
	}
	for _, tc := range cases {
		err := checkResume(ctx, st(), "", tc.from)
		if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("checkResume(%s) = %v; want %q", tc.from, err, tc.wantErr)
		}
	}
}

// TestAgentTokenKey: the key of the agents' tokens is the operator's Secret's, made once (immutable, 32
// random bytes) and then read back by every replica and restart, also when two replicas make it at once;
// --agent-token-key-file replaces it; outside a cluster, with no Secret to be had, a random key for the
// process (which the log says, without the key); in a cluster that is an error, as is a short key.
func TestAgentTokenKey(t *testing.T) {
	const ns = "trainingjob-system"
	existing := bytes.Repeat([]byte{7}, 32)
	secret := func(key []byte) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: agentTokenKeySecret},
			Data:       map[string][]byte{agentTokenKeyField: key},
		}
	}
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, append(bytes.Repeat([]byte("f"), 40), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	shortFile := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(shortFile, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noNamespace := interceptor.Funcs{Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, ns)
	}}
	forbidden := interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, agentTokenKeySecret, nil)
	}}
	// Another replica makes the Secret between this one's get and create.
	race := interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if err := c.Create(ctx, secret(existing)); err != nil {
			return err
		}
		return c.Create(ctx, obj, opts...)
	}}
	cases := []struct {
		name     string
		objs     []client.Object
		funcs    interceptor.Funcs
		keyFile  string
		nsKnown  bool
		want     []byte // nil: a new random key, the one in the Secret when wantMade
		wantMade bool   // the Secret was made
		wantErr  bool
		wantLog  bool // a line says the key is random
	}{
		{name: "the Secret's key", objs: []client.Object{secret(existing)}, nsKnown: true, want: existing},
		{name: "no Secret: made", nsKnown: true, wantMade: true},
		{name: "made by another replica at the same time: its key", funcs: race, nsKnown: true, want: existing},
		{name: "a key file: its key, no Secret", keyFile: keyFile, nsKnown: true, want: bytes.Repeat([]byte("f"), 40)},
		{name: "a short key file", keyFile: shortFile, nsKnown: true, wantErr: true},
		{name: "a short key in the Secret", objs: []client.Object{secret([]byte("short"))}, wantErr: true},
		{name: "outside a cluster, no namespace: a random key", funcs: noNamespace, wantLog: true},
		{name: "a namespace not on this API server (a test's control plane seen from a pod): a random key",
			funcs: noNamespace, nsKnown: true, wantLog: true},
		{name: "in a cluster, no Secret to be had: an error", funcs: forbidden, nsKnown: true, wantErr: true},
		{name: "outside a cluster, no Secret to be had: a random key", funcs: forbidden, wantLog: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(controllers.NewScheme()).WithObjects(tc.objs...).WithInterceptorFuncs(tc.funcs).Build()
			var logs []string
			log := funcr.New(func(prefix, args string) { logs = append(logs, args) }, funcr.Options{})
			key, err := agentTokenKey(context.Background(), c, tc.keyFile, ns, tc.nsKnown, log)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %t", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			s := &corev1.Secret{}
			getErr := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: agentTokenKeySecret}, s)
			if tc.wantMade {
				if getErr != nil || s.Immutable == nil || !*s.Immutable {
					t.Fatalf("the Secret made: %v, %+v", getErr, s)
				}
				tc.want = s.Data[agentTokenKeyField]
			}
			if tc.want == nil && len(key) == agentTokenKeySize && !bytes.Equal(key, existing) {
				tc.want = key // random, and of the right size
			}
			gotLog := len(logs) > 0 && strings.Contains(logs[0], "random key")
			type outcome struct {
				Key       []byte
				RandomLog bool
			}
			want, got := outcome{Key: tc.want, RandomLog: tc.wantLog}, outcome{Key: []byte(key), RandomLog: gotLog}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("key, random key logged (-want +got):\n%s", diff)
			}
			for _, l := range logs {
				if strings.Contains(l, string(key)) || strings.Contains(l, hex.EncodeToString(key)) {
					t.Errorf("the log shows the key: %s", l)
				}
			}
			// The same key the next time (a restart, another replica), as long as a Secret holds it.
			if tc.wantMade {
				again, err := agentTokenKey(context.Background(), c, "", ns, tc.nsKnown, logr.Discard())
				if err != nil || !bytes.Equal(again, key) {
					t.Errorf("the next start: %v, another key: %t", err, !bytes.Equal(again, key))
				}
			}
		})
	}
}

// TestOperatorNamespace: POD_NAMESPACE, else the service account's namespace file, else the default.
func TestOperatorNamespace(t *testing.T) {
	file := filepath.Join(t.TempDir(), "namespace")
	if err := os.WriteFile(file, []byte("ops\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, env, file string
		want            string
		wantKnown       bool
	}{
		{name: "POD_NAMESPACE", env: "from-env", file: file, want: "from-env", wantKnown: true},
		{name: "the service account's", file: file, want: "ops", wantKnown: true},
		{name: "outside a cluster", file: filepath.Join(t.TempDir(), "none"), want: defaultOperatorNamespace},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("POD_NAMESPACE", tc.env)
			ns, known := operatorNamespace(tc.file)
			type outcome struct {
				Namespace string
				Known     bool
			}
			want, got := outcome{Namespace: tc.want, Known: tc.wantKnown}, outcome{Namespace: ns, Known: known}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("namespace, known (-want +got):\n%s", diff)
			}
		})
	}
}
