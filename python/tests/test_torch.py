"""tilefeed as PyTorch users write it: DataLoader, IterableDataset with workers, splits,
checkpoints after a break, and normalised float output. Every dataset is made here."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

import tilefeed

SAMPLES = 24


def write_folder(root, samples=SAMPLES, classes=3):
    """An ImageFolder of noisy JPEGs; sample i (in sorted order) has label i // per_class."""
    rng = np.random.default_rng(1)
    per_class = samples // classes
    for i in range(samples):
        d = root / f"class{i // per_class}"
        d.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (36 + i % 5, 44 + i % 7, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(d / f"{i:03d}.jpg", quality=90)
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp("torch"))


OPTIONS = dict(batch_size=4, image_size=32, workers=2, slice=(0, 1), epochs=1)


# -- DataLoader ------------------------------------------------------------------------------

def test_dataloader_takes_a_loader(folder):
    loader = tilefeed.Loader(folder, **OPTIONS)
    assert isinstance(loader, torch.utils.data.IterableDataset)
    data = DataLoader(loader, batch_size=None, num_workers=0)
    assert len(data) == SAMPLES // 4
    seen = [i for batch in data for i in batch.sample_indices.tolist()]
    assert sorted(seen) == list(range(SAMPLES))


@pytest.mark.parametrize("workers", [0, 2])
def test_iterable_dataset_gives_each_batch_once(folder, workers):
    dataset = tilefeed.IterableDataset(folder, with_indices=True, **OPTIONS)
    assert isinstance(dataset, torch.utils.data.IterableDataset)
    data = DataLoader(dataset, batch_size=None, num_workers=workers,
                      multiprocessing_context="fork" if workers else None)
    batches = list(data)
    ids = [i for images, labels, indices in batches for i in indices.tolist()]
    assert sorted(ids) == list(range(SAMPLES)), ids  # every sample once: none twice, none lost
    assert len(batches) == SAMPLES // 4
    for images, labels, indices in batches:
        assert images.dtype == torch.uint8 and images.shape[1:] == (32, 32, 3)
        assert labels.dtype == torch.int64
        assert labels.tolist() == [i // 8 for i in indices.tolist()]


class _WorkerLengths(tilefeed.IterableDataset):
    """Each batch as (the DataLoader worker's id, len(dataset) in that worker)."""

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        length = len(self)
        for _ in super().__iter__():
            yield (info.id if info else -1), length


@pytest.mark.parametrize("samples, workers", [(24, 0), (24, 2), (22, 2)])
def test_iterable_dataset_len_counts_each_workers_batches(tmp_path, samples, workers):
    root = write_folder(tmp_path / "data", samples=samples, classes=2)
    dataset = _WorkerLengths(root, **OPTIONS)
    if workers == 0:  # the main process: its whole slice, as Loader's len()
        assert len(dataset) == len(tilefeed.Loader(root, **OPTIONS)) == -(-samples // 4)
    data = DataLoader(dataset, batch_size=None, num_workers=workers,
                      multiprocessing_context="fork" if workers else None)
    yielded = {}
    lengths = {}
    for worker, length in data:
        yielded[worker] = yielded.get(worker, 0) + 1
        lengths.setdefault(worker, set()).add(int(length))
    assert len(yielded) == max(workers, 1)
    for worker, count in yielded.items():
        assert lengths[worker] == {count}, (worker, lengths, yielded)  # len() = what it yields


def test_iterable_dataset_epochs_follow_set_epoch(folder):
    dataset = tilefeed.IterableDataset(folder, with_indices=True, **dict(OPTIONS, epochs=None))
    orders = []
    for epoch in range(2):
        dataset.set_epoch(epoch)
        orders.append([i for _, _, ind in DataLoader(dataset, batch_size=None, num_workers=2,
                                                     multiprocessing_context="fork")
                       for i in ind.tolist()])
    assert sorted(orders[0]) == sorted(orders[1]) == list(range(SAMPLES))
    assert orders[0] != orders[1]  # another epoch, another shuffle


# -- a batch unpacks as a DataLoader batch does ------------------------------------------------

@pytest.mark.parametrize("dtype,layout", [("uint8", "NHWC"), ("float32", "NCHW")])
def test_for_x_y_in_loader(folder, dtype, layout):
    labels = []
    for x, y in tilefeed.Loader(folder, dtype=dtype, layout=layout, **OPTIONS):
        assert isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
        assert x.dtype == getattr(torch, dtype)
        assert tuple(x.shape) == ((4, 32, 32, 3) if layout == "NHWC" else (4, 3, 32, 32))
        assert y.dtype == torch.int64 and tuple(y.shape) == (4,)
        labels += y.tolist()
    assert sorted(labels) == [i // 8 for i in range(SAMPLES)]


def test_unpacking_is_the_batchs_zero_copy_view(folder):
    for batch in tilefeed.Loader(folder, **OPTIONS):
        images, labels = batch
        view = batch.torch()
        assert images.data_ptr() == view.data_ptr()  # the slot itself, as batch.torch()
        assert torch.equal(images, view)
        assert labels.tolist() == batch.labels.tolist()


def test_for_x_y_in_dataloader_of_a_loader(folder):
    labels = []
    for x, y in DataLoader(tilefeed.Loader(folder, **OPTIONS), batch_size=None):
        assert isinstance(x, torch.Tensor) and tuple(x.shape) == (4, 32, 32, 3)
        assert y.dtype == torch.int64
        labels += y.tolist()
    assert sorted(labels) == [i // 8 for i in range(SAMPLES)]


def test_without_torch_a_batch_unpacks_to_numpy(folder):
    program = (
        "import sys; sys.modules['torch'] = None  # import torch raises ImportError\n"
        "import numpy, tilefeed\n"
        f"for x, y in tilefeed.Loader({str(folder)!r}, batch_size=4, image_size=32, epochs=1):\n"
        "    assert type(x) is numpy.ndarray and x.shape == (4, 32, 32, 3), x\n"
        "    assert y.dtype == numpy.int64 and y.shape == (4,), y\n"
        "print('numpy')\n")
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout == "numpy\n", out.stderr


# -- splits ----------------------------------------------------------------------------------

def test_split_on_a_folder_without_splits_is_an_error(folder):
    for split in ("val", "test"):
        with pytest.raises(tilefeed.SourceError, match=f"no {split}/ split.*without splits"):
            tilefeed.Loader(folder, split=split, **OPTIONS)
    assert tilefeed.Loader(folder, **OPTIONS).dataset_size == SAMPLES  # the default opens it


def test_test_split_needs_a_test_directory(tmp_path):
    write_folder(tmp_path / "train")
    write_folder(tmp_path / "val", samples=12)
    with pytest.raises(tilefeed.SourceError, match="no test/ split; it has train/ and val/"):
        tilefeed.Loader(tmp_path, split="test", **OPTIONS)
    assert tilefeed.Loader(tmp_path, split="val", **OPTIONS).dataset_size == 12
    write_folder(tmp_path / "test", samples=6)
    assert tilefeed.Loader(tmp_path, split="test", **OPTIONS).dataset_size == 6


# -- checkpoints -----------------------------------------------------------------------------

def test_state_dict_after_break_resumes_at_the_next_iteration(folder):
    options = dict(OPTIONS, epochs=None, seed=3)
    loader = tilefeed.Loader(folder, **options)
    for batch in loader:
        break
    saved = loader.state_dict()
    expected = [b.sample_indices.tolist() for b in loader]  # what the next iteration yields
    resumed = tilefeed.Loader(folder, **options)
    resumed.load_state_dict(saved)
    assert [b.sample_indices.tolist() for b in resumed] == expected
    assert saved["epoch"] == 1 and saved["position"] == 0


# -- normalised float output -----------------------------------------------------------------

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def ulps(a, b):
    """Elementwise distance in units in the last place of a's floating dtype."""
    bits = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}
    ia = a.contiguous().view(bits[a.dtype]).to(torch.int64)
    ib = b.contiguous().view(bits[b.dtype]).to(torch.int64)
    # Map sign-magnitude to a monotonic integer line.
    width = 32 if a.dtype == torch.float32 else 16
    top = 1 << (width - 1)
    ia = torch.where(ia < 0, -(ia + top), ia)
    ib = torch.where(ib < 0, -(ib + top), ib)
    return (ia - ib).abs()


MAX_ULPS = {}


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, "float32"])
def test_normalised_output_is_the_torch_conversion(folder, dtype, layout):
    common = dict(OPTIONS, seed=5, copy=True)
    reference = [b.torch() for b in tilefeed.Loader(folder, **common)]
    loader = tilefeed.Loader(folder, dtype=dtype, mean=MEAN, std=STD, layout=layout, **common)
    torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    mean, std = torch.tensor(MEAN), torch.tensor(STD)
    batches = list(loader)
    assert len(batches) == len(reference)
    worst = 0
    for batch, x in zip(batches, reference):
        expected = x.float().div(255).sub(mean).div(std).to(torch_dtype)  # N x H x W x C
        if layout == "NCHW":
            expected = expected.permute(0, 3, 1, 2)
        got = batch.torch()
        assert got.dtype == torch_dtype and batch.dtype == str(torch_dtype)[6:]
        assert got.shape == expected.shape
        worst = max(worst, int(ulps(got, expected).max()))
    MAX_ULPS[(str(torch_dtype), layout)] = worst
    print(f"max ulp {torch_dtype} {layout}: {worst}")
    assert worst <= 1


def test_numpy_view_of_float_output(folder):
    batch = next(iter(tilefeed.Loader(folder, dtype="float16", layout="nchw", **OPTIONS)))
    assert batch.images.dtype == np.float16 and batch.images.shape == (4, 3, 32, 32)
    assert np.array_equal(batch.images, batch.torch().numpy())
    bf16 = next(iter(tilefeed.Loader(folder, dtype="bfloat16", **OPTIONS)))
    with pytest.raises(TypeError, match="bfloat16"):
        bf16.images


def test_output_options_are_checked(folder):
    with pytest.raises(ValueError, match="dtype"):
        tilefeed.Loader(folder, dtype="int8", **OPTIONS)
    with pytest.raises(ValueError, match="std"):
        tilefeed.Loader(folder, dtype="float32", std=(1, 0, 1), **OPTIONS)
    with pytest.raises(ValueError, match="mean"):
        tilefeed.Loader(folder, mean=MEAN, **OPTIONS)  # uint8 output is not normalised
    with pytest.raises(ValueError, match="layout"):
        tilefeed.Loader(folder, layout="CHW", **OPTIONS)


# -- documentation ---------------------------------------------------------------------------

def test_every_public_name_has_help_text():
    import dataclasses
    import inspect
    missing = []
    for name in tilefeed.__all__:
        obj = getattr(tilefeed, name)
        if isinstance(obj, tuple):  # SOURCES, IMAGENET_MEAN/STD: data, documented in the module
            continue
        if not (obj.__doc__ or "").strip():
            missing.append(name)
        if inspect.isclass(obj):
            # A dataclass's fields (JpegOptions, RemoteOptions) are documented in its docstring.
            fields = {f.name for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) \
                else set()
            for attribute, value in vars(obj).items():
                if attribute in fields:
                    assert f"    {attribute} " in obj.__doc__, f"{name}.{attribute}"
                    continue
                if not attribute.startswith("_") and not (value.__doc__ or "").strip():
                    missing.append(f"{name}.{attribute}")
    assert not missing
    assert tilefeed.__version__.count(".") == 2


# -- sources defined in Python ---------------------------------------------------------------

def test_list_of_paths_and_bytes(folder):
    files = sorted(folder.rglob("*.jpg"))
    samples = [(path if i % 2 else path.read_bytes(), i % 5) for i, path in enumerate(files)]
    loader = tilefeed.Loader(samples, **dict(OPTIONS, seed=2))
    assert loader.dataset_size == len(files) and loader.classes == ["0", "1", "2", "3", "4"]
    got = {}
    for batch in loader:
        for index, label in zip(batch.sample_indices.tolist(), batch.labels.tolist()):
            got[index] = label
    assert got == {i: i % 5 for i in range(len(files))}
    # The same files through the folder give the same pixels (same seed, same order).
    by_folder = [b.images.copy() for b in tilefeed.Loader(folder, **dict(OPTIONS, seed=2))]
    by_list = [b.images.copy() for b in tilefeed.Loader(samples, **dict(OPTIONS, seed=2))]
    assert all(np.array_equal(a, b) for a, b in zip(by_folder, by_list))


def test_csv_with_class_names_and_relative_paths(folder, tmp_path):
    files = sorted(folder.rglob("*.jpg"))
    csv = tmp_path / "train.csv"
    lines = ["path,label"] + [f"{os.path.relpath(p, tmp_path)},{p.parent.name}" for p in files]
    csv.write_text("\n".join(lines) + "\n")
    loader = tilefeed.Loader(csv, **OPTIONS)
    assert loader.classes == ["class0", "class1", "class2"]
    labels = {i: l for b in loader for i, l in zip(b.sample_indices.tolist(), b.labels.tolist())}
    assert labels == {i: i // 8 for i in range(SAMPLES)}


def test_bad_list_entries_are_one_clear_error(tmp_path):
    with pytest.raises(TypeError, match=r"data\[1\]"):
        tilefeed.Loader([(b"x", 0), ("a.jpg",)], **OPTIONS)
    with pytest.raises(ValueError, match="label"):
        tilefeed.Loader([(b"x", -1)], **OPTIONS)
    with pytest.raises(ValueError, match="empty"):
        tilefeed.Loader([], **OPTIONS)
    missing = tilefeed.Loader([(tmp_path / "gone.jpg", 0)] * 4, bad_sample_policy="fail",
                              **OPTIONS)
    with pytest.raises(tilefeed.LoaderError, match="gone.jpg"):
        next(iter(missing))


def test_more_workers_than_usable_cores_is_one_warning(folder):
    """Under mpirun --bind-to core a process may run on fewer cores than workers asks: one
    warning says so; workers=0 means one thread per usable core (no warning)."""
    import subprocess
    import sys
    program = (
        "import os, sys, warnings\n"
        "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "import tilefeed\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    for workers in (3, 3, 0):\n"
        "        loader = tilefeed.Loader(sys.argv[1], workers=workers, batch_size=4,\n"
        "                                 image_size=32, slice=(0, 1), epochs=1)\n"
        "        assert sum(b.size for b in loader) == %d\n"
        "print(len(caught)); print(caught[0].message if caught else '')\n" % SAMPLES)
    out = subprocess.run([sys.executable, "-c", program, str(folder)], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    assert out[0] == "1" and "workers=3" in out[1] and "1 core" in out[1], out


# -- rectangular output ----------------------------------------------------------------------

def test_rectangular_image_size(folder):
    common = dict(OPTIONS, seed=4, copy=True)
    del common["image_size"]
    for mode in ("train", "eval"):
        extra = dict(mode=mode, eval_resize=48) if mode == "eval" else {}
        batch = next(iter(tilefeed.Loader(folder, image_size=(24, 40), **common, **extra)))
        assert batch.images.shape == (4, 24, 40, 3) and (batch.height, batch.width) == (24, 40)
        chw = next(iter(tilefeed.Loader(folder, image_size=(24, 40), dtype="float32",
                                        layout="NCHW", **common, **extra)))
        assert chw.torch().shape == (4, 3, 24, 40)
        expected = (batch.torch().float().div(255).sub(torch.tensor(0.5)).div(0.25)
                    .permute(0, 3, 1, 2))
        assert torch.equal(
            next(iter(tilefeed.Loader(folder, image_size=(24, 40), dtype="float32",
                                      layout="NCHW", mean=0.5, std=0.25, **common,
                                      **extra))).torch(), expected)
    square = [b.images for b in tilefeed.Loader(folder, image_size=(32, 32), **common)]
    assert all(np.array_equal(a, b.images) for a, b in
               zip(square, tilefeed.Loader(folder, image_size=32, **common)))
    with pytest.raises(ValueError, match="image_width must be between 1 and 16384, got 16385"):
        tilefeed.Loader(folder, image_size=(24, 16385), **common)
