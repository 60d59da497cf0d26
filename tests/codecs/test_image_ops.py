"""The augment ops of codecs/image_ops.h against torchvision itself (0.14, uint8 tensors).

Every op runs through the image_ops_apply driver (TILEFEED_IMAGE_OPS) and through
torchvision.transforms.functional, or autoaugment._apply_op for the policy ops, on the same
photograph-like image, over a grid of parameters that includes every magnitude RandAugment
and TrivialAugmentWide use (bins 0..30, both signs). Bound, per op and parameter: no value
off by more than 1 level and a mean |difference| of at most 0.5 levels (0.5/255); the
magnitude tables must be torchvision's exactly."""

import os
import pathlib
import subprocess

import numpy as np
import pytest
import torch
from torchvision.transforms import autoaugment
from torchvision.transforms import functional as F

MAX_BOUND = 1
MEAN_BOUND = 0.5
# (width, height): the training size, a small one, odd sizes whose rows end in every vector
# tail, and a 1 x 1 image.
SIZES = [(224, 224), (128, 96), (37, 23), (5, 3), (1, 1)]
POLICY_OPS = list(autoaugment.RandAugment()._augmentation_space(31, (224, 224)))
FILLS = [None, [128, 64, 200]]

torch.set_num_threads(1)


def driver():
    path = os.environ.get("TILEFEED_IMAGE_OPS")
    if not path:
        pytest.skip("TILEFEED_IMAGE_OPS must name the image_ops_apply driver (ctest sets it)")
    return path


def photo(width, height, seed):
    """Gradients under noise, plus the pixels the float paths treat apart: the RGB cube's
    corners (clamping), grays (no hue) and ties between the largest channels (hue's
    branches), scattered over the image."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    smooth = np.stack([255 * x / max(width - 1, 1), 255 * y / max(height - 1, 1),
                       127 + 100 * np.sin((x + 2 * y) / 9)], axis=-1)
    image = np.clip(smooth + rng.normal(0, 20, smooth.shape), 0, 255).astype(np.uint8)
    special = np.array([[0, 0, 0], [255, 255, 255], [255, 0, 0], [0, 255, 0], [0, 0, 255],
                        [255, 255, 0], [0, 255, 255], [255, 0, 255], [128, 128, 128],
                        [200, 200, 50], [50, 200, 200], [200, 50, 200], [1, 1, 0]], np.uint8)
    pixels = image.reshape(-1, 3)
    where = rng.choice(len(pixels), size=min(len(pixels), 4 * len(special)), replace=False)
    pixels[where] = special[np.arange(len(where)) % len(special)]
    return image


def policy_magnitudes(height, width):
    """Every (op index, magnitude) RandAugment and TrivialAugmentWide can apply, both signs."""
    jobs = set()
    for space in (autoaugment.RandAugment()._augmentation_space(31, (height, width)),
                  autoaugment.TrivialAugmentWide()._augmentation_space(31)):
        for index, (name, (magnitudes, signed)) in enumerate(space.items()):
            assert POLICY_OPS[index] == name
            values = magnitudes.reshape(-1).tolist()
            for value in values:
                jobs.add((index, float(value)))
                if signed:
                    jobs.add((index, -float(value)))
    return sorted(jobs)


def jobs_for(height, width):
    """(driver line, torchvision function of a CHW uint8 tensor) for every case."""
    jobs = []
    factors = [0.0, 0.1, 0.37, 0.5, 0.9, 1.0, 1.1, 1.5, 1.99, 3.0]
    for f in factors:
        jobs.append((f"brightness {f!r}", lambda t, f=f: F.adjust_brightness(t, f)))
        jobs.append((f"contrast {f!r}", lambda t, f=f: F.adjust_contrast(t, f)))
        jobs.append((f"saturation {f!r}", lambda t, f=f: F.adjust_saturation(t, f)))
        jobs.append((f"sharpness {f!r}", lambda t, f=f: F.adjust_sharpness(t, f)))
    for h in [-0.5, -0.31, -0.1, -0.013, 0.0, 0.02, 0.1, 0.25, 0.4999, 0.5]:
        jobs.append((f"hue {h!r}", lambda t, h=h: F.adjust_hue(t, h)))
    jobs.append(("grayscale", lambda t: F.rgb_to_grayscale(t, 3)))
    jobs.append(("autocontrast", F.autocontrast))
    jobs.append(("equalize", F.equalize))
    for bits in range(9):
        jobs.append((f"posterize {bits}", lambda t, b=bits: F.posterize(t, b)))
    for threshold in [0.0, 1.0, 100.3, 127.5, 128.0, 246.5, 255.0]:
        jobs.append((f"solarize {threshold!r}", lambda t, v=threshold: F.solarize(t, v)))
    for top, left, h, w, value in [(0, 0, height, width, (0, 0, 0)),
                                   (height // 3, width // 4, height // 2, width // 3, (124, 116, 104)),
                                   (height - 1, width - 1, 1, 1, (255, 0, 7)),
                                   (0, 0, 0, 0, (9, 9, 9))]:
        def erase(t, i=top, j=left, hh=h, ww=w, v=value):
            return F.erase(t, i, j, hh, ww, torch.tensor(v, dtype=torch.float32)[:, None, None])
        jobs.append((f"erase {top} {left} {h} {w} {value[0]} {value[1]} {value[2]}", erase))
    for index, magnitude in policy_magnitudes(height, width):
        # The fill matters to the geometric ops alone (ShearX .. Rotate).
        for fill in FILLS if 1 <= index <= 5 else FILLS[:1]:
            rgb = fill or [0, 0, 0]
            fill_floats = None if fill is None else [float(v) for v in fill]
            jobs.append((f"policy {index} {magnitude!r} {rgb[0]} {rgb[1]} {rgb[2]}",
                         lambda t, n=POLICY_OPS[index], m=magnitude, fl=fill_floats:
                         autoaugment._apply_op(t, n, m, F.InterpolationMode.NEAREST, fl)))
    return jobs


@pytest.mark.parametrize("width,height", SIZES)
def test_ops_match_torchvision(tmp_path, width, height):
    image = photo(width, height, seed=width * 1000 + height)
    path = tmp_path / "image.rgb"
    path.write_bytes(image.tobytes())
    jobs = jobs_for(height, width)
    run = subprocess.run([driver(), str(path), str(width), str(height)],
                         input="".join(line + "\n" for line, _ in jobs).encode(),
                         capture_output=True, check=True)
    size = width * height * 3
    assert len(run.stdout) == size * len(jobs)
    tensor = torch.from_numpy(image).permute(2, 0, 1).contiguous()
    failures = []
    for k, (line, reference) in enumerate(jobs):
        ours = np.frombuffer(run.stdout[k * size:(k + 1) * size], np.uint8).reshape(image.shape)
        theirs = reference(tensor.clone()).permute(1, 2, 0).numpy()
        diff = np.abs(ours.astype(np.int16) - theirs.astype(np.int16))
        if diff.max() > MAX_BOUND or diff.mean() > MEAN_BOUND:
            failures.append(f"{line}: max {diff.max()} mean {diff.mean():.3f} "
                            f"({np.count_nonzero(diff)} values differ)")
    assert not failures, f"{len(failures)} of {len(jobs)} cases off:\n" + "\n".join(failures[:40])


@pytest.mark.parametrize("bins", [31, 10, 2])
def test_policy_magnitudes_are_torchvisions(tmp_path, bins):
    height, width = 224, 160
    path = tmp_path / "image.rgb"
    path.write_bytes(bytes(height * width * 3))
    spaces = {0: autoaugment.RandAugment()._augmentation_space(bins, (height, width)),
              1: autoaugment.TrivialAugmentWide()._augmentation_space(bins)}
    lines = [f"magnitude {index} {wide} {bins}" for wide in spaces for index in range(len(POLICY_OPS))]
    run = subprocess.run([driver(), str(path), str(width), str(height)],
                         input="".join(line + "\n" for line in lines).encode(),
                         capture_output=True, check=True)
    values = iter(float(v) for v in run.stdout.split())
    for wide, space in spaces.items():
        for name, (magnitudes, _) in space.items():
            ours = [next(values) for _ in range(bins)]
            theirs = [float(magnitudes.reshape(-1)[min(b, magnitudes.numel() - 1)]) for b in range(bins)]
            assert ours == theirs, (wide, name)
