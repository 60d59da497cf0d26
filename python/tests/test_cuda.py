"""tilefeed.Loader(device="cuda") (python/tilefeed/cuda.py), which drives the C++ DeviceFeed
(tilefeed/cuda/feed.h). The GPU tests skip, with the reason, where torch has no usable CUDA
device; the option checks, the defaults and the one-line errors without CUDA run
everywhere. The feed's protocol itself is tested without a GPU in tests/cuda/feed_test.cc."""

import inspect


import numpy as np
import pytest
import torch
from PIL import Image

import tilefeed
import tilefeed.cuda
from tilefeed import _tilefeed

OPTIONS = dict(batch_size=4, image_size=32, workers=2, seed=3, epochs=1, slice=(0, 1))


def _gpu_reason():
    if not getattr(_tilefeed, "_cuda_built", False):
        return "tilefeed was built without its CUDA component"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} has no usable CUDA device"
    return None


needs_gpu = pytest.mark.skipif(_gpu_reason() is not None, reason=str(_gpu_reason()))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("cuda")
    rng = np.random.default_rng(1)
    for c in range(2):
        (root / f"c{c}").mkdir()
        for i in range(7):
            pixels = rng.integers(0, 256, (40 + 3 * i, 50 + 2 * c, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / f"c{c}" / f"{i}.jpg", quality=90)
    return root


def test_device_cpu_or_none_is_the_cpu_loader(folder):
    for device in (None, "cpu"):
        loader = tilefeed.Loader(folder, device=device, **OPTIONS)
        assert isinstance(loader, tilefeed.Loader)  # not tilefeed.cuda.CudaLoader: the CPU one
        assert len(list(loader)) == 4
        loader.stop()


@pytest.mark.parametrize("bad, error, words", [
    (dict(dtype="int7"), ValueError, "dtype"),
    (dict(mean=(0.5, 0.5)), ValueError, "mean"),
    (dict(std=(0.2, 0.0, 0.2)), ValueError, "std"),
    (dict(std=(0.2, float("nan"), 0.2)), ValueError, "std"),
    (dict(dtype="uint8", mean=(0.5, 0.5, 0.5)), ValueError, "uint8"),
    (dict(layout="chw"), ValueError, "layout"),
    (dict(image_size=(32,)), TypeError, "image_size"),
    (dict(image_size=(32, 16385)), ValueError, "image_size '32x16385'"),
    (dict(image_size=32.0), TypeError, "image_size"),
])
def test_bad_gpu_options_are_one_line_errors(folder, bad, error, words):
    # Checked before CUDA is looked for: the same errors with or without a GPU.
    with pytest.raises(error) as raised:
        tilefeed.Loader(folder, device="cuda", **{**OPTIONS, **bad})
    message = str(raised.value)
    assert words in message and "\n" not in message


def test_gpu_options_mean_what_the_cpu_loaders_mean():
    # One definition (tilefeed's): the constants are the same objects, and dtype, mean, std,
    # layout and image_size parse as on the CPU. Runs without a GPU.
    assert tilefeed.cuda.IMAGENET_MEAN is tilefeed.IMAGENET_MEAN
    assert tilefeed.cuda.IMAGENET_STD is tilefeed.IMAGENET_STD
    check = tilefeed.cuda._check_format
    assert check(torch.bfloat16, None, None, "NCHW") == ("bfloat16", (0.0,) * 3, (1.0,) * 3,
                                                         "nchw")
    assert check(np.float16, 0.5, 0.25, "nhwc") == ("float16", (0.5,) * 3, (0.25,) * 3, "nhwc")
    assert check("float32", tilefeed.IMAGENET_MEAN, tilefeed.IMAGENET_STD, "nchw")[1:3] == (
        tilefeed.IMAGENET_MEAN, tilefeed.IMAGENET_STD)
    geometry = tilefeed.cuda._slot_geometry
    depth = _tilefeed._default_options()["prefetch_depth"]
    assert geometry(dict(batch_size=4, image_size=(24, 40))) == (4, 24, 40, depth)
    assert geometry(dict(batch_size=4, image_size=[40, 24], prefetch_depth=2)) == (4, 40, 24, 2)
    # A schedule: the size of the most pixels (32 x 32 > 24 x 40), which the buffers hold.
    assert geometry(dict(batch_size=4, image_size={0: (24, 40), 2: 32})) == (4, 32, 32, depth)
    assert geometry(dict(image_size=32)) == (
        _tilefeed._default_options()["batch_size"], 32, 32, depth)


@pytest.mark.skipif(_gpu_reason() is None, reason="a usable GPU is here")
def test_without_cuda_device_cuda_is_one_clear_line(folder):
    with pytest.raises(RuntimeError) as raised:
        tilefeed.Loader(folder, device="cuda", **OPTIONS)
    message = str(raised.value)
    assert "CUDA" in message and "\n" not in message


def test_device_cuda_changes_where_batches_land_not_the_defaults():
    # dtype, mean, std and layout default to the CPU Loader's (uint8 NHWC, no normalisation).
    cpu = inspect.signature(tilefeed.Loader.__init__).parameters
    assert tilefeed.cuda._check_format(None, None, None, None) == (
        cpu["dtype"].default, cpu["mean"].default, cpu["std"].default, cpu["layout"].default)
    assert tilefeed.cuda._check_format(None, None, None, None)[::3] == ("uint8", "nhwc")


@pytest.mark.skipif(not getattr(_tilefeed, "_cuda_built", False) or _gpu_reason() is None,
                    reason="needs a tilefeed built with CUDA on a machine without a usable GPU")
def test_the_cpp_feed_without_a_gpu_is_one_clear_line():
    # The binding of DeviceFeed + CudaDevice builds here; making one says what CUDA said.
    with pytest.raises(RuntimeError) as raised:
        _tilefeed._DeviceFeed(2, 1, 4, 8, 8, dict(dtype="uint8", layout="nhwc"))
    message = str(raised.value)
    assert message and "\n" not in message


@pytest.mark.skipif(not getattr(_tilefeed, "_cuda_built", False) or _gpu_reason() is None,
                    reason="needs a tilefeed built with CUDA on a machine without a usable GPU")
def test_pinned_slot_memory_reaches_the_cpp_loader(folder):
    # The Loader hands C++'s PinnedSlotMemory to its C++ loader, whose slots then ask CUDA
    # for page-locked memory: without a GPU that is CUDA's one-line error, not a type error.
    with pytest.raises(RuntimeError, match="cudaHostAlloc") as raised:
        tilefeed.Loader(folder, _slot_memory=_tilefeed._PinnedSlotMemory(), **OPTIONS)
    assert "\n" not in str(raised.value)


def _reference_bits(images_nhwc, dtype, layout, mean, std):
    """output_format.h's formula in numpy float32, as bit patterns."""
    x = images_nhwc.astype(np.float32)
    x = (x / np.float32(255.0) - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    if layout == "nchw":
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    if dtype == "float32":
        return x.view(np.uint32).astype(np.int64)
    if dtype == "float16":
        return x.astype(np.float16).view(np.uint16).astype(np.int64)
    u = x.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.int64)  # bfloat16, ties to even


def _device_bits(tensor):
    t = tensor.cpu()
    if t.dtype == torch.float32:
        return t.view(torch.int32).numpy().view(np.uint32).astype(np.int64)
    return t.view(torch.int16).numpy().view(np.uint16).astype(np.int64)


@needs_gpu
@pytest.mark.parametrize("dtype, layout", [("float32", "nhwc"), ("float16", "nchw"),
                                           ("bfloat16", "nchw")])
def test_gpu_batches_equal_the_host_formula_bit_for_bit(folder, dtype, layout):
    mean, std = tilefeed.cuda.IMAGENET_MEAN, tilefeed.cuda.IMAGENET_STD
    cpu = tilefeed.Loader(folder, **OPTIONS)
    gpu = tilefeed.Loader(folder, device="cuda", dtype=dtype, layout=layout, mean=mean, std=std,
                          **OPTIONS)
    count = 0
    for want, got in zip(cpu, gpu):
        assert got.images.is_cuda and got.labels.is_cuda
        assert np.array_equal(_device_bits(got.images),
                              _reference_bits(want.images, dtype, layout, mean, std))
        assert got.labels.cpu().tolist() == want.labels.tolist()
        count += 1
    assert count == 4
    gpu.stop()


@needs_gpu
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_gpu_rectangular_batches_equal_the_host_formula(folder, layout):
    options = dict(OPTIONS, image_size=(24, 40))  # (height, width)
    mean, std = tilefeed.IMAGENET_MEAN, tilefeed.IMAGENET_STD
    cpu = tilefeed.Loader(folder, **options)
    gpu = tilefeed.Loader(folder, device="cuda", dtype="float32", layout=layout, mean=mean,
                          std=std, **options)
    count = 0
    for want, got in zip(cpu, gpu):
        assert want.images.shape == (4, 24, 40, 3)
        assert tuple(got.images.shape) == ((4, 3, 24, 40) if layout == "nchw" else (4, 24, 40, 3))
        assert np.array_equal(_device_bits(got.images),
                              _reference_bits(want.images, "float32", layout, mean, std))
        count += 1
    assert count == 4
    gpu.stop()


@needs_gpu
def test_gpu_batches_follow_an_image_size_schedule(folder):
    # The device buffers hold the schedule's largest size; each epoch's batches have its own.
    options = dict(OPTIONS, image_size={0: (24, 40), 1: 16, 2: 32}, epochs=3)
    mean, std = tilefeed.IMAGENET_MEAN, tilefeed.IMAGENET_STD
    cpu = tilefeed.Loader(folder, **options)
    gpu = tilefeed.Loader(folder, device="cuda", dtype="float32", layout="nhwc", mean=mean,
                          std=std, **options)
    for shape in ((24, 40), (16, 16), (32, 32)):
        count = 0
        for want, got in zip(cpu, gpu):
            assert tuple(got.images.shape[1:3]) == want.images.shape[1:3] == shape
            assert np.array_equal(_device_bits(got.images),
                                  _reference_bits(want.images, "float32", "nhwc", mean, std))
            count += 1
        assert count == 4
    gpu.stop()


@needs_gpu
def test_gpu_batch_is_ready_on_the_callers_stream(folder):
    side = torch.cuda.Stream()
    cpu = tilefeed.Loader(folder, **OPTIONS)
    with torch.cuda.stream(side):
        gpu = tilefeed.Loader(folder, device="cuda", dtype="uint8", layout="nhwc", **OPTIONS)
        for want, got in zip(cpu, gpu):
            total = got.images.long().sum()  # enqueued on `side`, which waits for the copy
            assert int(total) == int(want.images.astype(np.int64).sum())
    gpu.stop()


def test_a_gpu_batch_is_a_tilefeed_batch():
    """One batch type: the GPU feed's batches are tilefeed.Batch objects that unpack, size and
    release as a CPU batch does (their host side: no GPU needed, CPU tensors stand in)."""
    images = torch.zeros(2, 3, 4, 5, dtype=torch.bfloat16)
    labels = torch.tensor([1, 0])
    batch = tilefeed.Batch._on_device(images, labels, 3, 7, 2, 4, 5, "nchw", "bfloat16", None)
    assert isinstance(batch, tilefeed.Batch)
    x, y = batch
    assert x is images and y is labels and batch.torch() is images
    assert (batch.epoch, batch.index, len(batch), batch.height, batch.width) == (3, 7, 2, 4, 5)
    assert (batch.layout, batch.dtype, batch.device, batch.copy_events) == (
        "nchw", "bfloat16", "cpu", None)
    assert batch.__dlpack_device__() == images.__dlpack_device__()
    with pytest.raises(TypeError, match="sample_indices"):
        batch.sample_indices
    batch.release()
    assert batch.released
    with pytest.raises(ValueError, match="released"):
        batch.images
    with pytest.raises(ValueError, match="released"):
        batch.__dlpack_device__()


def test_the_gpu_loader_answers_with_the_cpu_loaders_methods(folder):
    # Its host side (no GPU needed): a CudaLoader wrapping a CPU Loader is that Loader for
    # everything but iteration.
    gpu = object.__new__(tilefeed.cuda.CudaLoader)
    gpu._loader = cpu = tilefeed.Loader(folder, **OPTIONS)
    gpu.set_epoch(0)
    assert (gpu.epoch, gpu.dataset_size, gpu.classes, len(gpu)) == (
        cpu.epoch, cpu.dataset_size, cpu.classes, len(cpu))
    assert gpu.state_dict() == cpu.state_dict() and gpu.bad_samples() == []
    with pytest.raises(AttributeError):
        gpu._not_an_attribute
    cpu.stop()


def test_a_cpu_batch_says_where_it_is(folder):
    loader = tilefeed.Loader(folder, **OPTIONS)
    batch = next(iter(loader))
    assert batch.device == "cpu" and batch.copy_events is None
    assert batch.__dlpack_device__() == (1, 0)  # kDLCPU
    batch.release()
    with pytest.raises(ValueError, match="released"):
        batch.__dlpack_device__()
    loader.stop()


@needs_gpu
def test_for_x_y_in_a_gpu_loader_with_the_cpu_defaults(folder):
    cpu = tilefeed.Loader(folder, **OPTIONS)
    gpu = tilefeed.Loader(folder, device="cuda", **OPTIONS)  # uint8 NHWC, as on the CPU
    count = 0
    for (want_x, want_y), (x, y) in zip(cpu, gpu):
        assert x.is_cuda and y.is_cuda and y.dtype == torch.int64
        assert x.dtype == torch.uint8 and tuple(x.shape) == (4, 32, 32, 3)
        assert torch.equal(x.cpu(), want_x) and torch.equal(y.cpu(), want_y)
        count += 1
    assert count == 4
    gpu.stop()


@needs_gpu
def test_kept_gpu_batches_stay_valid_past_the_ring(folder):
    # The tensors are copies out of the ring: keeping every batch of three epochs (more than
    # prefetch_depth of them) neither stops the loader nor lets a later batch overwrite one.
    options = dict(OPTIONS, epochs=3, prefetch_depth=2)
    cpu = tilefeed.Loader(folder, **options)
    gpu = tilefeed.Loader(folder, device="cuda", dtype="float32", layout="nchw", **options)
    wanted, kept = [], []
    for _ in range(3):
        wanted += [torch.from_numpy(b.images).permute(0, 3, 1, 2).float() / 255 for b in cpu]
        kept += [b.images for b in gpu]
    assert len(kept) == 12
    for want, got in zip(wanted, kept):
        assert torch.equal(got.cpu(), want)
    gpu.stop()
