"""scale_ceiling: the most `--decode-scaling fast` at a small output can gain over 224 px on a
corpus, from its crops alone (issue 40's "decode cost that falls with the resolution").

    /usr/bin/python3 bench/scale_ceiling.py CORPUS/train [--images 2000] [--epochs 10]

For every image (its size read from the header) and epoch, torchvision's own
RandomResizedCrop.get_params draws a crop; the loader's rule (codecs/jpeg.cc,
ChooseScaleEighths) picks the DCT scale n/8 that decodes it: the smallest allowed n with the
crop scaled by n/8 still at least the output on both sides (224, exact: 1/8, 1/4, 1/2; the
small size, fast: 3/8 too). A decode's IDCT, colour conversion and resize scale with the
pixels they make: crop area x (n/8)^2, plus the output's pixels. If every cost did, the
speed-up would be the ratio of those sums. Work per 8x8 block of the crop does not fall with
the scale (a coefficient shard's unpack and its record read, a JPEG's entropy decoding), so
with a share u of the 224 px time spent per block the ceiling is 1 / (u + (1 - u) / ratio).
"""

import argparse
import pathlib

import torch
from PIL import Image
from torchvision import transforms


def scale_eighths(crop_w, crop_h, out, allowed):
    for n in allowed:
        if crop_w * n >= out * 8 and crop_h * n >= out * 8:
            return n
    return 8


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="an ImageFolder split (e.g. CORPUS/train)")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--small", type=int, default=128, help="the small output size")
    a = ap.parse_args()
    paths = sorted(p for p in pathlib.Path(a.folder).rglob("*") if p.is_file())[:a.images]
    sizes = []
    for p in paths:
        with Image.open(p) as im:
            sizes.append(im.size)
    torch.manual_seed(0)
    work = {224: 0.0, a.small: 0.0}
    hist = {}
    for _ in range(a.epochs):
        for w, h in sizes:
            blank = Image.new("L", (w, h))  # get_params reads only the size
            _, _, ch, cw = transforms.RandomResizedCrop.get_params(
                blank, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
            big = scale_eighths(cw, ch, 224, (1, 2, 4))
            small = scale_eighths(cw, ch, a.small, (1, 2, 3, 4))
            hist[small] = hist.get(small, 0) + 1
            work[224] += cw * ch * (big / 8) ** 2 + 224 * 224
            work[a.small] += cw * ch * (small / 8) ** 2 + a.small * a.small
    ratio = work[224] / work[a.small]
    total = sum(hist.values())
    shares = ", ".join(f"{n}/8: {100 * c / total:.0f} %" for n, c in sorted(hist.items()))
    print(f"{len(sizes)} images x {a.epochs} epochs; the scale of the {a.small} px crops: {shares}")
    print(f"pixel-work ratio 224 / {a.small} fast: {ratio:.2f}x (the ceiling if every cost "
          f"scaled with the decoded pixels)")
    for u in (0.1, 0.2, 0.3, 0.4, 0.5):
        print(f"  with a share {u:.1f} of the 224 px time per block: {1 / (u + (1 - u) / ratio):.2f}x")
    print(f"ratio={ratio:.3f}")


if __name__ == "__main__":
    main()
