#!/usr/bin/python3
"""normalise_bench: a batch a model can eat (float32, NCHW, normalised with ImageNet's
mean/std), three ways, on the same corpus, in alternating rounds:

  tilefeed   tilefeed.Loader(dtype="float32", layout="NCHW", mean, std): the workers convert
             each batch into its slot (C++), nothing left for the consumer to do;
  uint8      tilefeed.Loader (uint8 NHWC), nothing converted: what the conversion costs;
  pair       tilefeed.Loader (uint8 NHWC) + the conversion users write in torch:
             x.permute(0, 3, 1, 2).float().div(255).sub(mean).div(std);
  dataloader torch DataLoader over torchvision ImageFolder with RandomResizedCrop,
             RandomHorizontalFlip, ToTensor, Normalize (the same transforms), shuffle.

Each round runs each variant over one epoch of DATA/train (the first --warmup batches
untimed) with the same batch size, image size and worker count (tilefeed's decode threads =
DataLoader's worker processes; torch's intra-op threads are the machine's default). The
figures are the medians over rounds of the per-round ratios tilefeed/uint8, tilefeed/pair
and tilefeed/dataloader (images per second), which cancels most of a shared machine's drift.

    /usr/bin/python3 bench/normalise_bench.py /tmp/corpus --build build/rel --workers 2

The last line is machine-readable: vs_uint8=... vs_pair=... vs_dataloader=... key=value ...
"""

import argparse
import os
import statistics
import sys
import time


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data", help="a corpus root holding train/ (make_corpus.sh) or an ImageFolder")
    ap.add_argument("--build", default="build", help="build tree holding python/ (the module)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--no-dataloader", action="store_true", help="skip the DataLoader variant")
    a = ap.parse_args()
    if a.rounds < 1 or a.warmup < 1:
        ap.error("--rounds and --warmup must be at least 1")
    return a


def timed(batches, warmup, consume):
    """Images per second over the batches after the first `warmup` (consumed each)."""
    images, start = 0, None
    for i, batch in enumerate(batches):
        x = consume(batch)
        if i + 1 == warmup:
            start = time.perf_counter()
        elif i + 1 > warmup:
            images += x.shape[0]
    if start is None or images == 0:
        sys.exit("normalise_bench: error: the epoch has no batch after the warm-up")
    return images / (time.perf_counter() - start)


def main():
    a = parse_args()
    sys.path.insert(0, os.path.join(os.path.abspath(a.build), "python"))
    import torch
    import torchvision
    from torchvision import transforms
    import tilefeed

    root = os.path.join(a.data, "train") if os.path.isdir(os.path.join(a.data, "train")) else a.data
    mean, std = tilefeed.IMAGENET_MEAN, tilefeed.IMAGENET_STD
    common = dict(batch_size=a.batch, image_size=a.size, workers=a.workers, epochs=1, seed=0,
                  slice=(0, 1), drop_last_batch=True)
    m = torch.tensor(mean).view(1, 3, 1, 1)
    s = torch.tensor(std).view(1, 3, 1, 1)

    def run_tilefeed():
        loader = tilefeed.Loader(root, dtype="float32", layout="NCHW", mean=mean, std=std,
                                 **common)
        return timed(loader, a.warmup, lambda b: b.torch())

    def run_uint8():
        return timed(tilefeed.Loader(root, **common), a.warmup, lambda b: b.torch())

    def run_pair():
        loader = tilefeed.Loader(root, **common)
        return timed(loader, a.warmup,
                     lambda b: b.torch().permute(0, 3, 1, 2).float().div(255).sub(m).div(s))

    def run_dataloader():
        transform = transforms.Compose([
            transforms.RandomResizedCrop(a.size), transforms.RandomHorizontalFlip(),
            transforms.ToTensor(), transforms.Normalize(mean, std)])
        dataset = torchvision.datasets.ImageFolder(root, transform=transform)
        data = torch.utils.data.DataLoader(dataset, batch_size=a.batch, shuffle=True,
                                           num_workers=a.workers, drop_last=True)
        return timed(data, a.warmup, lambda b: b[0])

    variants = [("tilefeed", run_tilefeed), ("uint8", run_uint8), ("pair", run_pair)]
    if not a.no_dataloader:
        variants.append(("dataloader", run_dataloader))
    rates = {name: [] for name, _ in variants}
    for r in range(a.rounds):
        order = variants if r % 2 == 0 else variants[::-1]  # alternate who runs first
        for name, run in order:
            rates[name].append(run())
        print(f"round {r + 1}: " + " ".join(f"{n}={rates[n][-1]:.0f} img/s" for n in rates),
              flush=True)
    ratios = {f"vs_{n}": statistics.median(t / o for t, o in zip(rates["tilefeed"], rates[n]))
              for n in rates if n != "tilefeed"}
    medians = {f"{n}_images_per_s": statistics.median(v) for n, v in rates.items()}
    print(" ".join(f"{k}={v:.2f}" for k, v in ratios.items()) + " " +
          " ".join(f"{k}={v:.0f}" for k, v in medians.items()) +
          f" rounds={a.rounds} workers={a.workers} batch={a.batch} size={a.size} "
          f"torch_threads={torch.get_num_threads()}")


if __name__ == "__main__":
    main()
