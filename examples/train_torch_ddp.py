#!/usr/bin/python3
"""Data-parallel (Horovod-style) PyTorch training on tilefeed batches, one process per instance.

    poprun --instances 2 /usr/bin/python3 examples/train_torch_ddp.py DATA --checkpoint ck.pt
    poprun --instances 1 /usr/bin/python3 examples/train_torch_ddp.py DATA --checkpoint ck.pt \
        --resume

(PYTHONPATH=build/release/python when tilefeed is not installed.) Each process:

  * finds its rank and the world size in the launcher's environment (OpenMPI's
    OMPI_COMM_WORLD_RANK/SIZE as poprun and mpirun set them, or torchrun's RANK/WORLD_SIZE:
    tilefeed.detect_slice(), the same detection as tilefeed's `train`) and initialises
    torch.distributed with gloo at MASTER_ADDR (default 127.0.0.1):--port (default
    MASTER_PORT, else 29500; under torchrun, its env:// store);
  * builds a torchvision ResNet-18 and wraps it in DistributedDataParallel, which broadcasts
    rank 0's parameters and buffers to every rank and all-reduces (averages) the gradients of
    every step;
  * reads its own slice of every epoch with tilefeed.Loader(slice="auto"): uint8 NCHW
    batches, converted to float and normalised inside the step;
  * uses a learning rate of --lr x world size (the linear scaling rule for a global batch of
    --batch-size x world size);
  * rank 0 alone writes the checkpoint (model, optimizer, loader.state_dict(), step), every
    --checkpoint-every steps and at the end, atomically (a temporary file, then rename).

Resuming (--resume; an error when the checkpoint is missing). Rank 0 reads the checkpoint
and broadcasts it, so every rank starts from the same parameters and optimizer state. Every
rank passes the same loader state to load_state_dict(). The state's position counts the
samples of the epoch's permutation delivered by all instances together (rank 0's loader
knows it: every rank takes the same number of steps, so after k batches of B samples each
of N instances the epoch stands at N x k x B). It does not depend on the instance count:
resumed on M instances, the M slices split the rest of the epoch, and no sample of the
epoch is lost or repeated. Padding aside: with remainder="pad" an epoch whose sample count
does not divide among the instances is padded with repeats of its first samples, so that
every rank takes the same number of steps (DDP's all-reduce needs that); --remainder drop
drops them instead. The learning rate is rescaled for the new world size.

--log DIR writes, per rank and step, one JSON line to DIR/rank<r>.jsonl: the step, epoch, the
dataset indices of the batch's samples and a SHA-1 of the parameters after the step; the
test (python/tests/test_ddp.py) checks with them that the ranks read disjoint slices that
cover the epoch and hold identical parameters at every step.
"""

import argparse
import datetime
import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel

import tilefeed


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="a dataset tilefeed opens (ImageFolder, train/+val/, shards)")
    ap.add_argument("--arch", default="resnet18", choices=("resnet18", "tiny"),
                    help="the model; tiny is a two-layer CNN for tests")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=32, help="per instance")
    ap.add_argument("--epochs", type=int, default=1, help="epochs in all (resumes included)")
    ap.add_argument("--steps", type=int, default=0,
                    help="stop after this global step (0: at the end of --epochs)")
    ap.add_argument("--lr", type=float, default=0.0125,
                    help="learning rate per instance; the optimizer uses lr x world size")
    ap.add_argument("--workers", type=int, default=0,
                    help="decode threads per instance (0: one per core the instance is bound to; "
                    "more than that cannot run: poprun binds each instance to its cores)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--remainder", default="pad", choices=("pad", "drop"))
    ap.add_argument("--port", type=int, default=int(os.environ.get("MASTER_PORT", "29500")),
                    help="rendezvous port at MASTER_ADDR (default: MASTER_PORT or 29500)")
    ap.add_argument("--checkpoint", help="checkpoint file (written by rank 0)")
    ap.add_argument("--checkpoint-every", type=int, default=0, help="steps; 0: only at the end")
    ap.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    ap.add_argument("--log", help="directory for the per-rank step logs")
    a = ap.parse_args()
    for name in ("image_size", "batch_size", "epochs"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(a, name)}")
    for name in ("steps", "checkpoint_every", "threads"):
        if getattr(a, name) < 0:
            ap.error(f"--{name.replace('_', '-')} must be >= 0, got {getattr(a, name)}")
    if not 1 <= a.port <= 65535:
        ap.error(f"--port must be in [1, 65535], got {a.port}")
    if a.resume and not a.checkpoint:
        ap.error("--resume needs --checkpoint")
    return a


def init_distributed(port):
    """Joins the process group the launcher started; returns (rank, world size)."""
    rank, size, origin = tilefeed.detect_slice()
    address = os.environ.get("MASTER_ADDR", "127.0.0.1")
    # torchrun's agent already serves a store at MASTER_ADDR:MASTER_PORT; join it.
    init = "env://" if origin.startswith("RANK/") else f"tcp://{address}:{port}"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=size,
                            timeout=datetime.timedelta(minutes=5))
    if rank == 0:
        print(f"{size} instance(s) (rank from {origin}), gloo at {address}:{port}", flush=True)
    return rank, size


def make_model(arch, classes):
    if arch == "resnet18":
        return torchvision.models.resnet18(num_classes=classes)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, classes))


def parameters_digest(model):
    h = hashlib.sha1()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def load_checkpoint(path, rank):
    """Rank 0 reads the checkpoint and broadcasts it; every rank returns the same dict."""
    box = [None]
    if rank == 0:
        if not os.path.isfile(path):
            box[0] = {"error": f"--resume: no checkpoint at {path}"}
        else:
            box[0] = torch.load(path, map_location="cpu")
    dist.broadcast_object_list(box, src=0)
    if "error" in box[0]:
        raise SystemExit(box[0]["error"])
    return box[0]


def save_checkpoint(path, model, optimizer, loader, step):
    temporary = f"{path}.tmp{os.getpid()}"
    torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                "loader": loader.state_dict(), "step": step}, temporary)
    os.replace(temporary, path)


def main():
    a = parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    rank, size = init_distributed(a.port)
    torch.manual_seed(a.seed)
    loader = tilefeed.Loader(a.data, batch_size=a.batch_size, image_size=a.image_size,
                             workers=a.workers, layout="nchw", seed=a.seed, epochs=a.epochs,
                             remainder=a.remainder, slice="auto")
    assert loader.slice == (rank, size), (loader.slice, rank, size)
    model = make_model(a.arch, len(loader.classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=a.lr * size, momentum=0.9)
    step = 0
    if a.resume:
        checkpoint = load_checkpoint(a.checkpoint, rank)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        for group in optimizer.param_groups:
            group["lr"] = a.lr * size  # the scaling rule for this run's world size
        loader.load_state_dict(checkpoint["loader"])
        step = checkpoint["step"]
    model = DistributedDataParallel(model)  # broadcasts rank 0's parameters and buffers
    log = open(os.path.join(a.log, f"rank{rank}.jsonl"), "a") if a.log else None
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255
    start, first_step = time.monotonic(), step
    model.train()
    done = False
    loss = torch.zeros(())
    while not done and loader.epoch < a.epochs:
        epoch = loader.epoch
        for batch in loader:
            images, labels = batch.torch(), torch.from_numpy(batch.labels)
            x = (images.float() - mean) / std  # uint8 on the way in, normalised in the step
            loss = F.cross_entropy(model(x), labels)
            optimizer.zero_grad()
            loss.backward()  # DDP all-reduces the gradients here
            optimizer.step()
            step += 1
            if log:
                log.write(json.dumps({"step": step, "rank": rank, "world": size, "epoch": epoch,
                                      "samples": batch.sample_indices.tolist(),
                                      "params": parameters_digest(model.module)}) + "\n")
                log.flush()
            if rank == 0 and a.checkpoint and a.checkpoint_every and step % a.checkpoint_every == 0:
                save_checkpoint(a.checkpoint, model, optimizer, loader, step)
            if a.steps and step >= a.steps:
                # Saved inside the loop: the state is where this epoch continues. After the
                # `break` it would be where the next iteration starts (the next epoch).
                if rank == 0 and a.checkpoint:
                    save_checkpoint(a.checkpoint, model, optimizer, loader, step)
                done = True
                break
        if rank == 0:
            rate = (step - first_step) * a.batch_size * size / (time.monotonic() - start)
            print(f"epoch {epoch} step {step} loss {loss.item():.3f} {rate:.0f} images/s",
                  flush=True)
    if rank == 0 and a.checkpoint and not done:
        save_checkpoint(a.checkpoint, model, optimizer, loader, step)
    loader.stop()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
