"""One dataset, every door, from Python: tilefeed.Loader opens what every tool opens (an
ImageFolder, a train/ + val/ root, record shards of any codec) by the same rules, and a
folder and its packs give byte-identical batches. TILEFEED_PACK (set by ctest) is the
tilefeed-pack binary; every dataset is written here, at run time."""

import os
import subprocess
import warnings

import numpy as np
import pytest
from PIL import Image

import tilefeed
from epochs import one_epoch

PACK = os.environ.get("TILEFEED_PACK")


def write_folder(root, classes=3, per_class=6, seed=0):
    rng = np.random.default_rng(seed)
    for c in range(classes):
        d = root / f"c{c}"
        d.mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (30 + 3 * i, 44 + 2 * c, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(d / f"{i:03d}.JPEG", quality=90)
    return root


def pack(src, out, *extra):
    if not PACK:
        pytest.fail("TILEFEED_PACK is not set: run through ctest (python_test_doors)")
    subprocess.run([PACK, str(src), str(out), "--workers", "2", *extra], check=True,
                   capture_output=True, timeout=120)
    return out


def epoch(data, **kwargs):
    """Every batch of one epoch: (images, labels) concatenated."""
    return one_epoch(data, seed=11, **kwargs)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("doors")
    folder = write_folder(root / "folder")
    return {
        "folder": folder,
        "plain": pack(folder, root / "plain"),
        "indexed": pack(folder, root / "indexed", "--codec", "jpeg-index"),
    }


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_folder_and_its_packs_give_identical_batches(datasets, mode):
    images, labels = epoch(datasets["folder"], mode=mode)
    for kind in ("plain", "indexed"):
        packed_images, packed_labels = epoch(datasets[kind], mode=mode)
        assert np.array_equal(packed_labels, labels), kind
        assert np.array_equal(packed_images, images), kind


def test_shards_are_detected_and_forced_kinds_checked(datasets):
    with tilefeed.Loader(str(datasets["indexed"]), batch_size=4, image_size=24) as loader:
        assert loader.summary.startswith("shards (jpeg-indexed")
        assert loader.dataset_size == 18
        assert loader.classes == ["c0", "c1", "c2"]
    with pytest.raises(tilefeed.SourceError, match="manifest"):
        tilefeed.Loader(str(datasets["folder"]), source="shards")
    with pytest.raises(ValueError, match="source="):
        tilefeed.Loader(str(datasets["folder"]), source="tfrecord")


def test_split_root_is_splits_not_classes(tmp_path):
    write_folder(tmp_path / "train", classes=2, per_class=5)
    write_folder(tmp_path / "val", classes=2, per_class=2, seed=1)
    with tilefeed.Loader(str(tmp_path), batch_size=2, image_size=16) as train:
        assert train.classes == ["c0", "c1"]
        assert train.dataset_size == 10
    with tilefeed.Loader(str(tmp_path), split="val", batch_size=2, image_size=16) as val:
        assert val.dataset_size == 4
    with pytest.raises(ValueError, match="split="):
        tilefeed.Loader(str(tmp_path), split="validation")


def test_missing_split_is_one_clear_error(tmp_path):
    write_folder(tmp_path / "train", classes=2, per_class=2)
    with pytest.raises(tilefeed.SourceError, match="no val/ split"):
        tilefeed.Loader(str(tmp_path), split="val")


# One row per split: Python opens the folder every tool opens for --split (the C++ doors'
# rows are tests/tools/doors_splits_test.sh), because the split goes to loader::OpenDataset
# and nowhere else decides it.

@pytest.fixture(scope="module")
def split_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("splits")
    for split, per_class, seed in (("train", 4, 0), ("val", 3, 1), ("test", 2, 2)):
        write_folder(root / split, classes=2, per_class=per_class, seed=seed)
    return root


@pytest.mark.parametrize("split,samples", [("train", 8), ("val", 6), ("test", 4)])
def test_every_split_opens_its_folder(split_root, split, samples):
    with tilefeed.Loader(str(split_root), split=split, batch_size=2, image_size=16) as loader:
        assert loader.summary.startswith(f"ImageFolder {split_root / split}: {samples} samples")
        assert loader.dataset_size == samples
    if PACK:  # tilefeed-pack --split reads the same folder
        out = subprocess.run([PACK, str(split_root), str(split_root.parent / f"p-{split}"),
                              "--split", split, "--workers", "1"], check=True,
                             capture_output=True, text=True, timeout=120).stdout
        assert f"ImageFolder {split_root / split}: {samples} samples" in out


def test_a_split_the_root_lacks_names_the_root_and_its_splits(tmp_path):
    write_folder(tmp_path / "train", classes=2, per_class=2)
    write_folder(tmp_path / "val", classes=2, per_class=1, seed=1)
    with pytest.raises(tilefeed.SourceError) as info:
        tilefeed.Loader(str(tmp_path), split="test")
    assert str(info.value) == (f"{tmp_path}: no test/ split; it has train/ and val/ (a root "
                               f"with train/, val/ or test/ holds splits, not classes)")


def test_cifar10_held_out_batch_is_both_val_and_test(tmp_path):
    record = 1 + 32 * 32 * 3
    for b in range(1, 6):
        (tmp_path / f"data_batch_{b}.bin").write_bytes(bytes(2 * record))
    (tmp_path / "test_batch.bin").write_bytes(bytes(3 * record))
    for split, samples in (("train", 10), ("val", 3), ("test", 3)):
        with tilefeed.Loader(str(tmp_path), split=split, batch_size=1, image_size=16) as loader:
            assert loader.dataset_size == samples, split


def test_notes_become_warnings(tmp_path):
    write_folder(tmp_path, classes=2, per_class=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = tilefeed.Loader(str(tmp_path), batch_size=2, image_size=16)
    assert [str(w.message) for w in caught] == [f"tilefeed.Loader: {n}" for n in loader.notes]
    loader.stop()


# The README's words on packs (## Datasets), each checked below: "A folder and its packs of
# the files as they are, `--codec jpeg-index`, `coefficients-fast` and `coefficients-small`
# give byte-identical batches" and "`--codec raw` does not: its pixels are resized at pack time, and a file that
# does not decode is left out there".


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """JPEGs (baseline 4:2:0 and 4:4:4, progressive, grayscale), PNGs, and one file that
    does not decode, packed with every codec."""
    root = tmp_path_factory.mktemp("mixed")
    folder = root / "folder"
    rng = np.random.default_rng(5)
    for c in range(2):
        d = folder / f"c{c}"
        d.mkdir(parents=True)
        for i in range(5):
            pixels = rng.integers(0, 256, (40 + 9 * i, 70 - 6 * i, 3), dtype=np.uint8)
            image = Image.fromarray(pixels)
            if i == 4:
                image.save(d / f"{i}.png")
            elif i == 3:
                image.convert("L").save(d / f"{i}.jpg", quality=85)
            else:
                image.save(d / f"{i}.jpg", quality=85, subsampling=i % 3,
                           progressive=i == 2)
    (folder / "c1" / "9_broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a JPEG")
    packs = {kind: pack(folder, root / kind, *extra) for kind, extra in [
        ("plain", ()), ("indexed", ("--codec", "jpeg-index")),
        ("coefficients-fast", ("--codec", "coefficients-fast")),
        ("coefficients-small", ("--codec", "coefficients-small")),
        ("raw", ("--codec", "raw", "--raw-size", "32x32"))]}
    return folder, packs


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_readme_claim_folder_and_file_packs_identical(mixed, mode):
    folder, packs = mixed
    images, labels = epoch(folder, mode=mode)
    for kind in ("plain", "indexed", "coefficients-fast", "coefficients-small"):
        packed_images, packed_labels = epoch(packs[kind], mode=mode)
        assert np.array_equal(packed_labels, labels), kind
        assert np.array_equal(packed_images, images), kind


def test_readme_claim_raw_is_the_exception(mixed):
    folder, packs = mixed
    with tilefeed.Loader(str(folder), batch_size=4, image_size=24) as loader:
        folder_size = loader.dataset_size
    with tilefeed.Loader(str(packs["raw"]), batch_size=4, image_size=24) as loader:
        raw_size = loader.dataset_size
    assert raw_size == folder_size - 1  # the broken file was left out at pack time
    # Pixels resized to 32x32 at pack time, then cropped: not the folder's batches.
    images, _ = epoch(folder, mode="eval")
    raw_images, _ = epoch(packs["raw"], mode="eval")
    assert len(raw_images) == len(images) - 1
    assert not np.array_equal(images[:len(raw_images)], raw_images)
