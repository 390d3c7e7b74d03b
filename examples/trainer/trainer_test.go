package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	ckpt "github.com/trainingjob-operator/trainingjob-operator/checkpoint"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestAllReduceSumsOverRanks(t *testing.T) {
	const world = 4
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	got := make([][]float64, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := 0; r < world; r++ {
		wg.Go(func() {
			g, err := rendezvous(r, world, addr, addr, 10*time.Second)
			if err != nil {
				errs[r] = err
				return
			}
			defer g.close()
			v := []float64{float64(r), 1, float64(r * r)}
			errs[r] = g.allReduce(v)
			b := []float64{float64(r + 7)}
			if errs[r] == nil {
				errs[r] = g.broadcast(b)
			}
			got[r] = append(v, b...)
		})
	}
	wg.Wait()
	for r := 0; r < world; r++ {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if diff := cmp.Diff([]float64{6, 4, 14, 7}, got[r]); diff != "" {
			t.Errorf("rank %d (-want +got):\n%s", r, diff)
		}
	}
}

func TestTrainingLowersLossAndResumes(t *testing.T) {
	dir := t.TempDir()
	c := config{world: 1, epochs: 3, batch: 32, lr: 0.5, samples: 1024, features: 8, seed: 3, checkpointAt: dir, frequency: 2,
		metricsPort: freePort(t), podIP: "127.0.0.1", rendezvousTO: time.Second}
	if err := train(c); err != nil {
		t.Fatal(err)
	}
	names := dirNames(t, dir)
	if diff := cmp.Diff([]string{"checkpoint-epoch-2", "checkpoint-epoch-3"}, names); diff != "" {
		t.Fatalf("checkpoints (-want +got):\n%s", diff)
	}
	first, _ := loadCheckpoint(context.Background(), filepath.Join(dir, "checkpoint-epoch-2"))
	last, _ := loadCheckpoint(context.Background(), filepath.Join(dir, "checkpoint-epoch-3"))
	if !(last.Loss < first.Loss) {
		t.Errorf("loss did not fall: epoch 2 %v, epoch 3 %v", first.Loss, last.Loss)
	}
	c.epochs, c.metricsPort = 5, freePort(t)
	if err := train(c); err != nil {
		t.Fatal(err)
	}
	resumed, err := loadCheckpoint(context.Background(), filepath.Join(dir, "checkpoint-epoch-5"))
	if err != nil {
		t.Fatalf("no checkpoint after resuming: %v (have %v)", err, dirNames(t, dir))
	}
	if !(resumed.Loss < last.Loss) {
		t.Errorf("resumed run did not continue lowering the loss: %v then %v", last.Loss, resumed.Loss)
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoint-epoch-1")); err == nil {
		t.Errorf("resumed run started over at epoch 1")
	}
}

func TestLatestCheckpointSkipsIncomplete(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c, err := openCheckpoints(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []int{3, 10} {
		if _, err := c.save(ctx, modelState{Epoch: e, Weights: []float64{1}}, ckpt.Dir(e)); err != nil {
			t.Fatal(err)
		}
	}
	// Written at preemption, 40 steps into epoch 11: it stands after checkpoint-epoch-10.
	if _, err := c.save(ctx, modelState{Epoch: 10, Step: 1240, Weights: []float64{2}}, ckpt.StepDir(10, 1240)); err != nil {
		t.Fatal(err)
	}
	// A newer checkpoint whose marker was never written, and other directories.
	for _, d := range []string{"checkpoint-epoch-12", ".checkpoint-epoch-13.tmp", "checkpoint-epoch-x"} {
		if err := os.WriteFile(filepath.Join(dir, d+".json"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "model.json"), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.latest(ctx)
	if err != nil || got != filepath.Join(dir, "checkpoint-epoch-10-step-1240") {
		t.Errorf("latest = %q, %v; want checkpoint-epoch-10-step-1240", got, err)
	}
	if m, err := loadCheckpoint(ctx, got); err != nil || m.Epoch != 10 || m.Step != 1240 {
		t.Errorf("the checkpoint written at preemption loads as %+v, %v", m, err)
	}
	if _, err := loadCheckpoint(ctx, filepath.Join(dir, "checkpoint-epoch-12")); err == nil {
		t.Errorf("an incomplete checkpoint loaded")
	}
	missing, _ := openCheckpoints(ctx, filepath.Join(dir, "missing"))
	if got, err := missing.latest(ctx); got != "" || err != nil {
		t.Errorf("latest of a missing directory = %q, %v", got, err)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
