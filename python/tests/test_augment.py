"""Loader(augment=[...]) against torchvision itself: for each op and a grid of its
parameters, the batches of augment=[RandomResizedCrop(), RandomHorizontalFlip(), OP] equal
torchvision.transforms.functional's op, applied with the parameters Loader.crop_plan says the
sample drew, to the batches of augment=[RandomResizedCrop(), RandomHorizontalFlip()]: no
value off by more than 1 level, mean |d| <= 0.5/255. Also: one text form, the refusals, and
batches independent of the worker count. docs/augment.md states the contract."""

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms import autoaugment
from torchvision.transforms import functional as F

import tilefeed
from tilefeed.augment import (ColorJitter, RandAugment, RandomErasing, RandomGrayscale,
                              RandomHorizontalFlip, RandomResizedCrop, TrivialAugmentWide)

SIZE = 64
SAMPLES = 24
CROP_FLIP = [RandomResizedCrop(), RandomHorizontalFlip()]
GRID = [
    ColorJitter(brightness=0.4), ColorJitter(contrast=0.8), ColorJitter(saturation=0.9),
    ColorJitter(hue=0.1), ColorJitter(hue=0.5), ColorJitter(0.4, 0.4, 0.4, 0.1),
    ColorJitter(brightness=(0.5, 1.5), saturation=(0, 0.5), hue=(-0.2, 0.1)),
    RandAugment(), RandAugment(1, 0), RandAugment(3, 15), RandAugment(2, 30, fill=128),
    RandAugment(2, 5, num_magnitude_bins=11),
    TrivialAugmentWide(), TrivialAugmentWide(num_magnitude_bins=11, fill=200),
    RandomErasing(p=1.0), RandomErasing(0.5, (0.1, 0.5), (0.5, 2.0), value=128),
    RandomGrayscale(p=1.0), RandomGrayscale(0.5),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    rng = np.random.default_rng(7)
    root = tmp_path_factory.mktemp("augment")
    (root / "a").mkdir()
    for i in range(SAMPLES):
        w, h = int(rng.integers(60, 140)), int(rng.integers(60, 140))
        y, x = np.mgrid[0:h, 0:w]
        image = np.stack([(x * 255 // w), (y * 255 // h), ((x + y) * 3) % 256], -1)
        image = np.clip(image + rng.normal(0, 25, image.shape), 0, 255).astype(np.uint8)
        Image.fromarray(image).save(root / "a" / f"{i:02d}.png")
    return root


def epoch(root, augment, workers=1, layout="NHWC"):
    """sample index -> (HWC uint8 row, its plan), epoch 0."""
    out = {}
    with tilefeed.Loader(root, batch_size=5, image_size=SIZE, workers=workers, epochs=1,
                         augment=augment, bad_sample_policy="fail", layout=layout) as loader:
        for batch in loader:
            for row, sample in enumerate(batch.sample_indices.tolist()):
                image = batch.images[row]
                out[sample] = (image.transpose(1, 2, 0) if layout == "NCHW" else image).copy()
        files = sorted((root / "a").iterdir())
        plans = {s: loader.crop_plan(0, s, *Image.open(files[s]).size) for s in out}
    return out, plans


def torchvision_ops(image, ops):
    """The plan's ops on an HWC uint8 array, by torchvision."""
    img = torch.from_numpy(image).permute(2, 0, 1).contiguous()
    for name, *args in ops:
        if name == "erase":
            img = F.erase(img, *args[:4], torch.tensor(args[4]))
        elif name == "rgb_to_grayscale":
            img = F.rgb_to_grayscale(img, num_output_channels=3)
        elif name.startswith("adjust_"):
            img = getattr(F, name)(img, *args)
        else:
            magnitude, fill = args
            fill = None if fill == 0 else [float(fill)] * 3
            img = autoaugment._apply_op(img, name, magnitude, InterpolationMode.NEAREST, fill)
    return img.permute(1, 2, 0).numpy()


@pytest.fixture(scope="module")
def plain(folder):
    return epoch(folder, CROP_FLIP)[0]


@pytest.mark.parametrize("op", GRID, ids=repr)
def test_each_op_is_torchvisions(folder, plain, op):
    ours, plans = epoch(folder, CROP_FLIP + [op])
    assert sorted(ours) == sorted(plain) == list(range(SAMPLES))
    total = changed = 0
    for sample, image in ours.items():
        theirs = torchvision_ops(plain[sample], plans[sample]["ops"])
        d = np.abs(image.astype(np.int32) - theirs.astype(np.int32))
        assert d.max() <= 1, (sample, plans[sample]["ops"], int(d.max()))
        total += d.mean()
        changed += not np.array_equal(image, plain[sample])
    assert total / len(ours) <= 0.5
    assert changed > 0  # the op did run


def test_the_policies_reach_every_op(folder):
    """The grid above meets each of the 13 ops RandAugment and TrivialAugmentWide apply."""
    seen = set()
    for op in GRID:
        if isinstance(op, (RandAugment, TrivialAugmentWide)):
            _, plans = epoch(folder, CROP_FLIP + [op])
            seen |= {o[0] for p in plans.values() for o in p["ops"]}
    assert seen == {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
                    "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast",
                    "Equalize"}


def test_batches_do_not_depend_on_the_worker_count(folder):
    augment = CROP_FLIP + [RandAugment(2, 9), RandomErasing(0.25), ColorJitter(0.4, 0.4, 0.4)]
    one, _ = epoch(folder, augment, workers=1)
    two, _ = epoch(folder, augment, workers=2)
    assert all(np.array_equal(one[s], two[s]) for s in one)
    planar, _ = epoch(folder, augment, layout="NCHW")  # the ops run on an interleaved copy
    assert all(np.array_equal(one[s], planar[s]) for s in one)


def test_one_text_form():
    op = RandAugment(2, 9, fill=3)
    assert repr(op) == "RandAugment(fill=3)"
    assert op == RandAugment(fill=3.0)
    assert repr(RandomErasing(0.25)) == "RandomErasing(p=0.25)"
    assert repr(ColorJitter(brightness=0.4)) == "ColorJitter(brightness=(0.6, 1.4))"
    assert repr(RandomResizedCrop(scale=(0.35, 1))) == "RandomResizedCrop(scale=(0.35, 1))"
    # The text itself is the same spec (what train --augment takes).
    assert tilefeed.Loader.__init__.__kwdefaults__["augment"] == \
        "RandomResizedCrop(), RandomHorizontalFlip()"


def test_a_bad_spec_is_one_line(folder):
    with pytest.raises(ValueError, match=r"^augment: RandomErasing p must be between 0 and 1, "
                                         r"got 2 at column"):
        RandomErasing(2)
    with pytest.raises(ValueError, match="augment must start with RandomResizedCrop"):
        tilefeed.Loader(folder, augment=[RandomErasing()])
    with pytest.raises(ValueError, match="augment applies to mode=train only"):
        tilefeed.Loader(folder, mode="eval", augment=CROP_FLIP + [RandomGrayscale()])
    with pytest.raises(TypeError, match="augment= takes a list of tilefeed.augment ops"):
        tilefeed.Loader(folder, augment=["RandomErasing()"])
    for gone in ("crop_scale", "crop_ratio", "flip_probability"):
        with pytest.raises(TypeError):
            tilefeed.Loader(folder, **{gone: 0.5})
