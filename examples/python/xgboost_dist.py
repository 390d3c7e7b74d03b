"""Distributed XGBoost under the TrainingJob environment contract (framework: xgboost).

Rank 0 starts the Rabit tracker on MASTER_PORT (listening on POD_IP); every rank, rank 0 included, joins
it through the DMLC_* variables the operator sets (DMLC_TRACKER_URI, DMLC_TRACKER_PORT, DMLC_TASK_ID,
DMLC_NUM_WORKER) and trains on its shard of a synthetic regression set: the histograms are all-reduced,
so every rank ends with the same model. Rank 0 reports one epoch per boosting round with
trainingjob_progress, writes a checkpoint every CHECKPOINT_FREQUENCY rounds
(CHECKPOINT_DIR/checkpoint-epoch-<N>/model.json, then _COMPLETE) and every rank resumes from RESUME_FROM.
With TRAININGJOB_CHECKPOINT_ON_SIGTERM=1 (checkpoint.onPreemption) rank 0 answers SIGTERM by checkpointing
the rounds done at the end of the current one (a round is the unit: no partial state) and exits 143.

    python3 examples/python/xgboost_dist.py --rounds 20      # see examples/xgboost.yaml

At the end every rank prints its model's checksum: equal on every rank, or the ranks did not train together.
"""

import argparse
import hashlib
import json
import os
import signal
import sys
import threading
import time

import numpy as np
import xgboost as xgb
from xgboost import collective
from xgboost.tracker import RabitTracker

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainingjob_progress import Progress  # noqa: E402


def start_tracker(world):
    """Rank 0 runs the tracker for the whole run, in a thread."""
    tracker = RabitTracker(host_ip=os.environ.get("POD_IP") or "0.0.0.0", n_workers=world,
                           port=int(os.environ["DMLC_TRACKER_PORT"]))
    tracker.start(world)
    thread = threading.Thread(target=tracker.join, daemon=True)
    thread.start()
    return thread


def shard(rank, world, samples):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(samples, 6))
    y = x @ np.arange(1.0, 7.0) + rng.normal(scale=0.1, size=samples)
    return x[rank::world], y[rank::world]


class Report(xgb.callback.TrainingCallback):
    """Progress and checkpoints after every boosting round; on SIGTERM (preemption, rank 0) a checkpoint of
    the rounds done, then exit 143."""

    def __init__(self, progress, rank, every, first, delay):
        self.progress, self.rank, self.every, self.first, self.delay = progress, rank, every, first, delay
        self.sigterm = False
        if rank == 0 and os.environ.get("CHECKPOINT_DIR") and os.environ.get("TRAININGJOB_CHECKPOINT_ON_SIGTERM") == "1":
            signal.signal(signal.SIGTERM, self._sigterm)

    def _sigterm(self, *_):
        self.sigterm = True

    def after_iteration(self, model, epoch, evals_log):
        done = self.first + epoch + 1
        rmse = evals_log["train"]["rmse"][-1]
        self.progress.report(epoch=done, loss=rmse)
        if self.rank == 0 and (done % self.every == 0 or self.sigterm):
            path = save(model, done)
            if self.sigterm:
                print("SIGTERM: checkpoint %s written at preemption (round %d)" % (path, done), flush=True)
                os._exit(143)  # not sys.exit: leaving the communicator would wait for the other ranks
        time.sleep(self.delay)
        return False


def save(model, rounds):
    root = os.environ.get("CHECKPOINT_DIR", "")
    if not root:
        return ""
    path = os.path.join(root, "checkpoint-epoch-%d" % rounds)
    os.makedirs(path, exist_ok=True)
    model.save_model(os.path.join(path, "model.json"))
    with open(os.path.join(path, "_COMPLETE"), "w") as f:
        json.dump({"epoch": rounds, "time": time.time()}, f)
    return path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--round-delay", type=float, default=0.0, help="seconds to wait after each round (demos, tests)")
    args = parser.parse_args()
    rank, world = int(os.environ["DMLC_TASK_ID"]), int(os.environ["DMLC_NUM_WORKER"])
    tracker = start_tracker(world) if rank == 0 else None
    with collective.CommunicatorContext(dmlc_tracker_uri=os.environ["DMLC_TRACKER_URI"],
                                        dmlc_tracker_port=int(os.environ["DMLC_TRACKER_PORT"]),
                                        dmlc_task_id=str(rank)):
        x, y = shard(collective.get_rank(), collective.get_world_size(), args.samples)
        resume_from = os.environ.get("RESUME_FROM", "")
        model = os.path.join(resume_from, "model.json") if resume_from else None
        first = xgb.Booster(model_file=model).num_boosted_rounds() if model else 0
        progress = Progress(total_epochs=args.rounds)
        every = int(os.environ.get("CHECKPOINT_FREQUENCY", "5") or 5)
        booster = xgb.train({"tree_method": "hist", "objective": "reg:squarederror", "max_depth": 4},
                            xgb.DMatrix(x, label=y), num_boost_round=args.rounds - first, xgb_model=model,
                            evals=[(xgb.DMatrix(x, label=y), "train")], verbose_eval=False,
                            callbacks=[Report(progress, rank, every, first, args.round_delay)])
        if rank == 0:
            save(booster, args.rounds)
        checksum = hashlib.sha256(booster.save_raw("json")).hexdigest()[:16]
        print("rank %d of %d: %d rounds, model %s" % (rank, world, booster.num_boosted_rounds(), checksum), flush=True)
        progress.close()
    if tracker:
        tracker.join()


if __name__ == "__main__":
    main()
