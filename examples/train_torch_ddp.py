#!/usr/bin/python3
"""Data-parallel (Horovod-style) PyTorch training on tilefeed batches, one process per instance.

    poprun --instances 2 /usr/bin/python3 examples/train_torch_ddp.py DATA --checkpoint ck.pt
    poprun --instances 1 /usr/bin/python3 examples/train_torch_ddp.py DATA --checkpoint ck.pt \
        --resume
    poprun --instances 2 /usr/bin/python3 examples/train_torch_ddp.py DATA --recipe low-res \
        --image-size 224 --eval-size 224

--recipe picks how the training size goes over the epochs (examples/README.md measures them):

  * fixed (the default): --image-size every epoch;
  * low-res (Graphcore's "Making EfficientNet More Efficient"): --start-size (default 4/7 of
    --image-size: 224 -> 128) until the last --finetune-epochs, which fine-tune at --image-size
    with a lighter augmentation (crop scale (0.35, 1) instead of (0.08, 1));
  * progressive (FFCV's ResNet-50 recipe): a linear ramp from --start-size to --image-size
    over the epochs, in steps of 32 (tilefeed.Ramp); give it a higher --eval-size (FixRes:
    train at 192, evaluate at 224).

Each phase of a recipe (low-res has two, the others one) is one Loader; inside a phase the
Loader itself changes the size at epoch boundaries. --eval-size S evaluates the val split
after the last epoch (Resize(S x 8/7), CenterCrop(S)) and prints the top-1 accuracy.

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

--log DIR writes, per rank and step, one JSON line to DIR/rank<r>.jsonl: the step, epoch, image
size, the dataset indices of the batch's samples, a digest of each sample's pixels and a SHA-1
of the parameters after the step; the tests (python/tests/test_ddp.py, test_recipes.py) check
with them that the ranks read disjoint slices that cover the epoch and hold identical
parameters at every step, and that a resumed run's batches are the uninterrupted run's.
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
from tilefeed.augment import RandomHorizontalFlip, RandomResizedCrop


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="a dataset tilefeed opens (ImageFolder, train/+val/, shards)")
    ap.add_argument("--arch", default="resnet18", choices=("resnet18", "tiny"),
                    help="the model; tiny is a two-layer CNN for tests")
    ap.add_argument("--recipe", default="fixed", choices=("fixed", "low-res", "progressive"),
                    help="how the training size goes over the epochs (see above)")
    ap.add_argument("--image-size", type=int, default=64,
                    help="the size of every epoch (fixed), of the fine-tuning epochs "
                    "(low-res), at the end of the ramp (progressive)")
    ap.add_argument("--start-size", type=int, default=0,
                    help="low-res: the pre-training size; progressive: the ramp's first size "
                    "(0: 4/7 of --image-size)")
    ap.add_argument("--finetune-epochs", type=int, default=2,
                    help="low-res: the last epochs, at --image-size with the lighter crop")
    ap.add_argument("--eval-size", type=int, default=0,
                    help="evaluate the val split at this size after the last epoch (0: no)")
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
    for name in ("steps", "checkpoint_every", "threads", "start_size", "eval_size"):
        if getattr(a, name) < 0:
            ap.error(f"--{name.replace('_', '-')} must be >= 0, got {getattr(a, name)}")
    if not 1 <= a.port <= 65535:
        ap.error(f"--port must be in [1, 65535], got {a.port}")
    if a.resume and not a.checkpoint:
        ap.error("--resume needs --checkpoint")
    if a.recipe == "low-res" and not 1 <= a.finetune_epochs < a.epochs:
        ap.error(f"--finetune-epochs must be in [1, --epochs), got {a.finetune_epochs}")
    a.start_size = a.start_size or a.image_size * 4 // 7
    return a


def phases(a):
    """The recipe as [(first epoch, Loader keywords)], one Loader per phase."""
    if a.recipe == "low-res":
        finetune = a.epochs - a.finetune_epochs
        return [(0, {"image_size": a.start_size}),
                (finetune, {"image_size": a.image_size, "augment": [
                    RandomResizedCrop(scale=(0.35, 1)), RandomHorizontalFlip()]})]
    if a.recipe == "progressive":
        return [(0, {"image_size": tilefeed.Ramp(a.start_size, a.image_size, 0, a.epochs - 1)})]
    return [(0, {"image_size": a.image_size})]


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


def normalise(images):
    """uint8 NCHW to float, normalised with ImageNet's mean and std, inside the step."""
    mean = torch.tensor(tilefeed.IMAGENET_MEAN).view(1, 3, 1, 1) * 255
    std = torch.tensor(tilefeed.IMAGENET_STD).view(1, 3, 1, 1) * 255
    return (images.float() - mean) / std


# Every tensor given to a collective stays referenced until the process ends. Torch 1.13's
# ProcessGroupGloo destructor (run when DDP's reducer goes) joins its worker threads with the
# GIL held, and a worker that drops the last reference of a tensor Python let go of takes the
# GIL: the job hung at exit (pytorch/pytorch#56297). all_gather_object's own tensors die at once.
COLLECTIVE_TENSORS = []


def evaluate(a, model, size):
    """Top-1 accuracy on the val split at `size`, each rank on its slice; a sample the slices
    repeat (remainder="pad") counts once."""
    loader = tilefeed.Loader(a.data, split="val", mode="eval", image_size=size,
                             eval_resize=size * 8 // 7, batch_size=a.batch_size,
                             workers=a.workers, layout="nchw", epochs=1, slice="auto")
    hit = torch.full((loader.dataset_size,), -1, dtype=torch.int32)  # -1: not in my slice
    model.eval()
    with torch.no_grad():
        for batch in loader:
            hits = model(normalise(batch.torch())).argmax(1) == torch.from_numpy(batch.labels)
            hit[batch.sample_indices.astype("int64")] = hits.int()
    loader.stop()
    dist.all_reduce(hit, op=dist.ReduceOp.MAX)
    COLLECTIVE_TENSORS.append(hit)
    seen = hit >= 0
    return hit[seen].sum().item() / seen.sum().item(), seen.sum().item()


def parameters_digest(model):
    h = hashlib.sha1()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def write_log(log, entry, batch, images, model):
    """One --log line: `entry` with the batch's size, samples, their pixels' digests and the
    parameters' digest."""
    pixels = [hashlib.sha1(row.numpy().tobytes()).hexdigest()[:16] for row in images]
    entry.update(size=list(images.shape[2:]), samples=batch.sample_indices.tolist(),
                 pixels=pixels, params=parameters_digest(model))
    log.write(json.dumps(entry) + "\n")
    log.flush()


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
    recipe = phases(a)

    def make_loader(phase):  # its epochs up to the next phase's first
        end = recipe[phase + 1][0] if phase + 1 < len(recipe) else a.epochs
        return tilefeed.Loader(a.data, batch_size=a.batch_size, workers=a.workers,
                               layout="nchw", seed=a.seed, epochs=end,
                               remainder=a.remainder, slice="auto", **recipe[phase][1])

    phase, loader = 0, make_loader(0)
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
        state, step = checkpoint["loader"], checkpoint["step"]
        phase = max(p for p, (first, _) in enumerate(recipe) if first <= state["epoch"])
        if phase:
            loader.stop()
            loader = make_loader(phase)
        loader.load_state_dict(state)
    model = DistributedDataParallel(model)  # broadcasts rank 0's parameters and buffers
    log = open(os.path.join(a.log, f"rank{rank}.jsonl"), "a") if a.log else None
    model.train()
    done = False
    loss = torch.zeros(())
    while not done and loader.epoch < a.epochs:
        epoch, start, first_step, side = loader.epoch, time.monotonic(), step, 0
        if phase + 1 < len(recipe) and epoch >= recipe[phase + 1][0]:
            phase += 1  # the next phase's Loader, from the start of this epoch
            loader.stop()
            loader = make_loader(phase)
            loader.set_epoch(epoch)
        for batch in loader:
            images, labels = batch.torch(), torch.from_numpy(batch.labels)
            side = images.shape[-1]
            loss = F.cross_entropy(model(normalise(images)), labels)
            optimizer.zero_grad()
            loss.backward()  # DDP all-reduces the gradients here
            optimizer.step()
            step += 1
            if log:
                write_log(log, {"step": step, "rank": rank, "world": size, "epoch": epoch},
                          batch, images, model.module)
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
            seconds = time.monotonic() - start
            print(f"epoch {epoch} size {side} step {step} loss {loss.item():.3f} "
                  f"{seconds:.1f} s {(step - first_step) * a.batch_size * size / seconds:.0f} "
                  f"images/s", flush=True)
    if rank == 0 and a.checkpoint and not done:
        save_checkpoint(a.checkpoint, model, optimizer, loader, step)
    loader.stop()
    if a.eval_size and not done:
        accuracy, samples = evaluate(a, model.module, a.eval_size)
        if rank == 0:
            print(f"eval size {a.eval_size} top-1 {accuracy:.3f} ({samples} samples)", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
