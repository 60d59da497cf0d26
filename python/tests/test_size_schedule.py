"""image_size= as a per-epoch schedule (docs/options.md, "Image size"): every form gives each
epoch's size to every batch of that epoch, the text is the one C++ writes, bad schedules are
refused with one line, and a resume inside a ramp (or with another instance count) gives the
same samples, sizes and pixels as an uninterrupted run. Every dataset is written here."""

import re

import numpy as np
import pytest
import torch
from PIL import Image

import tilefeed

SAMPLES = 18
COMMON = dict(batch_size=4, seed=3, workers=1, prefetch_depth=3)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("sizes")
    rng = np.random.default_rng(1)
    for c in range(2):
        (root / f"c{c}").mkdir()
        for i in range(SAMPLES // 2):
            pixels = rng.integers(0, 256, (50 + 3 * i, 60 + c, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / f"c{c}" / f"{i}.jpg", quality=90)
    return root


def sizes_by_epoch(loader, epochs):
    seen = []
    for _ in range(epochs):
        shapes = set()
        for batch in loader:
            assert batch.images.shape[1:] == (batch.height, batch.width, 3)
            assert tuple(batch.torch().shape[1:3]) == (batch.height, batch.width)
            shapes.add((batch.height, batch.width))
        assert len(shapes) == 1  # one size per epoch
        seen.append(shapes.pop())
    return seen


@pytest.mark.parametrize("image_size, text, sizes", [
    (24, "24", [24, 24, 24, 24]),
    ((16, 24), "'16x24'", [(16, 24)] * 4),
    ({0: 16, 2: 32}, "'16,2:32'", [16, 16, 32, 32]),
    ({0: 16, 1: (16, 24), 3: 32}, "'16,1:16x24,3:32'", [16, (16, 24), (16, 24), 32]),
    # FFCV's rounding: 16 + 32/3 = 26.7 -> 32 (a multiple of 16), 37.3 -> 32, then 48.
    (tilefeed.Ramp(16, 48, 0, 3, step=16), "'ramp:16,48,0,3,16'", [16, 32, 32, 48]),
    ("ramp:16,48,0,3", "'ramp:16,48,0,3,32'", [16, 32, 32, 48]),
    (lambda epoch: 16 + 8 * epoch, "'16,1:24,2:32,3:40'", [16, 24, 32, 40]),
])
def test_each_form_gives_every_batch_its_epochs_size(folder, image_size, text, sizes):
    loader = tilefeed.Loader(folder, image_size=image_size, epochs=4, **COMMON)
    assert f"image_size={text}," in repr(loader)
    want = [s if isinstance(s, tuple) else (s, s) for s in sizes]
    assert sizes_by_epoch(loader, 4) == want
    loader.stop()


def test_converted_output_follows_the_schedule(folder):
    loader = tilefeed.Loader(folder, image_size={0: 16, 1: 24}, epochs=2, dtype="float32",
                             layout="NCHW", mean=0.5, std=0.25, **COMMON)
    for epoch, side in enumerate((16, 24)):
        for batch in loader:
            assert tuple(batch.torch().shape) == (batch.size, 3, side, side)
            assert batch.torch().dtype == torch.float32
    loader.stop()


def test_ramp_is_its_text():
    assert repr(tilefeed.Ramp(160, 192, 0, 8)) == str(tilefeed.Ramp(160, 192, 0, 8)) == \
        "ramp:160,192,0,8,32"


@pytest.mark.parametrize("image_size, message", [
    ("16,2:32,1:48", "image_size '16,2:32,1:48': epochs must rise (1 after 2)"),
    ("ramp:48,16,0,3", "image_size 'ramp:48,16,0,3': the ramp's start size is above its end"),
    ("ramp:16,48,3,3", "image_size 'ramp:16,48,3,3': the ramp's first epoch must be before"),
    ("ramp:16,48,0,3,64", "image_size 'ramp:16,48,0,3,64': epoch 1 rounds to size 0"),
    ("16,2:0", "image_size '16,2:0': size must be between 1 and 16384, got 0"),
    ("16,2", "image_size '16,2': '2' is not EPOCH:SIZE"),
    ("big", "image_size 'big': size 'big' is not a whole number"),
    ({1: 16}, "image_size={epoch: size} needs epoch 0, got {1: 16}"),
    (lambda epoch: 16, "image_size=callable needs epochs=N"),
])
def test_a_bad_schedule_is_one_line_naming_what_and_why(folder, image_size, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        tilefeed.Loader(folder, image_size=image_size, **COMMON)


def test_eval_mode_takes_one_size(folder):
    with pytest.raises(ValueError, match="image_size must be one size in eval mode, got '16,2:32'"):
        tilefeed.Loader(folder, image_size="16,2:32", mode="eval", eval_resize=40, **COMMON)


def take(batch):
    return (batch.epoch, batch.height, batch.width, batch.images.copy(),
            batch.sample_indices.copy())


def run_to_end(loader, epochs):
    got = []
    while loader.epoch < epochs:
        got.extend(take(b) for b in loader)
    return got


RAMP = dict(COMMON, image_size=tilefeed.Ramp(16, 48, 0, 3, step=16), epochs=4)


def test_resume_inside_a_ramp_is_exact(folder):
    loader = tilefeed.Loader(folder, **RAMP)
    expected, snapshots = [], []
    while loader.epoch < 4:
        for batch in loader:
            expected.append(take(batch))
            snapshots.append((loader.state_dict(), len(expected)))
    loader.stop()
    assert {(e[1], e[2]) for e in expected} == {(16, 16), (32, 32), (48, 48)}
    # Mid-epoch in epoch 1 (32 px), at the end of epoch 2, mid-epoch 3 (48 px).
    for saved, done in (snapshots[6], snapshots[14], snapshots[17]):
        resumed = tilefeed.Loader(folder, **dict(RAMP, workers=2, prefetch_depth=2))
        resumed.load_state_dict(saved)
        got = run_to_end(resumed, 4)
        resumed.stop()
        assert len(got) == len(expected) - done
        for a, b in zip(got, expected[done:]):
            assert a[:3] == b[:3]  # epoch and size
            np.testing.assert_array_equal(a[3], b[3])  # pixels
            np.testing.assert_array_equal(a[4], b[4])  # samples


def test_two_instances_then_one_keep_the_schedule(folder):
    options = dict(RAMP, batch_size=2)
    whole = {}  # (epoch, sample) -> image, from one uninterrupted instance
    loader = tilefeed.Loader(folder, **dict(options, batch_size=SAMPLES))
    while loader.epoch < 4:
        for batch in loader:
            for sample, image in zip(batch.sample_indices.tolist(), batch.images):
                whole[(batch.epoch, sample)] = image.copy()
    loader.stop()
    states = []
    for index in range(2):  # two instances: epoch 0 and two batches of epoch 1
        loader = tilefeed.Loader(folder, slice=(index, 2), **options)
        list(loader)
        it = iter(loader)
        for _ in range(2):
            batch = next(it)
            assert (batch.epoch, batch.height) == (1, 32)
        states.append(loader.state_dict())
        loader.stop()
    assert states[0] == states[1] and states[0]["epoch"] == 1
    one = tilefeed.Loader(folder, **options)
    one.load_state_dict(states[0])
    sides = {}
    while one.epoch < 4:
        for batch in one:
            sides.setdefault(batch.epoch, set()).add((batch.height, batch.width))
            for sample, image in zip(batch.sample_indices.tolist(), batch.images):
                np.testing.assert_array_equal(image, whole[(batch.epoch, sample)])
    one.stop()
    assert sides == {1: {(32, 32)}, 2: {(32, 32)}, 3: {(48, 48)}}
