package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
)

// serveAgent stands in for every rank 0's checkpoint agent: the bench's pods all have the address
// 127.0.0.1, so one server on the agent's port answers the CheckpointController's reads for all of them,
// with one checkpoint written, and acknowledges RESUME_FROM. stop closes it.
func serveAgent() (stop func(), err error) {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", builders.AgentPort))
	if err != nil {
		return nil, fmt.Errorf("the checkpoint agent's stand-in needs port %d: %w", builders.AgentPort, err)
	}
	written := time.Now().UTC().Truncate(time.Second)
	mux := http.NewServeMux()
	agentapi.Handle(mux, func() agentapi.Status {
		return agentapi.Status{Latest: "s3://bench/checkpoints/checkpoint-epoch-1", LatestEpoch: 1, LastTime: written,
			Count: 1, SizeBytes: 1 << 20, Created: 1, Time: time.Now().UTC()}
	}, func(string) {})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Println("scale-bench: checkpoint agent stand-in:", err)
		}
	}()
	return func() { _ = srv.Close() }, nil
}
