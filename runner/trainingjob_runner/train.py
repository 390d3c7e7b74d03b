"""The runner's training loop (PyTorch). Settings come from settings.load."""

import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from trainingjob_runner.preemption import Preemption, newest_checkpoint
from trainingjob_runner.progress import Progress


def build_model(s):
    c, h, w = s.shape
    if s.model == "mlp":
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(c * h * w, 128), torch.nn.ReLU(), torch.nn.Linear(128, s.classes))
    if s.model == "cnn":
        return torch.nn.Sequential(
            torch.nn.Conv2d(c, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
            torch.nn.Flatten(), torch.nn.Linear(32 * 16, s.classes))
    import torchvision
    net = getattr(torchvision.models, s.model)(num_classes=s.classes)
    if c == 1:  # torchvision's models take 3 channels
        return torch.nn.Sequential(Expand3(), net)
    return net


class Expand3(torch.nn.Module):
    def forward(self, x):
        return x.expand(-1, 3, -1, -1)


def build_dataset(s):
    if s.dataset_dir:
        return load_dataset_dir(s)
    c, h, w = s.shape
    if s.dataset == "synthetic":
        g = torch.Generator().manual_seed(1234)
        labels = torch.randint(0, s.classes, (s.samples,), generator=g)
        # Learnable: each class has its own mean image.
        means = torch.randn(s.classes, c, h, w, generator=g)
        x = means[labels] + 0.5 * torch.randn(s.samples, c, h, w, generator=g)
        return TensorDataset(x, labels)
    import torchvision
    from torchvision import transforms
    tf = transforms.ToTensor()
    if s.dataset == "fakedata":
        return torchvision.datasets.FakeData(size=s.samples, image_size=(c, h, w), num_classes=s.classes, transform=tf, random_offset=7)
    cls = {"mnist": torchvision.datasets.MNIST, "fashion-mnist": torchvision.datasets.FashionMNIST, "cifar10": torchvision.datasets.CIFAR10}[s.dataset]
    if s.rank == 0:
        cls(s.data_dir, train=True, download=True)
    if dist.is_initialized():
        dist.barrier()
    return cls(s.data_dir, train=True, download=False, transform=tf)


def load_dataset_dir(s):
    """The dataset delivered at DATASET_DIR: data.pt's tensors or an ImageFolder tree; records its shape and
    classes in s."""
    if s.dataset_format == "tensors":
        data = torch.load(os.path.join(s.dataset_dir, "data.pt"), map_location="cpu")
        x, y = data["x"].float(), data["y"].long()
        ds = TensorDataset(x, y)
        s.loaded_shape, s.loaded_classes = tuple(x.shape[1:]), int(data.get("classes", int(y.max()) + 1))
    else:
        import torchvision
        from torchvision import transforms
        ds = torchvision.datasets.ImageFolder(s.dataset_dir, transform=transforms.ToTensor())
        s.loaded_shape, s.loaded_classes = tuple(ds[0][0].shape), len(ds.classes)
    if s.rank == 0:
        print("dataset %s: %d samples of %s, %d classes" % (s.dataset_dir, len(ds), "x".join(map(str, s.loaded_shape)), s.loaded_classes), flush=True)
    return ds


def fine_tune_from(s, model):
    """Loads MODEL_DIR's weights into model: every tensor whose name and shape match (a classifier head of
    another size is trained anew), and says how many."""
    state = torch.load(s.weights, map_location="cpu")
    state = state.get("model", state) if isinstance(state, dict) else state
    own = model.state_dict()
    kept = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
    model.load_state_dict(kept, strict=False)
    if s.rank == 0:
        print("fine-tuning from %s: %d of %d tensors loaded" % (s.weights, len(kept), len(own)), flush=True)


def open_board(s):
    """Rank 0's TensorBoard writer in TENSORBOARD_LOG_DIR (monitoring.tensorboardEnabled), None without one.
    A bucket (s3://, gs://) needs the tensorboard package's writer; a mounted directory needs nothing."""
    log_dir = os.environ.get("TENSORBOARD_LOG_DIR", "")
    if not log_dir or s.rank != 0:
        return None
    if "://" not in log_dir:
        from trainingjob_runner.tensorboard import Writer
        w = Writer(log_dir)
        print("TensorBoard events: %s" % w.path, flush=True)
        return w
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        print("TENSORBOARD_LOG_DIR %s is in a bucket, which needs the tensorboard package: no TensorBoard events" % log_dir, flush=True)
        return None
    w = SummaryWriter(log_dir)
    w.scalars = lambda step, values: [w.add_scalar(k, v, step) for k, v in values.items()]
    return w


def build_optimizer(s, params):
    lr = s.learning_rate
    return {"adam": lambda: torch.optim.Adam(params, lr=lr), "adamw": lambda: torch.optim.AdamW(params, lr=lr),
            "sgd": lambda: torch.optim.SGD(params, lr=lr, momentum=0.9), "rmsprop": lambda: torch.optim.RMSprop(params, lr=lr)}[s.optimizer]()


def save(s, state, epoch, step=None):
    """Writes a checkpoint, its _COMPLETE marker last; step names one written mid-epoch (at preemption)."""
    name = "checkpoint-epoch-%d" % epoch + ("-step-%d" % step if step is not None else "")
    path = os.path.join(s.checkpoint_dir, name)
    os.makedirs(path, exist_ok=True)
    torch.save(state, os.path.join(path, "model.pt"))
    with open(os.path.join(path, "_COMPLETE"), "w") as f:  # last: the checkpoint is complete only now
        json.dump({"epoch": epoch, "step": step or 0, "time": time.time(), "model": s.model, "dataset": s.dataset}, f)
    return path


def run(s):
    distributed = s.world_size > 1
    if distributed:
        dist.init_process_group(backend=s.backend, init_method="env://")
    cuda = s.backend == "nccl" and torch.cuda.is_available()
    dev = torch.device("cuda", s.local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    torch.manual_seed(0)
    data = build_dataset(s)  # first: a delivered dataset's shape and classes size the model
    model = build_model(s)
    if s.weights:
        fine_tune_from(s, model)
    model = model.to(dev)
    opt = build_optimizer(s, model.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / s.warmup_steps) if s.warmup_steps else 1.0)
    scaler = torch.cuda.amp.GradScaler(enabled=cuda and s.mixed_precision)
    start, resume_step = 0, 0
    source = s.resume_from or (newest_checkpoint(s.checkpoint_dir) if s.checkpoint_dir else "")
    if source:
        state = torch.load(os.path.join(source, "model.pt"), map_location="cpu")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        start, resume_step = state["epoch"], state.get("step", 0)
        print("resumed from %s (epoch %d, step %d)" % (source, start, resume_step), flush=True)
    net = DistributedDataParallel(model, device_ids=[dev.index] if cuda else None) if distributed else model
    sampler = DistributedSampler(data, num_replicas=s.world_size, rank=s.rank, shuffle=True, seed=0) if distributed else None
    loader = DataLoader(data, batch_size=s.batch_size, sampler=sampler, shuffle=sampler is None)
    progress = Progress(total_epochs=s.epochs)
    board = open_board(s)
    step = resume_step or start * len(loader)
    preemption = Preemption(s.rank, lambda epochs, at: save(s, {"model": model.state_dict(), "optimizer": opt.state_dict(),
                                                                "scheduler": sched.state_dict(), "epoch": epochs, "step": at}, epochs, at),
                            (start, step))
    amp_dtype = torch.float16 if cuda else torch.bfloat16
    for epoch in range(start + 1, s.epochs + 1):
        if sampler:
            sampler.set_epoch(epoch)
        began, seen, loss_sum, correct = time.time(), 0, torch.zeros((), device=dev), torch.zeros((), device=dev)
        net.train()
        skip = max(0, resume_step - (epoch - 1) * len(loader))  # steps of this epoch a preemption checkpoint holds
        with preemption.guard():
            for i, (x, y) in enumerate(loader):
                if i < skip:
                    continue
                preemption.check()
                x, y = x.to(dev), y.to(dev)
                with torch.autocast(device_type=dev.type, dtype=amp_dtype, enabled=s.mixed_precision):
                    out = net(x)
                    loss = torch.nn.functional.cross_entropy(out, y)
                scaler.scale(loss / s.grad_accum).backward()
                step = (epoch - 1) * len(loader) + i + 1
                if (i + 1) % s.grad_accum == 0 or i + 1 == len(loader):
                    scaler.step(opt)
                    scaler.update()
                    opt.zero_grad()
                    sched.step()
                    preemption.at = (epoch - 1, step)  # consistent: no gradients are accumulated
                loss_sum += loss.detach() * len(y)
                correct += (out.argmax(1) == y).sum()
                seen += len(y)
                progress.report(step=step, total_steps=s.epochs * len(loader))
            totals = torch.stack([loss_sum, correct.float(), torch.tensor(float(seen), device=dev)])
            if distributed:
                dist.all_reduce(totals)
            loss, acc = (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()
            progress.report(epoch=epoch, loss=loss, accuracy=acc, learning_rate=sched.get_last_lr()[0],
                            samples_per_second=totals[2].item() / max(time.time() - began, 1e-9))
            if s.rank == 0:
                print("epoch %d/%d loss=%.4f accuracy=%.4f" % (epoch, s.epochs, loss, acc), flush=True)
                if board:
                    board.scalars(epoch, {"loss": loss, "accuracy": acc, "learning_rate": sched.get_last_lr()[0]})
                if s.checkpoint_dir and (epoch % s.checkpoint_every == 0 or epoch == s.epochs):
                    save(s, {"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "epoch": epoch}, epoch)
            preemption.at = (epoch, epoch * len(loader))
            if distributed:
                dist.barrier()
        time.sleep(float(s.extra.get("epochDelaySeconds", 0)))
        if epoch < s.epochs:
            preemption.check()
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    print("rank %d of %d checksum %.10f" % (s.rank, s.world_size, checksum), flush=True)
    progress.close()
    if board:
        board.close()
    if distributed:
        dist.destroy_process_group()
    return 0
