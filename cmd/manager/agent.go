package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
	"github.com/trainingjob-operator/trainingjob-operator/controllers"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// runAgent runs `manager checkpoint-agent`: the checkpoint agent beside a job's workers (see
// checkpoint.Agent). Credentials come from the pod: its workload identity, or the storage Secret's keys
// as environment variables (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS).
// Only rank 0's agent works; the others wait, so every pod of the Job can carry the same container.
func runAgent(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("checkpoint-agent", flag.ContinueOnError)
	st := &mlv1.CheckpointStorage{}
	var typ, dir, root, nameRoot, listen, protect, check, termLog string
	var retention int
	var interval, abandoned time.Duration
	fs.StringVar(&typ, "storage-type", "pvc", "pvc, nfs, s3 or gcs")
	fs.StringVar(&dir, "dir", "/checkpoints", "mount path of a pvc or nfs volume")
	fs.StringVar(&st.S3Bucket, "s3-bucket", "", "S3 bucket")
	fs.StringVar(&st.GCSBucket, "gcs-bucket", "", "GCS bucket")
	fs.StringVar(&st.Endpoint, "endpoint", "", "S3-compatible endpoint")
	fs.StringVar(&st.Region, "region", "", "S3 region")
	fs.StringVar(&root, "root", "", "the run's checkpoint root inside the store: [prefix/]namespace/name[/runID]")
	fs.StringVar(&nameRoot, "earlier-runs-under", "", "where the runs of the job's name live ([prefix/]namespace/name): "+
		"earlier runs' checkpoints there are reported")
	fs.IntVar(&retention, "retention", 3, "newest complete checkpoints to keep")
	fs.StringVar(&protect, "protect", "", "a checkpoint never to delete (resumeFrom)")
	fs.DurationVar(&interval, "interval", 30*time.Second, "time between two rotations")
	fs.DurationVar(&abandoned, "abandoned-after", time.Hour,
		"an incomplete checkpoint older than the newest complete one is deleted once untouched this long")
	fs.StringVar(&listen, "listen", ":8082", "address of the /status endpoint")
	fs.StringVar(&termLog, "termination-log", "",
		"file that receives the final report when the agent stops (the container's terminationMessagePath)")
	fs.StringVar(&check, "check-resume-from", "", "only check that this checkpoint (resumeFrom) exists and is complete, then exit")
	zo := zap.Options{}
	zo.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := zap.New(zap.UseFlagOptions(&zo))
	st.Type = mlv1.StorageType(typ)
	if check != "" {
		return checkResume(ctx, st, dir, check)
	}
	if rank := os.Getenv("RANK"); rank != "" && rank != "0" {
		log.Info("not rank 0: idle", "rank", rank)
		<-ctx.Done()
		return nil
	}
	if root == "" {
		return fmt.Errorf("--root is required")
	}
	store, err := checkpoint.Open(ctx, st, nil, dir)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	// RESUME_FROM (the job's ConfigMap, read when this container started) is what the workers of this pod
	// resumed from: kept until the operator names a newer one, which only the operator may do: it knows
	// the job's token (AGENT_TOKEN, see agentapi).
	a := &checkpoint.Agent{
		Store:          store,
		Root:           root,
		Interval:       interval,
		Log:            log,
		ResumeFrom:     os.Getenv("RESUME_FROM"),
		TerminationLog: termLog,
		Policy:         checkpoint.Policy{Retention: retention, AbandonedAfter: abandoned},
		Token:          os.Getenv(agentapi.TokenEnv),
		NameRoot:       nameRoot,
	}
	if protect != "" {
		a.Policy.Protect = []string{protect}
	}
	return a.Run(ctx, l)
}

// checkResume runs the resume check before the workers: it fails (and the pod with it) with a
// message naming the URI when resumeFrom is missing or incomplete.
func checkResume(ctx context.Context, st *mlv1.CheckpointStorage, dir, resumeFrom string) error {
	// resumeFrom may be in another bucket of the same kind of storage (admission checks the kind).
	for scheme, bucket := range map[string]*string{"s3://": &st.S3Bucket, "gs://": &st.GCSBucket} {
		if rest, ok := strings.CutPrefix(resumeFrom, scheme); ok {
			*bucket, _, _ = strings.Cut(rest, "/")
		}
	}
	store, err := checkpoint.Open(ctx, st, nil, dir)
	if err == nil {
		err = checkpoint.CheckResumeFrom(ctx, store, resumeFrom, dir)
	}
	if err != nil {
		return err
	}
	fmt.Printf("resumeFrom %s is a complete checkpoint\n", resumeFrom)
	return nil
}

// The key of the checkpoint agents' tokens (builders.Options.AgentTokenKey, see builders.AgentToken): the
// operator's alone, the same in every replica and after every restart, so that the token a Job's
// template carries stays the token of the job.
const (
	// agentTokenKeySecret is the Secret in the operator's namespace that holds it, under agentTokenKeyField.
	agentTokenKeySecret = "trainingjob-agent-token-key"
	agentTokenKeyField  = "key"
	agentTokenKeySize   = 32
	// defaultOperatorNamespace is the operator's namespace when neither POD_NAMESPACE nor the in-cluster
	// service account says (the manager runs outside a cluster).
	defaultOperatorNamespace = controllers.DefaultNamespace
	serviceAccountNamespace  = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
)

// operatorNamespace returns the manager's namespace: POD_NAMESPACE, else the in-cluster service account's
// (nsFile); known is false when neither says and it is defaultOperatorNamespace.
func operatorNamespace(nsFile string) (ns string, known bool) {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns, true
	}
	if data, err := os.ReadFile(nsFile); err == nil && strings.TrimSpace(string(data)) != "" {
		return strings.TrimSpace(string(data)), true
	}
	return defaultOperatorNamespace, false
}

// agentTokenKey returns the key of the checkpoint agents' tokens: the content of keyFile (--agent-token-key-file)
// when set; else the Secret agentTokenKeySecret in the operator's namespace (ns), made with 32 random
// bytes when missing (when another replica makes it at the same time, its key is read back). Where the
// namespace is not known (outside a cluster: make run, a test) or not on the API server, and the Secret
// can be neither read nor made, a random key for this process, which the log says: then the tokens of
// jobs built later change when the manager restarts, and until their next attempt the
// CheckpointController's acknowledgements of jobs built before are refused (their agents keep protecting
// what they reported: safe, only more than `retention` checkpoints are kept meanwhile). The key itself
// is never logged.
func agentTokenKey(ctx context.Context, c client.Client, keyFile, ns string, nsKnown bool, log logr.Logger) (builders.SecretKey, error) {
	if keyFile != "" {
		data, err := os.ReadFile(keyFile)
		if err != nil {
			return nil, fmt.Errorf("--agent-token-key-file: %w", err)
		}
		if key := bytes.TrimRight(data, "\r\n"); len(key) >= agentTokenKeySize {
			return key, nil
		}
		return nil, fmt.Errorf("--agent-token-key-file %s: the key is shorter than %d bytes", keyFile, agentTokenKeySize)
	}
	var key builders.SecretKey
	obj := client.ObjectKey{Namespace: ns, Name: agentTokenKeySecret}
	transient := func(err error) bool {
		return !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) &&
			!apierrors.IsInvalid(err) && !errors.Is(err, errShortKey)
	}
	err := retry.OnError(retry.DefaultBackoff, transient, func() (err error) {
		key, err = getOrCreateKey(ctx, c, obj)
		return err
	})
	switch {
	case err == nil:
		return key, nil
	case errors.Is(err, errShortKey), nsKnown && !apierrors.IsNotFound(err):
		// NotFound: the namespace is not on this API server, so the manager does not run in it (a test's
		// control plane seen from a pod), where it would have found the Secret or made it.
		return nil, fmt.Errorf("the key of the checkpoint agents' tokens (Secret %s): %w", obj, err)
	}
	log.Info("no Secret "+obj.String()+" for the key of the checkpoint agents' tokens (outside a cluster?): using a random key for "+
		"this process; agent tokens change when the manager restarts (--agent-token-key-file gives one)", "error", err.Error())
	key = make(builders.SecretKey, agentTokenKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return key, nil
}

var errShortKey = errors.New("the key is shorter than 32 bytes: delete the Secret to have the manager make a new one")

// getOrCreateKey reads the key from the Secret obj, making the Secret (immutable) when it is missing.
func getOrCreateKey(ctx context.Context, c client.Client, obj client.ObjectKey) (builders.SecretKey, error) {
	s := &corev1.Secret{}
	err := c.Get(ctx, obj, s)
	if apierrors.IsNotFound(err) {
		key := make([]byte, agentTokenKeySize)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: obj.Namespace, Name: obj.Name,
			Labels: map[string]string{"app.kubernetes.io/name": "trainingjob-operator"}},
			Type: corev1.SecretTypeOpaque, Immutable: ptr.To(true), Data: map[string][]byte{agentTokenKeyField: key}}
		if err = c.Create(ctx, s); apierrors.IsAlreadyExists(err) { // another replica made it first: use its key
			s = &corev1.Secret{}
			err = c.Get(ctx, obj, s)
		}
	}
	if err != nil {
		return nil, err
	}
	if len(s.Data[agentTokenKeyField]) < agentTokenKeySize {
		return nil, errShortKey
	}
	return s.Data[agentTokenKeyField], nil
}
