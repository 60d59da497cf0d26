#!/usr/bin/python3
"""How far tilefeed's batches are from torchvision's, on a corpus of real photos.

    PYTHONPATH=build/release/python bench/torchvision_pixels.py CORPUS [--size 224]
        [--resize 256] [--limit N]

CORPUS is an ImageFolder (or a root with train/; ../shared/corpus/make_corpus.sh makes
one). For every image it compares, per image, |tilefeed - torchvision| in levels of 255,
for each decode_scaling (JpegOptions: "exact", the default, and "fast"):

  eval           Mode eval against torchvision Resize(resize) + CenterCrop(size) on the
                 PIL image;
  train          Mode train against torchvision.transforms.functional.resized_crop of
                 the box the loader drew (Loader.crop_plan), flipped when it flipped;
  train, no DCT  the exact train rows whose crop is under 2x the output on some side (no
                 DCT scale-down: augment.h's bound applies).

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
        print(f"{name:20s} no images")
        return
    a = np.array(per_image)
    print(f"{name:20s} {len(a):5d} images  mean|d| {a.mean():.3f}/255  "
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
    got = {}
    for scaling in ("exact", "fast"):
        jpeg = tilefeed.JpegOptions(decode_scaling=scaling)
        got["eval " + scaling], _ = rows(root, mode="eval", jpeg=jpeg, **common)
        got["train " + scaling], plan = rows(root, mode="train", seed=1, jpeg=jpeg, **common)
    if max(got["eval exact"]) >= len(files):
        sys.exit(f"torchvision_pixels: the loader has more samples than {root} has image files")
    reference = transforms.Compose([transforms.Resize(a.resize), transforms.CenterCrop(a.size)])
    results = {k: ([], []) for k in list(got) + ["train exact, no DCT"]}

    def add(key, ours, theirs):
        d = np.abs(ours.astype(np.int32) - np.asarray(theirs).astype(np.int32))
        results[key][0].append(d.mean())
        results[key][1].append(int(d.max()))

    for sample, path in enumerate(files[:a.limit or None]):
        if sample not in got["eval exact"]:
            continue  # a file the loader could not read (reported by the loader)
        with Image.open(path) as image:
            image = image.convert("RGB")
        theirs = reference(image)
        p = plan(0, sample, image.width, image.height)  # the crop and flip of every setting
        x, y, w, h = p["crop"]
        crop = F.resized_crop(image, y, x, h, w, [a.size, a.size], antialias=True)
        if p["flip"]:
            crop = F.hflip(crop)
        for scaling in ("exact", "fast"):
            add("eval " + scaling, got["eval " + scaling][sample], theirs)
            add("train " + scaling, got["train " + scaling][sample], crop)
        if w < 2 * a.size or h < 2 * a.size:
            add("train exact, no DCT", got["train exact"][sample], crop)
    print(f"tilefeed vs torchvision on {root}: Resize({a.resize}) + CenterCrop({a.size}), "
          f"resized_crop to {a.size}")
    for key, (per_image, worst) in results.items():
        summary(key, per_image, worst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
