"""Batches against torchvision itself: Mode eval is torchvision's
Resize(R) + CenterCrop(S) on the PIL image, and mode train is
torchvision.transforms.functional.resized_crop with the rectangle the loader drew
(Loader.crop_plan) and its flip. The contracts are in tilefeed/loader/augment.h.

The images are photograph-like (gradients, texture noise, hard edges) in several sizes and
aspect ratios, written at run time as baseline JPEG 4:4:4, 4:2:2 and 4:2:0, progressive
JPEG, and PNG. Bound per image: mean |d| <= 0.5/255 and no pixel off by more than 2 levels
(the resizers' fixed-point rounding), where no DCT scaling is used; train crops decoded at a
DCT scale-down are held to the bound README.md and docs/design.md state (measured on real
photos with bench/torchvision_pixels.py), read from those files here."""

import pathlib
import re

import numpy as np
import pytest
from PIL import Image
from torchvision import transforms
from torchvision.transforms import functional as F

import tilefeed

IMAGE_SIZE = 96
EVAL_RESIZE = 110
# (width, height): landscape, portrait, wide, square, an odd size, one smaller than the
# output (upscaled). The shorter side stays under 2 * IMAGE_SIZE, so no train crop of them
# is large enough for a DCT scale-down.
SIZES = [(150, 113), (113, 150), (190, 100), (96, 96), (131, 177), (57, 83)]
ENCODINGS = ["jpeg444", "jpeg422", "jpeg420", "progressive", "png"]
MEAN_BOUND = 0.5
MAX_BOUND = 2


def photo(width, height, seed):
    """Smooth gradients, fine texture and hard edges, as a photograph has all three."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    channels = []
    for _ in range(3):
        fx, fy = rng.uniform(0.02, 0.2, 2)
        wave = 50 * np.sin(fx * x + rng.uniform(0, 6.3)) * np.cos(fy * y)
        channels.append(110 + wave + 60 * (x / width - y / height))
    image = np.stack(channels, axis=-1) + rng.normal(0, 12, (height, width, 3))
    # A bright disc and a dark bar: edges the filters must treat alike.
    disc = (x - width * 0.6) ** 2 + (y - height * 0.4) ** 2 < (min(width, height) * 0.2) ** 2
    image[disc] = [235, 40, 60]
    image[int(height * 0.7):int(height * 0.8), int(width * 0.1):] = [20, 25, 30]
    return np.clip(image, 0, 255).astype(np.uint8)


def save(image, path, encoding):
    pil = Image.fromarray(image)
    if encoding == "png":
        pil.save(path.with_suffix(".png"))
        return
    subsampling = {"jpeg444": 0, "jpeg422": 1, "jpeg420": 2, "progressive": 2}[encoding]
    pil.save(path.with_suffix(".jpg"), quality=90, subsampling=subsampling,
             progressive=encoding == "progressive")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """One class per encoding; returns the root and the files in sample order."""
    root = tmp_path_factory.mktemp("photos")
    for c, encoding in enumerate(ENCODINGS):
        (root / f"{c}_{encoding}").mkdir()
        for i, (w, h) in enumerate(SIZES):
            save(photo(w, h, 100 * c + i), root / f"{c}_{encoding}" / f"{i:02d}", encoding)
    files = [f for d in sorted(root.iterdir()) for f in sorted(d.iterdir())]
    return root, files


def rows(root, **options):
    """sample index -> HWC uint8 image, one epoch (epoch 0) of the loader."""
    images = {}
    with tilefeed.Loader(root, source="imagefolder", batch_size=7, image_size=IMAGE_SIZE,
                         eval_resize=EVAL_RESIZE, workers=2, epochs=1,
                         bad_sample_policy="fail", **options) as loader:
        for batch in loader:
            for row, sample in enumerate(batch.sample_indices.tolist()):
                images[sample] = batch.images[row].copy()
    return images


def differences(ours, theirs):
    d = np.abs(ours.astype(np.int32) - np.asarray(theirs).astype(np.int32))
    return d.mean(), int(d.max())


def test_eval_is_torchvision_resize_and_center_crop(folder):
    root, files = folder
    images = rows(root, mode="eval", shuffle=False)
    assert sorted(images) == list(range(len(files)))
    reference = transforms.Compose([transforms.Resize(EVAL_RESIZE),
                                    transforms.CenterCrop(IMAGE_SIZE)])
    for sample, path in enumerate(files):
        with Image.open(path) as image:
            theirs = reference(image.convert("RGB"))
        mean, worst = differences(images[sample], theirs)
        where = f"{path.parent.name}/{path.name}"
        assert mean <= MEAN_BOUND, f"{where}: mean |d| {mean:.3f}/255 against torchvision"
        assert worst <= MAX_BOUND, f"{where}: a pixel {worst} levels off torchvision"


def test_train_is_torchvision_resized_crop_of_the_drawn_box(folder):
    root, files = folder
    for epoch in (0, 1):
        with tilefeed.Loader(root, source="imagefolder", mode="train", batch_size=7,
                             image_size=IMAGE_SIZE, workers=2, seed=5, epochs=epoch + 1,
                             bad_sample_policy="fail") as loader:
            loader.set_epoch(epoch)
            images = {}
            for batch in loader:
                assert batch.epoch == epoch
                for row, sample in enumerate(batch.sample_indices.tolist()):
                    images[sample] = batch.images[row].copy()
            assert sorted(images) == list(range(len(files)))
            flips = 0
            for sample, path in enumerate(files):
                with Image.open(path) as image:
                    image = image.convert("RGB")
                plan = loader.crop_plan(epoch, sample, image.width, image.height)
                x, y, w, h = plan["crop"]
                assert plan["box"] == (x, y, x + w, y + h)
                theirs = F.resized_crop(image, y, x, h, w, [IMAGE_SIZE, IMAGE_SIZE],
                                        antialias=True)
                if plan["flip"]:
                    theirs = F.hflip(theirs)
                    flips += 1
                mean, worst = differences(images[sample], theirs)
                where = f"epoch {epoch} {path.parent.name}/{path.name} crop {plan['crop']}"
                assert mean <= MEAN_BOUND, f"{where}: mean |d| {mean:.3f}/255"
                assert worst <= MAX_BOUND, f"{where}: a pixel {worst} levels off"
            assert 0 < flips < len(files)  # both branches were compared


def test_eval_plan_is_torchvision_geometry(folder):
    """The fractional box is torchvision's window: int-truncated long side, round-half-even
    offset, each axis scaled by its own factor."""
    root, _ = folder
    with tilefeed.Loader(root, source="imagefolder", mode="eval", image_size=224,
                         eval_resize=256, batch_size=1, workers=1, epochs=1) as loader:
        plan = loader.crop_plan(0, 0, 500, 375)
        # Resize(256): 341 x 256; CenterCrop(224) at round(58.5) = 58, 16.
        expected = (58 * 500 / 341, 16 * 375 / 256, 282 * 500 / 341, 240 * 375 / 256)
        assert plan["box"] == pytest.approx(expected, abs=1e-9)
        assert plan["flip"] is False and plan["dct_scaling"] is False
        assert loader.crop_plan(0, 0, 1000, 10)["box"][2] <= 1000


def stated_dct_bound(lead="at a DCT scale-down"):
    """(levels, mean) as README.md and docs/design.md each state them after `lead`: for
    DCT-scaled train crops, or for decode_scaling="fast"."""
    root = pathlib.Path(__file__).resolve().parents[2]
    stated = set()
    for doc in ("README.md", "docs/design.md"):
        text = " ".join((root / doc).read_text().split())
        found = re.findall(re.escape(lead) + r"[^.]*?up to (\d+) levels on a pixel and "
                           r"([\d.]+)/255 on an image's mean", text)
        assert found, f"{doc} does not state the bound after {lead!r}"
        stated.update(found)
    assert len(stated) == 1, f"README.md and docs/design.md state different bounds: {stated}"
    levels, mean = stated.pop()
    return int(levels), float(mean)


def test_dct_scaled_train_crops_stay_within_the_stated_bound(tmp_path):
    """Crops at least twice the output on both sides are decoded at a DCT scale-down; their
    pixels against torchvision's resized_crop stay within the stated bound."""
    max_bound, mean_bound = stated_dct_bound()
    (tmp_path / "a").mkdir()
    files = []
    for i, (w, h) in enumerate([(640, 480), (480, 640), (800, 600), (512, 512)] * 2):
        files.append(tmp_path / "a" / f"{i:02d}.jpg")
        Image.fromarray(photo(w, h, 50 + i)).save(files[-1], quality=90, subsampling=2 * (i % 2))
    scaled = 0
    for epoch in range(3):
        with tilefeed.Loader(tmp_path, source="imagefolder", mode="train", batch_size=4,
                             image_size=IMAGE_SIZE, workers=2, seed=9, epochs=epoch + 1,
                             bad_sample_policy="fail") as loader:
            loader.set_epoch(epoch)
            images = {s: b.images[r].copy() for b in loader
                      for r, s in enumerate(b.sample_indices.tolist())}
            for sample, path in enumerate(files):
                with Image.open(path) as image:
                    image = image.convert("RGB")
                plan = loader.crop_plan(epoch, sample, image.width, image.height)
                x, y, w, h = plan["crop"]
                theirs = F.resized_crop(image, y, x, h, w, [IMAGE_SIZE, IMAGE_SIZE],
                                        antialias=True)
                mean, worst = differences(images[sample],
                                          F.hflip(theirs) if plan["flip"] else theirs)
                scaled += plan["dct_scaling"]
                where = f"epoch {epoch} {path.name} crop {plan['crop']}"
                assert mean <= mean_bound, f"{where}: mean |d| {mean:.3f}/255"
                assert worst <= max_bound, f"{where}: a pixel {worst} levels off"
    assert scaled >= len(files), "too few crops were DCT-scaled to hold the bound"


def test_fast_decode_scaling_stays_within_the_stated_bound(tmp_path):
    """decode_scaling="fast": train crops and eval images decode at the smallest allowed DCT
    scale (3/8 too, eval too); against torchvision they stay within the bound README.md and
    docs/design.md state for it (measured on real photos with bench/torchvision_pixels.py)."""
    max_bound, mean_bound = stated_dct_bound('decode_scaling="fast"')
    (tmp_path / "a").mkdir()
    files = []
    for i, (w, h) in enumerate([(640, 480), (480, 640), (800, 600), (512, 512)] * 2):
        files.append(tmp_path / "a" / f"{i:02d}.jpg")
        Image.fromarray(photo(w, h, 70 + i)).save(files[-1], quality=90, subsampling=2 * (i % 2))
    fast = tilefeed.JpegOptions(decode_scaling="fast")
    exact = rows(tmp_path, mode="eval", shuffle=False)
    scaled = rows(tmp_path, mode="eval", shuffle=False, jpeg=fast)
    resize = transforms.Compose([transforms.Resize(EVAL_RESIZE), transforms.CenterCrop(IMAGE_SIZE)])
    for sample, path in enumerate(files):
        with Image.open(path) as image:
            theirs = resize(image.convert("RGB"))
        assert not np.array_equal(exact[sample], scaled[sample]), path.name  # it scaled
        mean, worst = differences(scaled[sample], theirs)
        assert mean <= mean_bound and worst <= max_bound, f"eval {path.name}: {mean:.2f}, {worst}"
    with tilefeed.Loader(tmp_path, source="imagefolder", mode="train", batch_size=4,
                         image_size=IMAGE_SIZE, workers=2, seed=9, epochs=1, jpeg=fast,
                         bad_sample_policy="fail") as loader:
        images = {s: b.images[r].copy() for b in loader
                  for r, s in enumerate(b.sample_indices.tolist())}
        for sample, path in enumerate(files):
            with Image.open(path) as image:
                image = image.convert("RGB")
            plan = loader.crop_plan(0, sample, image.width, image.height)
            x, y, w, h = plan["crop"]
            theirs = F.resized_crop(image, y, x, h, w, [IMAGE_SIZE, IMAGE_SIZE], antialias=True)
            mean, worst = differences(images[sample], F.hflip(theirs) if plan["flip"] else theirs)
            assert mean <= mean_bound, f"train {path.name} crop {plan['crop']}: {mean:.3f}/255"
            assert worst <= max_bound, f"train {path.name} crop {plan['crop']}: {worst} levels"
