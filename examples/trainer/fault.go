package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// fault is an injected failure: rank exits with code as epoch starts. A code above 128 is a death by
// signal code-128 (137: SIGKILL, as an OOM kill), the others a plain exit, as a Python exception's 1;
// code 0 (--hang-at) is a hang: the rank stops working and never exits, as a rank stuck in a collective
// or a deadlocked data loader (its peers then block in the next all-reduce). Epoch 0 is the rendezvous:
// a rank that hangs there never joins, as one whose rendezvous address does not resolve.
type fault struct {
	rank, epoch, code int
	set, always       bool
}

func (f *fault) String() string {
	if !f.set {
		return ""
	}
	return fmt.Sprintf("%d:%d:%d", f.rank, f.epoch, f.code)
}

// hang is --hang-at=RANK:EPOCH, a fault of code 0.
type hang struct{ f *fault }

func (h hang) String() string {
	if h.f == nil || !h.f.set {
		return ""
	}
	return fmt.Sprintf("%d:%d", h.f.rank, h.f.epoch)
}

func (h hang) Set(v string) error { return h.f.Set(v + ":0") }

// Set parses RANK:EPOCH:CODE.
func (f *fault) Set(v string) error {
	parts := strings.Split(v, ":")
	if len(parts) != 3 {
		return fmt.Errorf("want RANK:EPOCH:CODE, got %q", v)
	}
	var n [3]int
	for i, p := range parts {
		var err error
		if n[i], err = strconv.Atoi(p); err != nil {
			return fmt.Errorf("want RANK:EPOCH:CODE, got %q", v)
		}
	}
	f.rank, f.epoch, f.code, f.set = n[0], n[1], n[2], true
	return nil
}

// inject fails the process when the fault is due.
func (f *fault) inject(rank, epoch int, resumed bool) {
	if !f.set || rank != f.rank || epoch != f.epoch || (resumed && !f.always) {
		return
	}
	if f.code == 0 {
		at := fmt.Sprintf("epoch %d", epoch)
		if epoch == 0 {
			at = "the rendezvous"
		}
		fmt.Fprintf(os.Stderr, "trainer: injected hang at %s\n", at)
		for { // a sleeping goroutine, not select{}: with no other goroutine Go would end a blocked process (deadlock)
			time.Sleep(time.Hour)
		}
	}
	fmt.Fprintf(os.Stderr, "trainer: injected fault at epoch %d: exit code %d\n", epoch, f.code)
	if f.code > 128 {
		_ = syscall.Kill(os.Getpid(), syscall.Signal(f.code-128))
		select {} // the signal ends the process
	}
	os.Exit(f.code)
}
