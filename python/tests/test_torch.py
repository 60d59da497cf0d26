"""tilefeed as PyTorch users write it: DataLoader with and without workers, splits,
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


def labelled_by_index(root, samples=SAMPLES):
    """(path, label) pairs whose label is the sample's own number: a label names its sample,
    across DataLoader worker processes too."""
    files = sorted(root.rglob("*.jpg"))[:samples]
    return [(str(path), i) for i, path in enumerate(files)]


def worker_epochs(loader, epochs, workers, persistent, set_epoch=True, context="fork"):
    """The labels of each epoch through DataLoader(loader, num_workers=workers), in order."""
    data = DataLoader(loader, batch_size=None, num_workers=workers,
                      persistent_workers=persistent,
                      multiprocessing_context=context if workers else None)
    out = []
    for epoch in range(epochs):
        if set_epoch:
            loader.set_epoch(epoch)
        labels = []
        for images, batch_labels in data:
            assert images.dtype == torch.uint8 and images.shape[1:] == (32, 32, 3)
            assert batch_labels.dtype == torch.int64
            labels += batch_labels.tolist()
        out.append(labels)
    return out


@pytest.mark.parametrize("workers, context", [(0, None), (2, "fork"), (2, "spawn")])
def test_dataloader_workers_give_each_sample_once(folder, workers, context):
    # spawn: each worker is a fresh interpreter that gets the Loader pickled.
    loader = tilefeed.Loader(labelled_by_index(folder), **OPTIONS)
    (labels,) = worker_epochs(loader, 1, workers, persistent=False, context=context)
    assert sorted(labels) == list(range(SAMPLES)), labels  # none twice, none lost


@pytest.mark.parametrize("persistent", [False, True])
def test_dataloader_workers_follow_set_epoch(folder, persistent):
    # persistent_workers=True used to repeat epoch 0 in every epoch (issue 39, item 5).
    options = dict(OPTIONS, epochs=None)
    loader = tilefeed.Loader(labelled_by_index(folder), **options)
    epochs = worker_epochs(loader, 3, 2, persistent)
    for labels in epochs:
        assert sorted(labels) == list(range(SAMPLES))
    assert len({tuple(labels) for labels in epochs}) == 3, epochs  # three shuffles
    # Each epoch is that epoch of the two workers' slices: the same whether or not the
    # workers persist.
    for epoch, labels in enumerate(epochs):
        expected = []
        for worker in range(2):
            part = tilefeed.Loader(labelled_by_index(folder), **dict(options, slice=(worker, 2)))
            part.set_epoch(epoch)
            expected += [tuple(batch.labels.tolist()) for batch in next(iter([part]))]
            part.stop()
        got = [tuple(labels[i:i + 4]) for i in range(0, SAMPLES, 4)]
        assert sorted(got) == sorted(expected), epoch


def test_persistent_workers_continue_without_set_epoch(folder):
    loader = tilefeed.Loader(labelled_by_index(folder), **dict(OPTIONS, epochs=None))
    epochs = worker_epochs(loader, 2, 2, persistent=True, set_epoch=False)
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(SAMPLES))
    assert epochs[0] != epochs[1]  # the next epoch, not epoch 0 again


def test_new_workers_repeating_an_epoch_warn(folder):
    # Issue 39 item 5: DataLoader's new workers (persistent_workers=False) start epoch 0
    # again unless set_epoch() moved the Loader; that silent repeat warns (worker 0, once).
    script = (
        "import sys, tilefeed, torch\n"
        "from torch.utils.data import DataLoader\n"
        "for persistent, set_epoch in ((False, True), (True, False), (False, False)):\n"
        "    loader = tilefeed.Loader(sys.argv[1], batch_size=4, image_size=16, workers=1,\n"
        "                             slice=(0, 1))\n"
        "    data = DataLoader(loader, batch_size=None, num_workers=2,\n"
        "                      persistent_workers=persistent)\n"
        "    epochs = []\n"
        "    for epoch in range(2):\n"
        "        if set_epoch:\n"
        "            loader.set_epoch(epoch)\n"
        "        epochs.append([i for batch in data for i in batch[1].tolist()])\n"
        "    print(persistent, set_epoch, epochs[0] == epochs[1], flush=True)\n"
        "    print('---', file=sys.stderr, flush=True)\n")
    run = subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n") == ["False True False", "True False False",
                                      "False False True", ""]
    warning = "UserWarning: tilefeed.Loader: this DataLoader epoch repeats the last one"
    parts = run.stderr.split("---\n")
    assert [part.count(warning) for part in parts] == [0, 0, 1, 0], run.stderr


@pytest.mark.parametrize("samples, workers", [(24, 2), (22, 2)])
def test_dataloader_workers_split_the_slice(tmp_path, samples, workers):
    root = write_folder(tmp_path / "data", samples=samples, classes=2)
    loader = tilefeed.Loader(labelled_by_index(root, samples), **OPTIONS)
    (labels,) = worker_epochs(loader, 1, workers, persistent=False)
    # Each worker reads a slice of `workers`: a slice count that does not divide the data
    # pads with repeats, as DistributedSampler does; every sample is there.
    assert set(labels) == set(range(samples))
    assert len(labels) == workers * -(-samples // workers)


def test_a_loader_copied_into_a_plain_child_refuses(folder):
    loader = tilefeed.Loader(folder, **OPTIONS)
    pid = os.fork()
    if pid == 0:
        try:
            iter(loader)
        except tilefeed.LoaderError as error:
            os._exit(0 if "do not survive fork()" in str(error) else 2)
        os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


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
    common = dict(OPTIONS, seed=5)
    reference = [b.torch().clone() for b in tilefeed.Loader(folder, **common)]
    loader = tilefeed.Loader(folder, dtype=dtype, mean=MEAN, std=STD, layout=layout, **common)
    torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    mean, std = torch.tensor(MEAN), torch.tensor(STD)
    batches = [(b.torch().clone(), b.dtype) for b in loader]
    assert len(batches) == len(reference)
    worst = 0
    for (got, dtype_name), x in zip(batches, reference):
        expected = x.float().div(255).sub(mean).div(std).to(torch_dtype)  # N x H x W x C
        if layout == "NCHW":
            expected = expected.permute(0, 3, 1, 2)
        assert got.dtype == torch_dtype and dtype_name == str(torch_dtype)[6:]
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
    common = dict(OPTIONS, seed=4)
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
    square = [b.images.copy() for b in tilefeed.Loader(folder, image_size=(32, 32), **common)]
    assert all(np.array_equal(a, b.images) for a, b in
               zip(square, tilefeed.Loader(folder, image_size=32, **common)))
    with pytest.raises(ValueError, match="image_size '24x16385': size must be between 1 and 16384, got 16385"):
        tilefeed.Loader(folder, image_size=(24, 16385), **common)
