package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	ckpt "github.com/trainingjob-operator/trainingjob-operator/checkpoint"
)

// trainer holds one rank's state.
type trainer struct {
	c        config
	g        *group
	shard    dataset
	w        []float64
	progress *progress    // every rank's; rank 0's reports the run
	ckpts    *checkpoints // rank 0 only; nil without checkpoints
	runLog   *runLog      // rank 0 only; nil when the job is not tracked in MLflow
	ctx      context.Context
	snap     snapshot // rank 0 only: the state a checkpoint at preemption holds
	// resumeStep is the global step a checkpoint written mid-epoch was taken at (0: at an epoch's end).
	resumeStep int64
}

func train(c config) error {
	t := &trainer{c: c, w: make([]float64, c.features+1)}
	t.shard = newDataset(c.samples, c.features, c.seed).shard(c.rank, c.world)
	if len(t.shard.x) == 0 {
		return fmt.Errorf("%d samples are too few for %d ranks", c.samples, c.world)
	}
	t.ctx = context.Background()
	// Every rank serves its progress: the operator reads rank 0's, and every rank's once when the run
	// stalls, to name the one behind.
	p, err := serveProgress(c.bindAddr(c.metricsPort))
	if err != nil {
		return err
	}
	t.progress = p
	if c.rank == 0 {
		t.runLog = openRunLog()
		if t.ckpts, err = openCheckpoints(t.ctx, c.checkpointAt); err != nil {
			return err
		}
		t.checkpointOnSigterm()
	}
	c.fail.inject(c.rank, 0, os.Getenv("RESUME_FROM") != "")
	master := net.JoinHostPort(c.masterAddr, strconv.Itoa(c.masterPort))
	g, err := rendezvous(c.rank, c.world, c.bindAddr(c.masterPort), master, c.rendezvousTO)
	if err != nil {
		return err
	}
	defer g.close()
	t.g = g
	start, err := t.resume()
	if err != nil {
		return err
	}
	for epoch := start + 1; epoch <= c.epochs; epoch++ {
		c.fail.inject(c.rank, epoch, start > 0)
		if err := t.epoch(epoch); err != nil {
			if c.blockOnPeerLoss {
				fmt.Fprintf(os.Stderr, "trainer: %v; blocking, as a rank in a collective does until its timeout\n", err)
				select {}
			}
			return err
		}
		time.Sleep(c.epochDelay)
	}
	if c.rank == 0 {
		fmt.Printf("training complete: %d epochs on %d ranks\n", c.epochs, c.world)
	}
	return nil
}

// resume loads rank 0's checkpoint (RESUME_FROM, else the newest complete one where checkpoints go) and
// gives every rank its weights; it returns the epoch training continues after.
func (t *trainer) resume() (int, error) {
	state := make([]float64, len(t.w)+2)
	if t.c.rank == 0 {
		var from string
		err := t.waitForStorage("finding the checkpoint to resume from", func() (err error) { from, err = t.resumeFrom(); return err })
		if err != nil {
			return 0, err
		}
		if from != "" {
			var ck modelState
			err := t.waitForStorage("reading "+from, func() (err error) { ck, err = loadCheckpoint(t.ctx, from); return err })
			if err != nil {
				return 0, err
			}
			if len(ck.Weights) != len(t.w) {
				return 0, fmt.Errorf("checkpoint %s has %d weights, the model %d", from, len(ck.Weights), len(t.w))
			}
			copy(state, ck.Weights)
			state[len(t.w)], state[len(t.w)+1] = float64(ck.Epoch), float64(ck.Step)
			fmt.Printf("resuming from %s (epoch %d, step %d, loss %.4f)\n", from, ck.Epoch, ck.Step, ck.Loss)
		}
	}
	if err := t.g.broadcast(state); err != nil {
		return 0, err
	}
	copy(t.w, state)
	t.resumeStep = int64(state[len(t.w)+1])
	return int(state[len(t.w)]), nil
}

// waitForStorage runs f until it succeeds, for as long as it fails because the storage cannot be reached
// (an outage, a restart), up to --storage-wait; other errors (a refused credential, a missing object) end
// it at once.
func (t *trainer) waitForStorage(what string, f func() error) error {
	deadline := time.Now().Add(t.c.storageWait)
	for {
		err := f()
		if err == nil || !unreachable(err) || time.Now().After(deadline) {
			return err
		}
		fmt.Fprintf(os.Stderr, "trainer: %s: storage unreachable, retrying: %v\n", what, err)
		time.Sleep(time.Second)
	}
}

// unreachable reports whether the error is a failure to reach the storage, not an answer from it.
func unreachable(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

func (t *trainer) resumeFrom() (string, error) {
	if t.c.resume != "" || t.ckpts == nil {
		return t.c.resume, nil
	}
	return t.ckpts.latest(t.ctx)
}

// epoch runs one pass over every rank's shard: one all-reduced gradient step per batch, then the loss
// and accuracy over all ranks.
func (t *trainer) epoch(epoch int) error {
	begin := time.Now()
	d := len(t.w)
	steps := (len(t.shard.x) + t.c.batch - 1) / t.c.batch
	vec := make([]float64, d+1)
	first := max(0, int(t.resumeStep)-(epoch-1)*steps) // steps of this epoch a mid-epoch checkpoint holds
	t.resumeStep = 0
	for s := first; s < steps; s++ {
		clear(vec)
		vec[d] = t.shard.gradient(t.w, s*t.c.batch, min((s+1)*t.c.batch, len(t.shard.x)), vec[:d])
		// The step counts once this rank's part is done: a rank stuck before it stays a step behind the
		// others, which wait in the all-reduce.
		t.progress.set("training_step", float64((epoch-1)*steps+s+1))
		if err := t.g.allReduce(vec); err != nil {
			return err
		}
		for j := 0; j < d; j++ {
			t.w[j] -= t.c.lr * vec[j] / vec[d]
		}
		if t.c.rank == 0 {
			t.snap.take(epoch-1, int64((epoch-1)*steps+s+1), t.w)
		}
	}
	loss, correct, n := t.shard.evaluate(t.w)
	stats := []float64{loss, correct, n}
	if err := t.g.allReduce(stats); err != nil {
		return err
	}
	if t.c.rank != 0 {
		t.progress.set("training_epoch", float64(epoch))
		return nil
	}
	t.runLog.epoch(epoch, time.Since(begin))
	return t.report(epoch, steps, stats[0]/stats[2], stats[1]/stats[2], stats[2]/time.Since(begin).Seconds())
}

// report logs and exposes rank 0's progress and writes a checkpoint when one is due.
func (t *trainer) report(epoch, steps int, loss, acc, rate float64) error {
	fmt.Printf("epoch %d/%d loss=%.6f accuracy=%.4f samples_per_second=%.0f\n", epoch, t.c.epochs, loss, acc, rate)
	p := t.progress
	p.set("training_epoch", float64(epoch))
	p.set("training_epochs_total", float64(t.c.epochs))
	p.set("training_step", float64(epoch*steps))
	p.set("training_steps_total", float64(t.c.epochs*steps))
	p.set("training_loss", loss)
	p.set("training_accuracy", acc)
	p.set("training_learning_rate", t.c.lr)
	p.set("training_samples_per_second", rate)
	p.set("training_world_size", float64(t.c.world))
	if t.ckpts == nil || (epoch%t.c.frequency != 0 && epoch != t.c.epochs) {
		return nil
	}
	t.snap.take(epoch, int64(epoch*steps), t.w)
	dir, err := t.ckpts.save(t.ctx, modelState{Epoch: epoch, Weights: t.w, Loss: loss, Accuracy: acc, LearningRate: t.c.lr}, ckpt.Dir(epoch))
	if err != nil {
		// The storage may come back: losing one checkpoint costs less than the run. The checkpoint agent
		// reports the storage's error on the TrainingJob meanwhile.
		fmt.Fprintf(os.Stderr, "trainer: checkpoint of epoch %d not written, training goes on: %v\n", epoch, err)
		return nil
	}
	p.set("training_checkpoint_epoch", float64(epoch))
	fmt.Printf("checkpoint %s\n", dir)
	return nil
}
