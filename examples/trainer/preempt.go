package main

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	ckpt "github.com/trainingjob-operator/trainingjob-operator/checkpoint"
)

// snapshot is rank 0's last consistent state, taken after every step: what a checkpoint written at
// preemption holds. The training loop may be blocked in a collective when SIGTERM comes (a peer was
// stopped first), so the handler writes the snapshot rather than waiting for the loop.
type snapshot struct {
	mu    sync.Mutex
	epoch int   // complete epochs
	step  int64 // global training step
	w     []float64
	loss  float64
}

func (s *snapshot) take(epoch int, step int64, w []float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch, s.step = epoch, step
	s.w = append(s.w[:0], w...)
}

// checkpointOnSigterm (TRAININGJOB_CHECKPOINT_ON_SIGTERM=1, checkpoint.onPreemption) makes rank 0 write a
// complete checkpoint of its last consistent state when it gets SIGTERM, then exit 143 as a process
// killed by SIGTERM does: the worker is being stopped (a preemption, an eviction, a drain, a gang
// restart) and the next attempt resumes from it.
func (t *trainer) checkpointOnSigterm() {
	if t.c.rank != 0 || t.ckpts == nil || os.Getenv("TRAININGJOB_CHECKPOINT_ON_SIGTERM") != "1" {
		return
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() {
		<-sig
		t.snap.mu.Lock()
		m := modelState{Epoch: t.snap.epoch, Step: t.snap.step, Weights: t.snap.w, Loss: t.snap.loss, LearningRate: t.c.lr}
		if m.Weights == nil {
			fmt.Fprintln(os.Stderr, "trainer: SIGTERM before the first step: no checkpoint to write")
			os.Exit(143)
		}
		dir, err := t.ckpts.save(t.ctx, m, ckpt.StepDir(m.Epoch, m.Step))
		if err != nil {
			fmt.Fprintf(os.Stderr, "trainer: SIGTERM: checkpoint not written: %v\n", err)
		} else {
			fmt.Printf("SIGTERM: checkpoint %s written at preemption (epoch %d, step %d)\n", dir, m.Epoch+1, m.Step)
		}
		os.Exit(143)
	}()
}
