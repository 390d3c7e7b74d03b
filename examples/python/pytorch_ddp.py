"""PyTorch DistributedDataParallel under the TrainingJob environment contract, nothing else.

Every rank trains a small MLP on its shard of a synthetic regression set (no download); gradients are
averaged by DDP (gloo on CPU, nccl with GPUs: DIST_BACKEND). Rank 0 reports progress with
trainingjob_progress and writes a checkpoint every CHECKPOINT_FREQUENCY epochs in the documented layout
(CHECKPOINT_DIR/checkpoint-epoch-<N>/model.pt, then the _COMPLETE marker); every rank resumes from
RESUME_FROM when it is set. With TRAININGJOB_CHECKPOINT_ON_SIGTERM=1 (checkpoint.onPreemption) rank 0 answers
SIGTERM with a checkpoint of its last consistent step (checkpoint-epoch-<E>-step-<S>) and exits 143; a run
resumed from one skips the batches it holds. Start it either way (examples/pytorch-ddp.yaml):

    torchrun examples/python/pytorch_ddp.py     # torchrun reads PET_NNODES, PET_NODE_RANK, PET_MASTER_*
    python3 examples/python/pytorch_ddp.py      # init_method="env://": RANK, WORLD_SIZE, MASTER_*

At the end every rank prints its parameters' checksum: equal on every rank, or DDP did not synchronise.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainingjob_preemption import Preemption, newest_checkpoint, position  # noqa: E402
from trainingjob_progress import Progress  # noqa: E402


def hyperparameters():
    path = os.environ.get("TRAININGJOB_CONFIG", "")
    if path and os.path.exists(path):
        with open(path) as f:
            return json.load(f).get("hyperparameters") or {}
    return {}


def device():
    if os.environ.get("DIST_BACKEND") == "nccl" and torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def dataset(rank, world, samples):
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(samples, 8, generator=g)
    y = x @ torch.arange(1.0, 9.0).unsqueeze(1) - 2.0 + 0.01 * torch.randn(samples, 1, generator=g)
    return x[rank::world], y[rank::world]


def resume(model, optimizer):
    """(epochs done, global step) to start after: the newer of RESUME_FROM (set when the workers' pods
    started) and the newest checkpoint in CHECKPOINT_DIR (written since: torchrun restarts its workers in
    place after a failure or, in an elastic job, a change of membership); none: start fresh."""
    candidates = [c for c in (os.environ.get("RESUME_FROM", ""), newest_checkpoint(os.environ.get("CHECKPOINT_DIR", ""))) if position(c)]
    if not candidates:
        return 0, 0
    src = max(candidates, key=position)
    state = torch.load(os.path.join(src, "model.pt"), map_location="cpu")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    print("resumed from %s (epoch %d, step %d)" % (src, state["epoch"], state.get("step", 0)), flush=True)
    return state["epoch"], state.get("step", 0)


def save(model, optimizer, epoch, step=None):
    """Rank 0 writes checkpoint-epoch-<epoch>[-step-<step>]/model.pt, then the _COMPLETE marker (last: a
    checkpoint without it is never taken for a complete one)."""
    root = os.environ.get("CHECKPOINT_DIR", "")
    if not root:
        return ""
    path = os.path.join(root, "checkpoint-epoch-%d" % epoch + ("-step-%d" % step if step is not None else ""))
    os.makedirs(path, exist_ok=True)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch, "step": step or 0},
               os.path.join(path, "model.pt"))
    with open(os.path.join(path, "_COMPLETE"), "w") as f:
        json.dump({"epoch": epoch, "step": step or 0, "time": time.time()}, f)
    return path


def tensorboard_writer(rank):
    """Rank 0's TensorBoard SummaryWriter in TENSORBOARD_LOG_DIR (monitoring.tensorboardEnabled), when the
    tensorboard package is in the image; None otherwise."""
    log_dir = os.environ.get("TENSORBOARD_LOG_DIR", "")
    if not log_dir or rank != 0:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        print("TENSORBOARD_LOG_DIR is set but the tensorboard package is not installed: no TensorBoard events", flush=True)
        return None
    return SummaryWriter(log_dir)


def main():
    hp = hyperparameters()
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=hp.get("epochs", 5))
    parser.add_argument("--learning-rate", type=float, default=hp.get("learningRate", 0.01))
    parser.add_argument("--batch-size", type=int, default=hp.get("batchSize", 32))
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--epoch-delay", type=float, default=0.0, help="seconds to wait after each epoch (demos, tests)")
    args = parser.parse_args()

    dist.init_process_group(backend=os.environ.get("DIST_BACKEND", "gloo"), init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = device()
    torch.manual_seed(0)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(dev)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate)
    start, resume_step = resume(model, optimizer)
    ddp = DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    x, y = dataset(rank, world, args.samples)
    x, y = x.to(dev), y.to(dev)
    progress = Progress(total_epochs=args.epochs)
    board = tensorboard_writer(rank)
    every = int(os.environ.get("CHECKPOINT_FREQUENCY", "1") or 1)
    steps = -(-len(x) // args.batch_size)
    preemption = Preemption(rank, lambda epochs, step: save(model, optimizer, epochs, step), (start, resume_step or start * steps))
    for epoch in range(start + 1, args.epochs + 1):
        began = time.time()
        skip = max(0, resume_step - (epoch - 1) * steps)  # the steps of this epoch a preemption checkpoint holds
        with preemption.guard():
            for k, i in enumerate(range(0, len(x), args.batch_size)):
                if k < skip:
                    continue
                preemption.check()
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(ddp(x[i:i + args.batch_size]), y[i:i + args.batch_size])
                loss.backward()
                optimizer.step()
                preemption.at = (epoch - 1, (epoch - 1) * steps + k + 1)
            loss = torch.nn.functional.mse_loss(ddp(x), y).detach()
            dist.all_reduce(loss)
            loss = loss.item() / world
            progress.report(epoch=epoch, loss=loss, learning_rate=args.learning_rate,
                            samples_per_second=args.samples / max(time.time() - began, 1e-9))
            if rank == 0:
                print("epoch %d/%d loss=%.6f world=%d" % (epoch, args.epochs, loss, world), flush=True)
                if board:
                    board.add_scalar("loss", loss, epoch)
                if epoch % every == 0 or epoch == args.epochs:
                    save(model, optimizer, epoch)
            preemption.at = (epoch, epoch * steps)
            dist.barrier()
        time.sleep(args.epoch_delay)
        if epoch < args.epochs:
            preemption.check()
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    print("rank %d of %d (local rank %s) checksum %.10f" % (rank, world, os.environ.get("LOCAL_RANK"), checksum), flush=True)
    progress.close()
    if board:
        board.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
