"""MixUp, CutMix and RandomChoice (python/tilefeed/_mixing.py): torchvision's v2.MixUp /
v2.CutMix semantics checked from their definitions on small tensors, the draws a pure
function of (seed, step) (the same in two other processes), the one-line errors, and the
GPU case, which skips with its reason where torch has no CUDA device."""

import math
import subprocess
import sys

import pytest
import torch

from tilefeed.augment import CutMix, MixUp, RandomChoice

N, H, W, C = 5, 12, 16, 3
LABELS = torch.tensor([0, 3, 1, 3, 2])


def batch(dtype=torch.uint8, layout="NHWC"):
    images = torch.randint(0, 256, (N, H, W, C), generator=torch.Generator().manual_seed(1),
                           dtype=torch.uint8).to(dtype)
    return images.permute(0, 3, 1, 2).contiguous() if layout == "NCHW" else images


def soft(labels, classes, smoothing):
    """Label-smoothed one-hot rows, from the definition."""
    rows = [[smoothing / classes + (1 - smoothing if c == label else 0) for c in range(classes)]
            for label in labels.tolist()]
    return torch.tensor(rows, dtype=torch.float64)


def previous(t):
    """t rolled by one along the batch: row i holds row i - 1 (row 0 the last)."""
    return t[[N - 1] + list(range(N - 1))]


def expected_targets(lam, smoothing=0.0, classes=4):
    one_hot = soft(LABELS, classes, smoothing)
    return lam * one_hot + (1 - lam) * previous(one_hot)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_mixup_is_lam_x_plus_one_minus_lam_rolled(smoothing):
    mix = MixUp(0.4, num_classes=4, label_smoothing=smoothing, seed=3)
    x = batch()
    for step in range(5):
        lam = mix.draw(step)["lam"]
        assert 0 < lam < 1
        images, targets = mix(x, LABELS, step)
        assert images.dtype == torch.float32 and targets.dtype == torch.float32
        want = lam * x.double() + (1 - lam) * previous(x.double())
        assert torch.allclose(images.double(), want, atol=1e-3)
        assert torch.allclose(targets.double(), expected_targets(lam, smoothing), atol=1e-6)
        assert torch.allclose(targets.sum(1), torch.ones(N), atol=1e-6)
    assert torch.equal(x, batch())  # the input is not written


def test_label_smoothing_values():
    # Sample 1 (label 3) mixed with sample 0 (label 0), 4 classes, s = 0.2: 0.05 off the labels.
    mix = MixUp(1.0, num_classes=4, label_smoothing=0.2, seed=0)
    lam = mix.draw(0)["lam"]
    _, targets = mix(batch(), LABELS, 0)
    row = targets[1].tolist()
    assert row[3] == pytest.approx(lam * 0.85 + (1 - lam) * 0.05)
    assert row[0] == pytest.approx((1 - lam) * 0.85 + lam * 0.05)
    assert row[1] == row[2] == pytest.approx(0.05)


@pytest.mark.parametrize("layout", ["NHWC", "NCHW", "nchw"])
def test_cutmix_pastes_the_rolled_box_and_lam_is_its_area(layout):
    mix = CutMix(1.0, num_classes=4, label_smoothing=0.1, seed=5, layout=layout)
    x = batch(layout=layout.upper())
    boxes = 0
    for step in range(30):
        draws = mix.draw(step, H, W)
        x1, y1, x2, y2 = draws["box"]
        assert 0 <= x1 <= x2 <= W and 0 <= y1 <= y2 <= H
        assert draws["lam"] == pytest.approx(1 - (x2 - x1) * (y2 - y1) / (H * W))
        images, targets = mix(x, LABELS, step)
        inside = torch.zeros(H, W, dtype=torch.bool)
        inside[y1:y2, x1:x2] = True
        pixels = images if layout == "NHWC" else images.permute(0, 2, 3, 1)
        source = batch().float()
        assert torch.equal(pixels[:, inside], previous(source)[:, inside])
        assert torch.equal(pixels[:, ~inside], source[:, ~inside])
        assert torch.allclose(targets.double(), expected_targets(draws["lam"], 0.1), atol=1e-6)
        boxes += x2 > x1 and y2 > y1
    assert boxes > 20  # the boxes are not all empty


def test_cutmix_box_sides_are_sqrt_one_minus_lam_and_centres_uniform():
    # alpha = 1e4 puts lam within 0.5 +- 0.02: a box is then 2 * int(r * side) on each side,
    # r = sqrt(1 - lam) / 2 the same for both sides, about its centre, clamped to the image.
    height, width = 480, 640
    mix = CutMix(1e4, num_classes=2)
    centres, unclamped = [], 0
    for step in range(400):
        x1, y1, x2, y2 = mix.draw(step, height, width)["box"]
        if 0 < x1 and x2 < width and 0 < y1 and y2 < height:
            unclamped += 1
            r_w = (x2 - x1) / 2 / width, (x2 - x1 + 2) / 2 / width  # r's range from the width
            r_h = (y2 - y1) / 2 / height, (y2 - y1 + 2) / 2 / height
            assert max(r_w[0], r_h[0]) < min(r_w[1], r_h[1])  # one r gives both sides
            assert math.sqrt(0.48) / 2 - 0.01 < r_w[0] < math.sqrt(0.52) / 2
            assert (x1 + x2) % 2 == 0 and (y1 + y2) % 2 == 0  # centred on a pixel
        # The centre, within 5 pixels: a side is clamped at one end at most.
        half_w, half_h = width * math.sqrt(0.5) / 2, height * math.sqrt(0.5) / 2
        centres.append((x1 + half_w if x1 > 0 else x2 - half_w,
                        y1 + half_h if y1 > 0 else y2 - half_h))
    assert unclamped > 10
    for axis, side in ((0, width), (1, height)):  # uniform: each quarter of the side
        quarters = [int(4 * c[axis] / side) for c in centres if 0 <= c[axis] < side]
        assert all(70 < quarters.count(q) < 130 for q in range(4)), quarters


def test_lam_follows_beta_alpha_alpha():
    for alpha in (0.2, 1.0, 5.0):
        lams = torch.tensor([MixUp(alpha, num_classes=2, seed=1).draw(s)["lam"]
                             for s in range(4000)], dtype=torch.float64)
        variance = 1 / (4 * (2 * alpha + 1))  # Beta(a, a): mean 1/2, variance 1/(4(2a + 1))
        assert lams.mean().item() == pytest.approx(0.5, abs=0.02)
        assert lams.var().item() == pytest.approx(variance, rel=0.1)


def test_random_choice_picks_by_p_and_applies_the_pick():
    mixup, cutmix = MixUp(num_classes=4, seed=2), CutMix(num_classes=4, seed=2)
    always = RandomChoice([mixup, cutmix], p=[1.0, 0.0])
    assert {always.draw(s, H, W)["choice"] for s in range(50)} == {0}
    mix = RandomChoice([mixup, cutmix], p=[1, 3], seed=9)
    assert mix.p == [0.25, 0.75]
    picks = [mix.draw(s, H, W)["choice"] for s in range(400)]
    assert 60 < picks.count(0) < 140
    for step in range(6):
        chosen = (mixup, cutmix)[picks[step]]
        images, targets = mix(batch(), LABELS, step)
        want_images, want_targets = chosen(batch(), LABELS, step)
        assert torch.equal(images, want_images) and torch.equal(targets, want_targets)
        assert mix.draw(step, H, W) == {"choice": picks[step], **chosen.draw(step, H, W)}


def test_float_images_keep_their_dtype():
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        x = batch(dtype)
        for mix in (MixUp(num_classes=4), CutMix(num_classes=4)):
            images, targets = mix(x, LABELS, 0)
            assert images.dtype == dtype and targets.dtype == torch.float32
        assert torch.equal(x, batch(dtype))


# Prints the draws of steps 0..19 and a digest of the mixed batch, in another process.
DRAWS = """
import hashlib, torch
from tilefeed.augment import CutMix, MixUp, RandomChoice
mix = RandomChoice([MixUp(0.8, num_classes=4, seed=7), CutMix(num_classes=4, seed=7)], seed=7)
x = torch.arange(5 * 12 * 16 * 3, dtype=torch.float32).view(5, 12, 16, 3)
for step in range(20):
    images, targets = mix(x, torch.tensor([0, 3, 1, 3, 2]), step)
    digest = hashlib.sha1(images.numpy().tobytes() + targets.numpy().tobytes()).hexdigest()
    print(mix.draw(step, 12, 16), digest)
"""


def test_same_draws_for_the_same_seed_and_step_in_two_processes():
    runs = [subprocess.run([sys.executable, "-c", DRAWS], capture_output=True, text=True,
                           check=True).stdout.splitlines() for _ in range(2)]
    assert len(runs[0]) == 20 and runs[0] == runs[1]
    assert len(set(runs[0])) == 20  # each step draws differently
    assert len({line.split("}")[0] for line in runs[0]}) == 20
    mix = RandomChoice([MixUp(0.8, num_classes=4, seed=7), CutMix(num_classes=4, seed=7)],
                       seed=7)
    assert runs[0][3].startswith(str(mix.draw(3, 12, 16)))  # and in this process
    other = RandomChoice([MixUp(0.8, num_classes=4, seed=8), CutMix(num_classes=4, seed=8)],
                         seed=8)
    assert [other.draw(s, 12, 16) for s in range(20)] != [mix.draw(s, 12, 16) for s in range(20)]


@pytest.mark.parametrize("make, args, words", [
    (lambda: MixUp(0.0, num_classes=4), (), "alpha must be > 0"),
    (lambda: MixUp(-1.0, num_classes=4), (), "alpha must be > 0"),
    (lambda: CutMix(float("nan"), num_classes=4), (), "alpha must be > 0"),
    (lambda: MixUp(num_classes=0), (), "num_classes"),
    (lambda: MixUp(num_classes=4, label_smoothing=1.0), (), "label_smoothing"),
    (lambda: MixUp(num_classes=4, seed=-1), (), "seed"),
    (lambda: CutMix(num_classes=4, layout="CHW"), (), "layout"),
    (lambda: RandomChoice([MixUp(num_classes=4)], p=[0.5, 0.5]), (), "p must be"),
    (lambda: RandomChoice([]), (), "transforms"),
    (lambda: RandomChoice(MixUp(num_classes=4)), (), "a list of MixUp and CutMix"),
    (lambda: MixUp(num_classes=3), (batch(), LABELS, 0), "labels must be in [0, 3), got 0..3"),
    (lambda: MixUp(num_classes=4), (batch(), LABELS - 1, 0), "got -1..2"),
    (lambda: MixUp(num_classes=4), (batch(), LABELS[:4], 0), "labels must be 5 integers"),
    (lambda: MixUp(num_classes=4), (batch(), LABELS.float(), 0), "labels must be 5 integers"),
    (lambda: MixUp(num_classes=4), (batch()[0], LABELS, 0), "4-dimensional"),
    (lambda: MixUp(num_classes=4), (batch(torch.int32), LABELS, 0), "uint8 or float"),
    (lambda: MixUp(num_classes=4), (batch(), LABELS, -1), "step must be an integer >= 0"),
    (lambda: CutMix(num_classes=4), (batch(layout="NCHW"), LABELS, 0), "pass the Loader's"),
])
def test_bad_arguments_are_one_line_value_errors(make, args, words):
    with pytest.raises(ValueError) as error:
        make()(*args)
    assert words in str(error.value) and "\n" not in str(error.value)


def _gpu_reason():
    return None if torch.cuda.is_available() else \
        f"torch {torch.__version__} has no usable CUDA device"


@pytest.mark.skipif(_gpu_reason() is not None, reason=str(_gpu_reason()))
def test_on_the_gpu_the_same_as_on_the_cpu():
    for mix in (MixUp(num_classes=4, label_smoothing=0.1), CutMix(num_classes=4)):
        for dtype in (torch.uint8, torch.bfloat16):
            x = batch(dtype)
            images, targets = mix(x.cuda(), LABELS.cuda(), 4)
            assert images.is_cuda and targets.is_cuda
            cpu_images, cpu_targets = mix(x, LABELS, 4)
            assert torch.allclose(images.cpu().float(), cpu_images.float(), atol=1)
            assert torch.allclose(targets.cpu(), cpu_targets, atol=1e-6)
        _, targets = mix(batch().cuda(), LABELS, 4)  # labels on the CPU: targets on the GPU
        assert targets.is_cuda
