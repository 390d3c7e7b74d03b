package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"time"

	ckpt "github.com/trainingjob-operator/trainingjob-operator/checkpoint"
)

// A checkpoint is a directory (or object prefix) checkpoint-epoch-<N>/ holding model.json, complete only
// once its marker _COMPLETE (a small JSON manifest) exists: the trainer writes the marker last, so a
// reader never takes a half-written checkpoint for a complete one. The same code writes to a mounted
// volume (CHECKPOINT_DIR) and to S3 or GCS (CHECKPOINT_URI), through the operator's checkpoint package.

type modelState struct {
	Epoch int `json:"epoch"`
	// Step is the global training step of a checkpoint written mid-epoch (at preemption), else 0.
	Step         int64     `json:"step,omitempty"`
	Weights      []float64 `json:"weights"`
	Loss         float64   `json:"loss"`
	Accuracy     float64   `json:"accuracy"`
	LearningRate float64   `json:"learningRate"`
}

type manifest struct {
	Epoch int       `json:"epoch"`
	Files []string  `json:"files"`
	Bytes int64     `json:"bytes"`
	Time  time.Time `json:"time"`
}

// checkpoints is where this run's checkpoints go: a store and the job's root inside it.
type checkpoints struct {
	store ckpt.Store
	root  string
}

// openCheckpoints opens CHECKPOINT_DIR or CHECKPOINT_URI; nil when checkpoints are off.
func openCheckpoints(ctx context.Context, location string) (*checkpoints, error) {
	if location == "" {
		return nil, nil
	}
	s, root, err := ckpt.OpenURI(ctx, location)
	if err != nil {
		return nil, err
	}
	return &checkpoints{store: s, root: root}, nil
}

// save writes a checkpoint into the directory name (ckpt.Dir, or ckpt.StepDir at preemption), marker
// last, and returns its URI.
func (c *checkpoints) save(ctx context.Context, m modelState, name string) (string, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	dir := path.Join(c.root, name)
	if err := c.store.Put(ctx, dir+"/model.json", data); err != nil {
		return "", err
	}
	mf, _ := json.Marshal(manifest{Epoch: m.Epoch, Files: []string{"model.json"}, Bytes: int64(len(data)), Time: time.Now().UTC()})
	return c.store.URI(dir), c.store.Put(ctx, dir+"/"+ckpt.Marker, mf)
}

// latest returns the URI of the complete checkpoint with the highest epoch, "" when there is none.
func (c *checkpoints) latest(ctx context.Context) (string, error) {
	objs, err := c.store.List(ctx, c.root+"/")
	if err != nil {
		return "", err
	}
	l, ok := ckpt.Latest(ckpt.Scan(c.root, objs))
	if !ok {
		return "", nil
	}
	return c.store.URI(l.Dir), nil
}

// loadCheckpoint reads the complete checkpoint at uri (a path, s3:// or gs://).
func loadCheckpoint(ctx context.Context, uri string) (modelState, error) {
	var m modelState
	s, dir, err := ckpt.OpenURI(ctx, uri)
	if err != nil {
		return m, err
	}
	if _, err := s.Get(ctx, dir+"/"+ckpt.Marker); err != nil {
		return m, fmt.Errorf("checkpoint %s is not complete: %w", uri, err)
	}
	data, err := s.Get(ctx, dir+"/model.json")
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(data, &m)
}
