package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"time"
)

// A checkpoint is a directory checkpoint-epoch-<N>/ holding model.json, complete only once its marker
// _COMPLETE (a small JSON manifest) exists. The trainer writes model.json into a hidden temporary
// directory, renames it into place, and writes the marker last, so a reader never sees a half-written
// checkpoint as complete.

// CompleteMarker is the file that makes a checkpoint directory complete.
const CompleteMarker = "_COMPLETE"

var checkpointDir = regexp.MustCompile(`^checkpoint-epoch-([0-9]+)$`)

type checkpoint struct {
	Epoch        int       `json:"epoch"`
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

// saveCheckpoint writes the checkpoint of an epoch under root and returns its directory.
func saveCheckpoint(root string, c checkpoint) (string, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("checkpoint-epoch-%d", c.Epoch)
	final := filepath.Join(root, name)
	tmp := filepath.Join(root, "."+name+".tmp")
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	if err := writeSynced(filepath.Join(tmp, "model.json"), data); err != nil {
		return "", err
	}
	if err := os.RemoveAll(final); err != nil { // an incomplete leftover of an earlier run
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", err
	}
	m, _ := json.Marshal(manifest{Epoch: c.Epoch, Files: []string{"model.json"}, Bytes: int64(len(data)), Time: time.Now().UTC()})
	return final, writeSynced(filepath.Join(final, CompleteMarker), m)
}

func writeSynced(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// loadCheckpoint reads a complete checkpoint directory.
func loadCheckpoint(dir string) (checkpoint, error) {
	var c checkpoint
	if _, err := os.Stat(filepath.Join(dir, CompleteMarker)); err != nil {
		return c, fmt.Errorf("checkpoint %s is not complete: %w", dir, err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "model.json"))
	if err != nil {
		return c, err
	}
	return c, json.Unmarshal(data, &c)
}

// latestCheckpoint is the complete checkpoint with the highest epoch under root, "" when there is none.
func latestCheckpoint(root string) (string, error) {
	entries, err := os.ReadDir(root)
	if os.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	type found struct {
		epoch int
		dir   string
	}
	var all []found
	for _, e := range entries {
		m := checkpointDir.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, e.Name(), CompleteMarker)); err != nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		all = append(all, found{n, filepath.Join(root, e.Name())})
	}
	if len(all) == 0 {
		return "", nil
	}
	sort.Slice(all, func(i, j int) bool { return all[i].epoch > all[j].epoch })
	return all[0].dir, nil
}
