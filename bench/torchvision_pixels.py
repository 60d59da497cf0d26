#!/usr/bin/python3
"""How far tilefeed's batches are from torchvision's, on a corpus of real photos.

    PYTHONPATH=build/release/python bench/torchvision_pixels.py CORPUS [--size 224]
        [--resize 256] [--limit N]

CORPUS is an ImageFolder (or a root with train/; ../shared/corpus/make_corpus.sh makes
one). For every image it compares, per image, |tilefeed - torchvision| in levels of 255:

  eval           Mode eval (the default, no DCT scaling) against
                 torchvision Resize(resize) + CenterCrop(size) on the PIL image;
  eval+dct       the same with jpeg=JpegOptions(eval_dct_scaling=True);
  train          Mode train against torchvision.transforms.functional.resized_crop of
                 the box the loader drew (Loader.crop_plan), flipped when it flipped;
  train, no DCT  the train rows whose crop is under 2x the output on some side (no DCT
                 scale-down with the default pow2 scales: augment.h's bound applies).

It prints, for each, the mean over images of the per-image mean |d|, its 90th percentile
and maximum, and the largest single-pixel |d|. Pixels, not time: no timing here."""

import argparse
import os
import sys

import numpy as np
from PIL import Image
from torchvision import transforms
from torchvision.transforms import functional as F

import tilefeed


def rows(data, **options):
    images = {}
    with tilefeed.Loader(data, source="imagefolder", batch_size=16, workers=2, epochs=1,
                         shuffle=False, **options) as loader:
        for batch in loader:
            for row, sample in enumerate(batch.sample_indices.tolist()):
                images[sample] = batch.images[row].copy()
        plan = loader.crop_plan
        return images, plan


def files_in_order(root):
    """The ImageFolder's samples in its order: classes by name, then files by name."""
    return [os.path.join(root, c, f) for c in sorted(os.listdir(root))
            if os.path.isdir(os.path.join(root, c))
            for f in sorted(os.listdir(os.path.join(root, c)))
            if f.lower().endswith((".jpg", ".jpeg", ".png"))]


def summary(name, per_image, worst):
    if not per_image:
        print(f"{name:14s} no images")
        return
    a = np.array(per_image)
    print(f"{name:14s} {len(a):5d} images  mean|d| {a.mean():.3f}/255  "
          f"p90 {np.percentile(a, 90):.3f}  max {a.max():.3f}  worst pixel {max(worst)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("corpus")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--resize", type=int, default=256)
    parser.add_argument("--limit", type=int, default=0, help="first N images only (0: all)")
    a = parser.parse_args()
    root = a.corpus
    if os.path.isdir(os.path.join(root, "train")):
        root = os.path.join(root, "train")
    files = files_in_order(root)
    common = dict(image_size=a.size, eval_resize=a.resize)
    evals, _ = rows(root, mode="eval", **common)
    if max(evals) >= len(files):
        sys.exit(f"torchvision_pixels: the loader has more samples than {root} has image files")
    scaled, _ = rows(root, mode="eval",
                     jpeg=tilefeed.JpegOptions(eval_dct_scaling=True), **common)
    trains, plan = rows(root, mode="train", seed=1, **common)
    reference = transforms.Compose([transforms.Resize(a.resize), transforms.CenterCrop(a.size)])
    results = {k: ([], []) for k in ("eval", "eval+dct", "train", "train, no DCT")}

    def add(key, ours, theirs):
        d = np.abs(ours.astype(np.int32) - np.asarray(theirs).astype(np.int32))
        results[key][0].append(d.mean())
        results[key][1].append(int(d.max()))

    for sample, path in enumerate(files[:a.limit or None]):
        if sample not in evals:
            continue  # a file the loader could not read (reported by the loader)
        with Image.open(path) as image:
            image = image.convert("RGB")
        theirs = reference(image)
        add("eval", evals[sample], theirs)
        add("eval+dct", scaled[sample], theirs)
        p = plan(0, sample, image.width, image.height)
        x, y, w, h = p["crop"]
        crop = F.resized_crop(image, y, x, h, w, [a.size, a.size], antialias=True)
        if p["flip"]:
            crop = F.hflip(crop)
        add("train", trains[sample], crop)
        if w < 2 * a.size or h < 2 * a.size:
            add("train, no DCT", trains[sample], crop)
    print(f"tilefeed vs torchvision on {root}: Resize({a.resize}) + CenterCrop({a.size}), "
          f"resized_crop to {a.size}")
    for key, (per_image, worst) in results.items():
        summary(key, per_image, worst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
