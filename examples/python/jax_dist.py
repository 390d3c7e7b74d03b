"""Multi-process JAX under the TrainingJob environment contract (framework: jax).

jax.distributed.initialize reads JAX_COORDINATOR_ADDRESS and JAX_COORDINATOR_BIND_ADDRESS itself; the
process count and id come from JAX_NUM_PROCESSES and JAX_PROCESS_ID (JAX does not read those). Every
process fits y = x.w + b on its shard of a synthetic set; the gradients are averaged across all processes
with a pmap'ed psum (NCCL on GPUs, gloo on CPUs). Rank 0 reports progress with trainingjob_progress and
writes checkpoint-epoch-<N>/params.npz then _COMPLETE into CHECKPOINT_DIR; every process resumes from
RESUME_FROM. With TRAININGJOB_CHECKPOINT_ON_SIGTERM=1 (checkpoint.onPreemption) rank 0 answers SIGTERM at the
next step boundary with checkpoint-epoch-<E>-step-<S> (after E epochs, at global step S) and exits 143; a run
resumed from one skips the steps it holds. At the end every process prints its parameters' checksum: equal
everywhere.

Not run on this project's CI machines (no JAX there): see the README's "Frameworks" table.
"""

import functools
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainingjob_preemption import Preemption  # noqa: E402
from trainingjob_progress import Progress  # noqa: E402

if os.environ.get("DIST_BACKEND", "gloo") != "nccl":
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # cross-process collectives on CPUs


STEPS = 20  # per epoch


def save(p, epoch, step=None):
    """Rank 0 writes checkpoint-epoch-<epoch>[-step-<step>]/params.npz, then the _COMPLETE marker."""
    path = os.path.join(os.environ["CHECKPOINT_DIR"], "checkpoint-epoch-%d" % epoch + ("-step-%d" % step if step is not None else ""))
    os.makedirs(path, exist_ok=True)
    np.savez(os.path.join(path, "params.npz"), w=np.asarray(p["w"][0]), b=np.asarray(p["b"][0]), epoch=epoch, step=step or 0)
    with open(os.path.join(path, "_COMPLETE"), "w") as f:
        json.dump({"epoch": epoch, "step": step or 0, "time": time.time()}, f)
    return path


def main():
    jax.distributed.initialize(num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
                               process_id=int(os.environ["JAX_PROCESS_ID"]))
    rank, world = jax.process_index(), jax.process_count()
    epochs = int(os.environ.get("EPOCHS", "5"))
    rng = np.random.default_rng(11)
    x = rng.normal(size=(4096, 8)).astype(np.float32)
    y = x @ np.arange(1.0, 9.0, dtype=np.float32) - 2.0
    x, y = x[rank::world], y[rank::world]
    params = {"w": np.zeros(8, np.float32), "b": np.zeros((), np.float32)}
    start, resume_step = 0, 0
    if os.environ.get("RESUME_FROM"):
        saved = np.load(os.path.join(os.environ["RESUME_FROM"], "params.npz"))
        params, start = {"w": saved["w"], "b": saved["b"]}, int(saved["epoch"])
        resume_step = int(saved["step"]) if "step" in saved.files else 0
        print("resumed from %s (epoch %d, step %d)" % (os.environ["RESUME_FROM"], start, resume_step), flush=True)

    def loss(p, xb, yb):
        return jnp.mean((xb @ p["w"] + p["b"] - yb) ** 2)

    @functools.partial(jax.pmap, axis_name="i")
    def step(p, xb, yb):
        value, grads = jax.value_and_grad(loss)(p, xb, yb)
        grads = jax.lax.pmean(grads, axis_name="i")
        return jax.tree_util.tree_map(lambda a, g: a - 0.05 * g, p, grads), jax.lax.pmean(value, axis_name="i")

    n = jax.local_device_count()
    replicate = lambda a: np.broadcast_to(a, (n,) + np.shape(a))  # noqa: E731
    p = jax.tree_util.tree_map(replicate, params)
    xs, ys = np.array_split(x, n), np.array_split(y, n)
    m = min(len(s) for s in xs)
    xb, yb = np.stack([s[:m] for s in xs]), np.stack([s[:m] for s in ys])
    progress = Progress(total_epochs=epochs)
    every = int(os.environ.get("CHECKPOINT_FREQUENCY", "1") or 1)
    preemption = Preemption(rank, lambda epochs, at: save(p, epochs, at))  # p: the parameters after the last step
    for epoch in range(start + 1, epochs + 1):
        began = time.time()
        done = max(0, resume_step - (epoch - 1) * STEPS)  # the steps of this epoch a preemption checkpoint holds
        for k in range(done, STEPS):
            preemption.at = (epoch - 1, (epoch - 1) * STEPS + k)
            preemption.check()
            p, value = step(p, xb, yb)
        value = float(value[0]) if done < STEPS else float("nan")
        progress.report(epoch=epoch, loss=value, samples_per_second=(STEPS - done) * len(x) * world / max(time.time() - began, 1e-9))
        if rank == 0:
            print("epoch %d/%d loss=%.6f" % (epoch, epochs, value), flush=True)
            if os.environ.get("CHECKPOINT_DIR") and (epoch % every == 0 or epoch == epochs):
                save(p, epoch)
    checksum = float(np.sum(np.asarray(p["w"][0])) + np.asarray(p["b"][0]))
    print("rank %d of %d checksum %.8f" % (rank, world, checksum), flush=True)
    progress.close()
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
