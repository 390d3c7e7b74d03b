package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"time"

	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking/mlflow"
)

// runLog logs what only the trainer knows into the MLflow run the operator keeps for the job, as
// mlflow.start_run() does in a Python program: the operator gives every worker MLFLOW_TRACKING_URI and
// MLFLOW_RUN_ID (and the credentials, when the job names a Secret) and logs the progress metrics itself
// (step = epoch); rank 0 adds each epoch's wall time as epoch_seconds. A tracking server that fails never
// stops the training.
type runLog struct {
	c   *mlflow.Client
	run string
}

// openRunLog returns nil when the job is not tracked or its run was not created before the workers started.
func openRunLog() *runLog {
	uri, run := os.Getenv("MLFLOW_TRACKING_URI"), os.Getenv("MLFLOW_RUN_ID")
	if uri == "" || run == "" {
		return nil
	}
	c := &mlflow.Client{BaseURL: uri, Attempts: 2}
	if token := os.Getenv("MLFLOW_TRACKING_TOKEN"); token != "" {
		c.Authorization = "Bearer " + token
	} else if user := os.Getenv("MLFLOW_TRACKING_USERNAME"); user != "" {
		c.Authorization = "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+os.Getenv("MLFLOW_TRACKING_PASSWORD")))
	}
	fmt.Printf("logging to MLflow run %s at %s\n", run, uri)
	return &runLog{c: c, run: run}
}

// epoch logs an epoch's wall time.
func (l *runLog) epoch(epoch int, took time.Duration) {
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m := mlflow.Metric{Key: "epoch_seconds", Value: took.Seconds(), Timestamp: time.Now().UnixMilli(), Step: int64(epoch)}
	if err := l.c.LogBatch(ctx, l.run, []mlflow.Metric{m}, nil, nil); err != nil {
		fmt.Fprintf(os.Stderr, "trainer: epoch %d not logged to MLflow, training goes on: %v\n", epoch, err)
	}
}
