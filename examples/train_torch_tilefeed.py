#!/usr/bin/python3
"""Trains resnet18 for a few steps on CPU, reading an ImageFolder with tilefeed.Loader.

The same script as train_torch_dataloader.py except for the loader: `diff` the two.
Both loaders give uint8 NCHW batches; the float conversion and normalisation happen in
the training loop, identically.

    build/tools/tilefeed-make-demo /tmp/demo
    PYTHONPATH=build/python /usr/bin/python3 examples/train_torch_tilefeed.py /tmp/demo/train
"""

import argparse
import time

import torch
import torchvision

import tilefeed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="ImageFolder root, e.g. the train/ of tilefeed-make-demo")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)

    loader = tilefeed.Loader(a.data, batch_size=a.batch, image_size=a.size, workers=a.workers,
                             layout="nchw", seed=a.seed)
    classes = loader.classes

    def batches():  # (uint8 N x 3 x H x W, int64 N), epoch after epoch
        while True:
            for batch in loader:
                yield batch.torch(), torch.from_numpy(batch.labels)

    model = torchvision.models.resnet18(num_classes=len(classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255
    print(f"{len(classes)} classes, batch {a.batch}, {a.size}x{a.size}, {a.workers} workers")
    model.train()
    start = time.monotonic()
    for step, (images, labels) in zip(range(1, a.steps + 1), batches()):
        x = (images.float() - mean) / std
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 5 == 0 or step == a.steps:
            accuracy = (model(x).argmax(1) == labels).float().mean().item()
            print(f"step {step:4d}  loss {loss.item():.3f}  batch accuracy {accuracy:.2f}  "
                  f"{step * a.batch / (time.monotonic() - start):.0f} images/s")


if __name__ == "__main__":
    main()
