"""A data scientist's own DDP script, as many are written: it knows nothing of the operator (no endpoint,
no helper) and shows its progress with tqdm bars on rank 0. The operator's supervisor reads the bars.

    torchrun train.py, or python3 ddp_tqdm.py with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps", type=int, default=20, help="batches per epoch")
    p.add_argument("--step-delay", type=float, default=0.05, help="seconds of pretend work per batch")
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(10, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(64, 10, generator=torch.Generator().manual_seed(rank))
    y = x.sum(1, keepdim=True)
    for epoch in range(1, a.epochs + 1):
        bar = tqdm(range(a.steps), desc=f"Epoch {epoch}/{a.epochs}", disable=rank != 0)
        for _ in bar:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            bar.set_postfix(loss=f"{loss.item():.4f}")
            time.sleep(a.step_delay)
    checksum = sum(p.sum().item() for p in model.parameters())
    print(f"rank {rank} of {world} checksum {checksum:.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
