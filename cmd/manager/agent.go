package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// runAgent runs `manager checkpoint-agent`: the checkpoint agent beside a job's workers (see
// checkpoint.Agent). Credentials come from the pod: its workload identity, or the storage Secret's keys
// as environment variables (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS).
// Only rank 0's agent works; the others wait, so every pod of the Job can carry the same container.
func runAgent(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("checkpoint-agent", flag.ContinueOnError)
	st := &mlv1.CheckpointStorage{}
	var typ, dir, root, listen, protect, check, termLog string
	var retention int
	var interval, abandoned time.Duration
	fs.StringVar(&typ, "storage-type", "pvc", "pvc, nfs, s3 or gcs")
	fs.StringVar(&dir, "dir", "/checkpoints", "mount path of a pvc or nfs volume")
	fs.StringVar(&st.S3Bucket, "s3-bucket", "", "S3 bucket")
	fs.StringVar(&st.GCSBucket, "gcs-bucket", "", "GCS bucket")
	fs.StringVar(&st.Endpoint, "endpoint", "", "S3-compatible endpoint")
	fs.StringVar(&st.Region, "region", "", "S3 region")
	fs.StringVar(&root, "root", "", "the job's checkpoint root inside the store: [prefix/]namespace/name")
	fs.IntVar(&retention, "retention", 3, "newest complete checkpoints to keep")
	fs.StringVar(&protect, "protect", "", "a checkpoint never to delete (resumeFrom)")
	fs.DurationVar(&interval, "interval", 30*time.Second, "time between two rotations")
	fs.DurationVar(&abandoned, "abandoned-after", time.Hour, "an incomplete checkpoint older than the newest complete one is deleted once untouched this long")
	fs.StringVar(&listen, "listen", ":8082", "address of the /status endpoint")
	fs.StringVar(&termLog, "termination-log", "", "file that receives the final report when the agent stops (the container's terminationMessagePath)")
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
	// resumed from: kept until the operator names a newer one.
	a := &checkpoint.Agent{Store: store, Root: root, Interval: interval, Log: log, ResumeFrom: os.Getenv("RESUME_FROM"), TerminationLog: termLog,
		Policy: checkpoint.Policy{Retention: retention, AbandonedAfter: abandoned}}
	if protect != "" {
		a.Policy.Protect = []string{protect}
	}
	return a.Run(ctx, l)
}

// checkResume is the resume check that runs before the workers: it fails (and the pod with it) with a
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
