"""Checkpoints at preemption: rank 0's side of the TrainingJob contract, and the order of the checkpoint
names it adds (position, newest_checkpoint). Standard library only.

With checkpoint.onPreemption the operator sets TRAININGJOB_CHECKPOINT_ON_SIGTERM=1 and gives the workers
checkpoint.preemptionGraceSeconds between SIGTERM and SIGKILL. Rank 0 answers SIGTERM with a checkpoint of
its last consistent position, then exits 143:

    from trainingjob_preemption import Preemption   # or, in the runner package: from trainingjob_runner.preemption import Preemption
    preemption = Preemption(rank, lambda epochs, step: save(model, epochs, step), at=(start, step))
    with preemption.guard():          # a collective that fails because this process is being stopped
        for batch in data:
            preemption.check()        # SIGTERM since the last step: write preemption.at, exit 143
            train_step(batch)
            preemption.at = (epochs_done, global_step)

write(epochs, step) writes checkpoint-epoch-<epochs>-step-<step> (after that many epochs, at that global
step) with its _COMPLETE marker last and returns its path.
"""

import contextlib
import glob
import os
import re
import signal
import sys
import time


CHECKPOINT_NAME = re.compile(r"checkpoint-epoch-(\d+)(?:-step-(\d+))?$")


def position(path):
    """(epoch, step) of a checkpoint directory: checkpoint-epoch-<E>, or checkpoint-epoch-<E>-step-<S> for one
    written at preemption (after E epochs, at global step S: after its epoch's, before the next one); None
    when the name is neither."""
    m = CHECKPOINT_NAME.search(path.rstrip("/"))
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


def newest_checkpoint(root):
    """The newest complete checkpoint directory under root (one with its _COMPLETE marker), or ""."""
    best, at = "", None
    for marker in glob.glob(os.path.join(root, "checkpoint-epoch-*", "_COMPLETE")) if root else []:
        p = position(os.path.dirname(marker))
        if p is not None and (at is None or p > at):
            best, at = os.path.dirname(marker), p
    return best


class Preemption:
    """The handler only takes note of SIGTERM; check() writes the checkpoint at the next step boundary. When
    the stop takes the peers too, the collective rank 0 waits in fails first: guard() then waits a moment
    for this process's own SIGTERM and writes the same position (no optimizer step was half done)."""

    def __init__(self, rank, write, at=(0, 0)):
        self.enabled = rank == 0 and bool(os.environ.get("CHECKPOINT_DIR")) and os.environ.get("TRAININGJOB_CHECKPOINT_ON_SIGTERM") == "1"
        self.write, self.at, self.requested = write, at, False
        if self.enabled:
            signal.signal(signal.SIGTERM, self._request)

    def _request(self, *_):
        self.requested = True

    def check(self):
        if self.requested:
            epochs, step = self.at
            path = self.write(epochs, step)
            print("SIGTERM: checkpoint %s written at preemption (epoch %d, step %d)" % (path, epochs + 1, step), flush=True)
            sys.exit(143)

    @contextlib.contextmanager
    def guard(self, seconds=5.0):
        """Runs collectives: a failure while this process is being stopped (SIGTERM within seconds) checkpoints."""
        try:
            yield
        except RuntimeError:
            deadline = time.time() + seconds
            while self.enabled and not self.requested and time.time() < deadline:
                time.sleep(0.05)
            if not self.requested:
                raise
            self.check()
