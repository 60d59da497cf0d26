#!/usr/bin/python3
"""torch_baseline: the PyTorch DataLoader as PyTorch users run it, on the same corpus as loader_bench.

  torchvision.datasets.ImageFolder(train/) with
  transforms.Compose([RandomResizedCrop(224), RandomHorizontalFlip(), PILToTensor()])
  DataLoader(batch_size=B, num_workers=W, shuffle, pin_memory=False, persistent_workers=False,
             drop_last=True)

--augment "RandAugment(2, 9), RandomErasing(0.25)" adds torchvision transforms after the flip,
as torchvision's reference recipes place them: RandomErasing after PILToTensor (on the uint8
tensor), the others before it (on the PIL image) -- what tilefeed's --augment runs after its
RandomResizedCrop(), RandomHorizontalFlip().

Batches stay uint8 [B, 3, 224, 224], as tilefeed's do (no float conversion, no normalisation).
Each worker runs torch.set_num_threads(1), as DataLoader itself does in its workers.

Method (the same as ../shared/baselines/torch_loader.py, so the figures can be set side by side):
one DataLoader iteration over a shuffled stream of --warmup + E batches, where one epoch is
E = len(dataset) // batch batches. The --warmup batches are untimed (worker start-up, first
fetches); the clock starts when the last warm-up batch arrives and stops when the last batch
arrives; images/s = images in the E timed batches / that time.

Difference from tilefeed on the shared corpus: ImageFolder picks files by extension and PIL opens
them by content, so the PNG files named .JPEG are decoded (as PNG) and counted here, while
tilefeed and codec_bench skip them as not JPEG. CMYK JPEGs are converted to RGB by PIL.

Needs Debian's python3-torch, python3-torchvision, python3-pil: run with /usr/bin/python3.
The last line printed is machine-readable: images_per_s=... key=value ...
"""

import argparse
import json
import os
import sys
import time

SPLITS = ("train", "val", "bad")


def fail(message, code=2):
    print(f"torch_baseline: error: {message}", file=sys.stderr)
    sys.exit(code)


def split_folder(path, split):
    """Returns the ImageFolder root: PATH/split if it exists, else PATH if it holds class folders."""
    if not os.path.exists(path):
        fail(f"corpus path not found: {path}\n"
             "  make one with the shared corpus maker, e.g. make_corpus.sh /tmp/corpus 10000")
    if not os.path.isdir(path):
        fail(f"corpus path is not a folder: {path}")
    candidate = os.path.join(path, split)
    if os.path.isdir(candidate):
        return candidate
    classes = [e.name for e in os.scandir(path) if e.is_dir()]
    if not classes or set(classes) <= set(SPLITS):
        fail(f"{path} has no {split}/ split and no class sub-folders (expected an ImageFolder layout)")
    return path


def set_one_thread(_worker_id):
    # DataLoader already does this in every worker; stated here so the baseline does not depend on it.
    import torch
    torch.set_num_threads(1)


def parse_args():
    doc = __doc__.split("\n")
    ap = argparse.ArgumentParser(
        prog="torch_baseline.py", description=doc[0].split(": ", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog="\n".join(doc[2:]))
    ap.add_argument("corpus", help="corpus root holding train/ (and val/), or an ImageFolder split folder")
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                    help="DataLoader num_workers (default: the cores this process may use, %(default)s)")
    ap.add_argument("--batch", type=int, default=256, help="batch size (default %(default)s)")
    ap.add_argument("--size", type=int, default=224, help="RandomResizedCrop size (default %(default)s)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed warm-up batches (default %(default)s)")
    ap.add_argument("--split", default="train", help="split folder under a corpus root (default %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="shuffle and augmentation seed (default %(default)s)")
    ap.add_argument("--augment", default="",
                    help="torchvision transforms after the flip, e.g. 'RandAugment(2, 9), RandomErasing(0.25)'")
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    a = ap.parse_args()
    if a.workers < 0:
        fail("--workers must be >= 0 (0 loads in the main process)")
    if a.batch < 1 or a.size < 1 or a.warmup < 1:
        fail("--batch, --size and --warmup must be >= 1")
    return a


def main():
    a = parse_args()
    root = split_folder(a.corpus, a.split)
    try:
        import torch
        from torch.utils.data import DataLoader, RandomSampler
        from torchvision import datasets, transforms
    except ImportError as e:
        fail(f"{e}\n  needs Debian's python3-torch python3-torchvision python3-pil; run with /usr/bin/python3")

    torch.manual_seed(a.seed)
    try:  # torchvision's names only
        extra = eval(f"[{a.augment}]", {"__builtins__": {}}, vars(transforms))  # noqa: S307
    except Exception as e:  # noqa: BLE001
        fail(f"--augment {a.augment!r}: {e}")
    tensor_ops = [t for t in extra if isinstance(t, transforms.RandomErasing)]
    transform = transforms.Compose([
        transforms.RandomResizedCrop(a.size),
        transforms.RandomHorizontalFlip(),
        *[t for t in extra if t not in tensor_ops],
        transforms.PILToTensor(),
        *tensor_ops,
    ])
    try:
        dataset = datasets.ImageFolder(root, transform=transform)
    except (FileNotFoundError, RuntimeError) as e:
        fail(f"{root}: {e}")
    epoch_batches = len(dataset) // a.batch
    if epoch_batches < 1:
        fail(f"{root} holds {len(dataset)} images, fewer than one batch of {a.batch}")

    # One shuffled stream of warm-up + one epoch of batches, so the timed epoch excludes worker
    # start-up (persistent_workers is off: a second iteration would start the workers again).
    generator = torch.Generator()
    generator.manual_seed(a.seed)
    sampler = RandomSampler(dataset, num_samples=(a.warmup + epoch_batches) * a.batch, generator=generator)
    loader = DataLoader(dataset, batch_size=a.batch, sampler=sampler, num_workers=a.workers,
                        pin_memory=False, persistent_workers=False, drop_last=True,
                        worker_init_fn=set_one_thread if a.workers > 0 else None)

    images = 0
    started = time.perf_counter()
    timed_from = started
    for i, (batch, _labels) in enumerate(loader):
        if i == 0 and (batch.dtype != torch.uint8 or tuple(batch.shape) != (a.batch, 3, a.size, a.size)):
            fail(f"unexpected batch {batch.dtype} {tuple(batch.shape)}", 1)
        if i + 1 == a.warmup:
            timed_from = time.perf_counter()
        elif i + 1 > a.warmup:
            images += batch.shape[0]
    seconds = time.perf_counter() - timed_from
    del loader
    ips = images / seconds if seconds > 0 else 0.0

    print(f"torch_baseline: {len(dataset)} images in {len(dataset.classes)} classes at {root}, "
          f"torch {torch.__version__}")
    print(f"  train transforms{' + ' + a.augment if a.augment else ''}, {a.size}x{a.size} uint8, batch {a.batch}, {a.workers} workers, "
          f"{a.warmup} warm-up batches ({timed_from - started:.2f} s, untimed)")
    print(f"  timed: one epoch, {epoch_batches} batches = {images} images in {seconds:.2f} s "
          f"-> {ips:.1f} images/s ({ips / max(1, a.workers):.1f} per worker)")
    if a.json:
        print(json.dumps({"bench": "torch_baseline", "data": root, "workers": a.workers, "batch": a.batch,
                          "size": a.size, "images": images, "seconds": round(seconds, 3),
                          "images_per_s": round(ips, 1)}))
    print(f"images_per_s={ips:.1f} workers={a.workers} batch={a.batch} images={images} seconds={seconds:.3f}")


if __name__ == "__main__":
    main()
