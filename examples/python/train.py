"""Worked example: a training script that reports progress with trainingjob_progress.

Every rank fits y = 3x - 2 by stochastic gradient descent on its own shard of a synthetic dataset (plain
Python, no framework); rank 0 reports epoch, loss and throughput. Run it as a TrainingJob on the local
stack (examples/trainingjob-python.yaml) or by hand:

    METRICS_PORT=8080 python3 examples/python/train.py --epochs 5
    curl -s localhost:8080/metrics
"""

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainingjob_progress import Progress  # noqa: E402


def hyperparameters():
    path = os.environ.get("TRAININGJOB_CONFIG", "")
    if path and os.path.exists(path):
        with open(path) as f:
            return json.load(f).get("hyperparameters") or {}
    return {}


def mlflow_run(rank):
    """The MLflow run the operator keeps for this job, on rank 0, when the job is tracked and the mlflow
    package is installed; else None.

    The operator creates the run (tags, hyperparameters as params) and logs the progress metrics reported
    below with step = epoch. It gives every worker MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_ID and
    MLFLOW_RUN_ID (and MLFLOW_TRACKING_TOKEN or _USERNAME/_PASSWORD when the job names a Secret), so
    mlflow.start_run() continues that run instead of starting another: log only what the operator cannot
    see (here the epoch's wall time), or artifacts. The operator records the run's end (FINISHED, FAILED,
    KILLED) when the job ends, whatever mlflow's exit hook sets.
    """
    if rank != 0 or not os.environ.get("MLFLOW_RUN_ID"):
        return None
    try:
        import mlflow
    except ImportError:
        return None
    return mlflow.start_run()


def main():
    hp = hyperparameters()
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=hp.get("epochs", 10))
    parser.add_argument("--learning-rate", type=float, default=hp.get("learningRate", 0.0005))
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--epoch-delay", type=float, default=0.0)
    args = parser.parse_args()

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    rng = random.Random(42)
    data = [(x, 3 * x - 2 + rng.gauss(0, 0.1)) for x in (rng.uniform(-1, 1) for _ in range(args.samples))]
    shard = data[rank::world]

    progress = Progress(total_epochs=args.epochs)
    run = mlflow_run(rank)
    w, b = 0.0, 0.0
    for epoch in range(1, args.epochs + 1):
        start = time.time()
        for x, y in shard:
            err = w * x + b - y
            w -= args.learning_rate * err * x
            b -= args.learning_rate * err
        loss = sum((w * x + b - y) ** 2 for x, y in shard) / len(shard)
        rate = len(shard) * world / max(time.time() - start, 1e-9)
        progress.report(epoch=epoch, loss=loss, learning_rate=args.learning_rate, samples_per_second=rate, weight=w)
        if rank == 0:
            print("epoch %d/%d loss=%.6f w=%.3f b=%.3f" % (epoch, args.epochs, loss, w, b), flush=True)
        if run is not None:
            import mlflow

            mlflow.log_metric("epoch_seconds", time.time() - start, step=epoch)
        time.sleep(args.epoch_delay)
    progress.close()


if __name__ == "__main__":
    main()
