#!/usr/bin/python3
"""A DeiT-style recipe on tilefeed batches: RandAugment, random erasing, Mixup/CutMix and a
soft-target cross-entropy, data-parallel (DDP), one process per instance.

    poprun --instances 2 /usr/bin/python3 examples/train_torch_deit.py DATA

(PYTHONPATH=build/release/python when tilefeed is not installed.) The recipe of DeiT
(Touvron et al., 2021) as timm's and torchvision's reference scripts train it, on the data
parallelism of examples/train_torch_ddp.py (rank and world size from the launcher, gloo,
DistributedDataParallel, each instance reading its slice of every epoch):

  * per sample, in tilefeed's decode workers (augment=): RandomResizedCrop, flip,
    RandAugment(2, 9) and RandomErasing(0.25); the batches come converted and normalised,
    float32 NCHW, on --device (cpu, or cuda: landed and converted on the GPU);
  * per batch, where the batch is: Mixup (alpha 0.8) or CutMix (alpha 1.0), one of the two
    with equal odds, label smoothing 0.1, drawn from (--seed, step) alone, so every rank
    mixes its batch with the same draws at the same step;
  * soft-target cross-entropy, AdamW (weight decay 0.05) at --lr x global batch / 512.

--log DIR writes, per rank and step, one JSON line to DIR/rank<r>.jsonl: the step, the loss,
the mixing draws and a SHA-1 of the parameters after the step (python/tests/test_deit.py
checks with them that the ranks agree).
"""

import argparse
import hashlib
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import tilefeed
from tilefeed.augment import CutMix, MixUp, RandomChoice
from tilefeed.augment import (RandAugment, RandomErasing, RandomHorizontalFlip,
                              RandomResizedCrop)
from train_torch_ddp import init_distributed, make_model


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="a dataset tilefeed opens (ImageFolder, train/+val/, shards)")
    ap.add_argument("--arch", default="resnet18", choices=("resnet18", "tiny"),
                    help="the model; tiny is a two-layer CNN for tests")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=32, help="per instance")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=5e-4, help="per 512 images of global batch")
    ap.add_argument("--workers", type=int, default=0, help="decode threads per instance")
    ap.add_argument("--seed", type=int, default=0, help="shuffle, augment and mixing seed")
    ap.add_argument("--port", type=int, default=int(os.environ.get("MASTER_PORT", "29500")),
                    help="rendezvous port at MASTER_ADDR (default: MASTER_PORT or 29500)")
    ap.add_argument("--log", help="directory for the per-rank step logs")
    return ap.parse_args()


def main():
    a = parse_args()
    rank, size = init_distributed(a.port)
    torch.manual_seed(a.seed)
    device = torch.device(a.device)
    augment = [RandomResizedCrop(), RandomHorizontalFlip(), RandAugment(2, 9),
               RandomErasing(0.25)]
    if rank == 0:
        print("augment:", ", ".join(map(repr, augment)), flush=True)
    loader = tilefeed.Loader(a.data, batch_size=a.batch_size, image_size=a.image_size,
                             augment=augment,
                             workers=a.workers, seed=a.seed, epochs=a.epochs, device=device,
                             dtype="float32", layout="NCHW", mean=tilefeed.IMAGENET_MEAN,
                             std=tilefeed.IMAGENET_STD)
    classes = len(loader.classes)
    mix = RandomChoice([MixUp(0.8, num_classes=classes, label_smoothing=0.1, seed=a.seed),
                        CutMix(1.0, num_classes=classes, label_smoothing=0.1, seed=a.seed,
                               layout="NCHW")], p=[0.5, 0.5], seed=a.seed)
    model = DistributedDataParallel(make_model(a.arch, classes).to(device))
    optimizer = torch.optim.AdamW(model.parameters(), weight_decay=0.05,
                                  lr=a.lr * a.batch_size * size / 512)
    log = open(os.path.join(a.log, f"rank{rank}.jsonl"), "a") if a.log else None
    step = 0
    model.train()
    for epoch in range(a.epochs):
        for images, labels in loader:
            images, targets = mix(images, labels, step)  # on the batch's device
            loss = F.cross_entropy(model(images), targets)  # soft targets
            optimizer.zero_grad()
            loss.backward()  # DDP all-reduces the gradients here
            optimizer.step()
            if log:
                params = b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters())
                log.write(json.dumps({"step": step, "rank": rank, "loss": loss.item(),
                                      "draws": mix.draw(step, *images.shape[2:]),
                                      "params": hashlib.sha1(params).hexdigest()}) + "\n")
                log.flush()
            step += 1
        if rank == 0:
            print(f"epoch {epoch} step {step} loss {loss.item():.3f}", flush=True)
    loader.stop()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
