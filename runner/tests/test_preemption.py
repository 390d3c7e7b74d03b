"""Unit tests of the checkpoint-at-preemption helper: standard library only.

    python3 -m unittest discover -s runner/tests
"""

import os
import signal
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from trainingjob_runner import preemption  # noqa: E402


def checkpoint(root, name, complete=True):
    path = os.path.join(root, name)
    os.makedirs(path)
    if complete:
        open(os.path.join(path, "_COMPLETE"), "w").close()
    return path


class PositionTest(unittest.TestCase):
    def test_order(self):
        cases = [("checkpoint-epoch-3", (3, 0)), ("/c/ns/job/checkpoint-epoch-3-step-1200/", (3, 1200)),
                 ("checkpoint-epoch-x", None), ("model.pt", None)]
        for name, want in cases:
            self.assertEqual(preemption.position(name), want, name)
        # A mid-epoch checkpoint stands after its epoch's and before the next epoch's.
        self.assertLess(preemption.position("checkpoint-epoch-3"), preemption.position("checkpoint-epoch-3-step-1200"))
        self.assertLess(preemption.position("checkpoint-epoch-3-step-1200"), preemption.position("checkpoint-epoch-4"))

    def test_newest_complete(self):
        with tempfile.TemporaryDirectory() as root:
            self.assertEqual(preemption.newest_checkpoint(root), "")
            checkpoint(root, "checkpoint-epoch-10")
            want = checkpoint(root, "checkpoint-epoch-10-step-330")
            checkpoint(root, "checkpoint-epoch-11", complete=False)  # being written
            checkpoint(root, "checkpoint-epoch-9")
            self.assertEqual(preemption.newest_checkpoint(root), want)
        self.assertEqual(preemption.newest_checkpoint(""), "")


class PreemptionTest(unittest.TestCase):
    def setUp(self):
        self.previous = signal.getsignal(signal.SIGTERM)
        self.addCleanup(signal.signal, signal.SIGTERM, self.previous)

    def test_sigterm_writes_the_last_position_and_exits_143(self):
        written = []
        with mock.patch.dict(os.environ, {"CHECKPOINT_DIR": "/ckpt", "TRAININGJOB_CHECKPOINT_ON_SIGTERM": "1"}):
            p = preemption.Preemption(0, lambda epochs, step: written.append((epochs, step)) or "/ckpt/x", at=(2, 64))
        p.check()  # no SIGTERM yet
        self.assertEqual(written, [])
        p.at = (2, 70)
        os.kill(os.getpid(), signal.SIGTERM)
        with self.assertRaises(SystemExit) as exited:
            p.check()
        self.assertEqual((exited.exception.code, written), (143, [(2, 70)]))

    def test_a_failed_collective_while_stopping_checkpoints(self):
        written = []
        with mock.patch.dict(os.environ, {"CHECKPOINT_DIR": "/ckpt", "TRAININGJOB_CHECKPOINT_ON_SIGTERM": "1"}):
            p = preemption.Preemption(0, lambda epochs, step: written.append((epochs, step)) or "/ckpt/x", at=(1, 5))
        with self.assertRaises(SystemExit):
            with p.guard(seconds=5):
                os.kill(os.getpid(), signal.SIGTERM)
                raise RuntimeError("Connection closed by peer")
        self.assertEqual(written, [(1, 5)])

    def test_off_a_failed_collective_is_raised(self):
        for rank, env in [(0, {"CHECKPOINT_DIR": "/ckpt"}), (1, {"CHECKPOINT_DIR": "/ckpt", "TRAININGJOB_CHECKPOINT_ON_SIGTERM": "1"})]:
            with mock.patch.dict(os.environ, env, clear=True):
                p = preemption.Preemption(rank, lambda epochs, step: self.fail("written"))
            self.assertFalse(p.enabled)
            with self.assertRaises(RuntimeError):
                with p.guard():
                    raise RuntimeError("Connection closed by peer")


if __name__ == "__main__":
    unittest.main()
