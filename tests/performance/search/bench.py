"""The same hyperparameter search with and without pruning, on the local stack: worker-seconds spent, the best
objective reached and the time to reach it. Writes a Markdown report (make bench-search: bin/search-bench.md).

    python3 tests/performance/search/bench.py --kubeconfig K --report R   # a running cluster
    python3 tests/performance/search/bench.py --report R                  # starts bin/trainingjob-local up
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "sdk" / "python"))

import optuna  # noqa: E402
from kubernetes import client as k8s  # noqa: E402

from trainingjob import Client, search  # noqa: E402


def template(epochs: int) -> dict[str, Any]:
    return {"apiVersion": "ml.example.com/v1", "kind": "TrainingJob", "metadata": {"name": "bench"},
            "spec": {"numWorkers": 2, "gpusPerWorker": 0, "image": "ghcr.io/trainingjob-operator/example-trainer:v0.1.0",
                     "command": ["trainer"], "args": ["--epoch-delay=1s"], "hyperparameters": {"epochs": epochs}}}


def run(c: Client, name: str, pruner: optuna.pruners.BasePruner, n: int, par: int, epochs: int, seed: int) -> dict[str, Any]:
    ends: dict[int, float] = {}
    start = time.monotonic()
    result = c.optimize(template(epochs), {"learningRate": optuna.distributions.FloatDistribution(1e-3, 10, log=True)},
                        n_trials=n, parallelism=par, study_name=name, pruner=pruner,
                        sampler=optuna.samplers.TPESampler(seed=seed, constant_liar=True),
                        callback=lambda row: ends.__setitem__(row.number, time.monotonic() - start))
    wall = time.monotonic() - start
    best = result.best_number
    # The time the best value was first reached: the first trial to end with a value as good as the best's.
    reach = min((ends[t.number] for t in result.trials if t.value is not None and t.state == "COMPLETE"
                 and t.value <= (result.best_value or 0) + 1e-12), default=float("nan"))
    return {"result": result, "wall": wall, "reach": reach if best is not None else float("nan"),
            "worker_s": sum(t.worker_seconds for t in result.trials),
            "pruned": sum(t.state == "PRUNED" for t in result.trials)}


def stack() -> tuple[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="search-bench-"))
    assets = os.environ.get("KUBEBUILDER_ASSETS") or subprocess.run(
        [str(REPO / "hack/testbin.sh"), "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"],
        check=True, capture_output=True, text=True).stdout.strip()
    log = open(state / "up.log", "wb")
    proc = subprocess.Popen([str(REPO / "bin/trainingjob-local"), "up", "--assets", assets, "--path", str(REPO / "bin"),
                             "--state-dir", str(state), "--nodes", "2", "--progress-interval", "1s"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    while b"are up" not in (state / "up.log").read_bytes():
        if proc.poll() is not None:
            sys.exit((state / "up.log").read_text())
        time.sleep(0.5)
    return str(state / "kubeconfig"), proc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kubeconfig")
    ap.add_argument("--report", default=str(REPO / "bin/search-bench.md"))
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--parallelism", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    proc = None
    kubeconfig = a.kubeconfig
    if not kubeconfig:
        kubeconfig, proc = stack()
    try:
        ns = f"search-bench-{uuid.uuid4().hex[:6]}"
        c = Client(namespace=ns, kubeconfig=kubeconfig)
        k8s.CoreV1Api(c.api_client).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
        rows = {}
        for label, pruner in (("median pruner", optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=2)),
                              ("no pruning", optuna.pruners.NopPruner())):
            rows[label] = run(c, label.replace(" ", "-"), pruner, a.trials, a.parallelism, a.epochs, a.seed)
        on, off = rows["median pruner"], rows["no pruning"]
        lines = [f"# Hyperparameter search: pruning against none ({a.trials} trials, parallelism {a.parallelism}, "
                 f"{a.epochs} epochs of 1 s, 2 workers, TPE seed {a.seed})", "",
                 "| search | worker-seconds | pruned trials | best loss | best learning rate | time to the best (s) | wall (s) |",
                 "|---|---|---|---|---|---|---|"]
        for label, r in rows.items():
            res = r["result"]
            lines.append(f"| {label} | {r['worker_s']:.0f} | {r['pruned']} | {res.best_value:.4f} | "
                         f"{res.best_params.get('learningRate', float('nan')):.3g} | {r['reach']:.0f} | {r['wall']:.0f} |")
        lines += ["", f"Pruning spent {on['worker_s'] / off['worker_s']:.2f}x the worker-seconds and "
                  f"{on['wall'] / off['wall']:.2f}x the wall time; best loss {on['result'].best_value:.4f} against "
                  f"{off['result'].best_value:.4f}.", "", "## Trials, with pruning", "", "```",
                  on["result"].table(), "```", "", "## Trials, without pruning", "", "```", off["result"].table(), "```"]
        Path(a.report).parent.mkdir(parents=True, exist_ok=True)
        Path(a.report).write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        k8s.CoreV1Api(c.api_client).delete_namespace(ns)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)


if __name__ == "__main__":
    main()
