"""Tests for the tilefeed Python module. Run by ctest (python_test_*), which sets PYTHONPATH
to the build's python/ folder and TILEFEED_CXX_DIGEST to the cxx_digest helper. Every
dataset is written here, at run time."""

import gc
import inspect
import io
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch
import torch.utils.dlpack
from PIL import Image

import tilefeed

CLASSES = 3
PER_CLASS = 7
SAMPLES = CLASSES * PER_CLASS


def write_folder(root, classes=CLASSES, per_class=PER_CLASS, seed=0):
    """An ImageFolder of small noisy JPEGs of varied sizes; sample i has label i // per_class."""
    rng = np.random.default_rng(seed)
    for c in range(classes):
        d = root / f"class{c}"
        d.mkdir(parents=True)
        for i in range(per_class):
            h, w = 30 + 2 * c, 40 + 3 * i
            pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(d / f"{i:03d}.jpg", quality=90)
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = write_folder(tmp_path_factory.mktemp("folder"))
    with tilefeed.Loader(root, batch_size=1, image_size=8, workers=1) as loader:
        FOLDER_DIGEST.append(loader.state_dict()["dataset_digest"])
    return root


FOLDER_DIGEST = []  # the folder fixture's dataset_digest, for state()


@pytest.fixture(scope="module")
def bad_folder(tmp_path_factory):
    root = write_folder(tmp_path_factory.mktemp("bad"))
    (root / "class1" / "zz_bad.jpg").write_bytes(b"this is not a JPEG file")
    return root


def fnv1a64(chunks, h=0xcbf29ce484222325):
    for chunk in chunks:
        for byte in chunk:
            h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def batch_chunks(batch):
    """The byte stream cxx_digest hashes for one batch."""
    yield struct.pack("<QQQ", batch.epoch, batch.index, batch.size)
    yield batch.images.tobytes()
    yield batch.labels_int32.astype("<i4").tobytes()
    yield batch.sample_indices.astype("<u8").tobytes()


def epoch_digest(loader):
    h, count = 0xcbf29ce484222325, 0
    for batch in loader:
        h = fnv1a64(batch_chunks(batch), h)
        count += 1
    return count, f"{h:016x}"


def cxx_digest(data, first_epoch=0, **options):
    tool = os.environ.get("TILEFEED_CXX_DIGEST")
    assert tool and os.path.exists(tool), (
        "TILEFEED_CXX_DIGEST must name the cxx_digest helper (ctest sets it; build the "
        "cxx_digest target)")
    args = [tool, "--data", str(data), "--first-epoch", str(first_epoch)]
    for key, value in options.items():
        args += ["--" + key, str(value)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout.split()
    fields = dict(item.split("=") for item in out)
    return int(fields["batches"]), fields["digest"]


def collect(loader):
    return [(b.images.copy(), b.labels.copy(), b.sample_indices.copy()) for b in loader]


# -- options -------------------------------------------------------------------------------

def test_keyword_defaults_are_the_cxx_defaults():
    defaults = tilefeed._tilefeed._default_options()
    params = inspect.signature(tilefeed.Loader).parameters
    for name, value in defaults.items():
        if name in tilefeed._options._JPEG_FIELDS:  # one keyword, jpeg=JpegOptions(...) (test_options.py)
            assert getattr(tilefeed.JpegOptions(), name) == value, name
            continue
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY
        if name == "slice":  # the launcher's slice by default (test_instances.py)
            assert params[name].default == "auto"
            continue
        if name == "epochs":  # no limit: None in Python (0 is refused), 0 in LoaderOptions
            assert params[name].default is None and value == 0
            continue
        assert params[name].default == value, name
    assert defaults["batch_size"] == 256 and defaults["image_size"] == 224
    assert defaults["mode"] == "train" and defaults["layout"] == "nhwc"


def test_bad_options_raise_value_error(folder):
    with pytest.raises(ValueError, match="mode"):
        tilefeed.Loader(folder, mode="bogus")
    with pytest.raises(ValueError, match="batch_size"):
        tilefeed.Loader(folder, batch_size=0)
    with pytest.raises(ValueError, match="slice"):
        tilefeed.Loader(folder, slice=(2, 2))
    with pytest.raises(ValueError, match="source"):
        tilefeed.Loader(folder, source="tfrecord")
    with pytest.raises(TypeError):
        tilefeed.Loader(folder, batch=8)
    with pytest.raises(TypeError, match="image_size"):
        tilefeed.Loader(folder, image_size=(1, 2, 3))
    with pytest.raises(ValueError, match="image_size 'big': size 'big' is not a whole number"):
        tilefeed.Loader(folder, image_size="big")  # text is the schedule's (docs/options.md)


def test_missing_directory_raises_source_error_with_path(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(tilefeed.SourceError) as info:
        tilefeed.Loader(missing)
    assert isinstance(info.value, OSError)
    assert str(missing) in str(info.value)
    assert info.value.where == str(missing)
    assert info.value.reason


# -- contents --------------------------------------------------------------------------------

def test_epoch_yields_every_sample_once(folder):
    with tilefeed.Loader(folder, batch_size=8, image_size=32, workers=2) as loader:
        assert len(loader) == 3
        assert loader.classes == ["class0", "class1", "class2"]
        assert loader.dataset_size == SAMPLES
        sizes, indices, labels = [], [], []
        for batch in loader:
            assert batch.epoch == 0
            assert batch.images.shape == (batch.size, 32, 32, 3)
            assert batch.images.dtype == np.uint8
            assert batch.labels.dtype == np.int64
            assert batch.sample_indices.dtype == np.uint64
            sizes.append(batch.size)
            indices.extend(batch.sample_indices.tolist())
            labels.extend(batch.labels.tolist())
    assert sizes == [8, 8, 5]
    assert sorted(indices) == list(range(SAMPLES))
    assert labels == [i // PER_CLASS for i in indices]
    assert indices != sorted(indices)  # shuffled


@pytest.mark.parametrize("options", [
    dict(mode="train", layout="nhwc", seed=5),
    dict(mode="train", layout="nchw", seed=11),
    dict(mode="eval", layout="nhwc", seed=0),
])
def test_batches_are_the_cxx_loaders_bytes(folder, options):
    py_options = dict(options)
    loader = tilefeed.Loader(folder, batch_size=8, image_size=32, workers=2, **py_options)
    first = epoch_digest(loader)
    loader.set_epoch(3)
    third = epoch_digest(loader)
    loader.stop()
    cxx = dict(batch=8, size=32, workers=1, **options)
    assert first == cxx_digest(folder, first_epoch=0, **cxx)
    assert third == cxx_digest(folder, first_epoch=3, **cxx)
    assert first != third


def test_worker_count_changes_nothing(folder):
    one = collect(tilefeed.Loader(folder, batch_size=8, image_size=32, workers=1, seed=3))
    two = collect(tilefeed.Loader(folder, batch_size=8, image_size=32, workers=2, seed=3,
                                  prefetch_depth=2))
    assert len(one) == len(two) == 3
    for a, b in zip(one, two):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_auto_workers_and_depth_give_the_same_batches(folder):
    fixed = collect(tilefeed.Loader(folder, batch_size=8, image_size=32, workers=1, seed=3))
    tuned = tilefeed.Loader(folder, batch_size=8, image_size=32, workers="auto",
                            prefetch_depth="auto", cpu_share=0.5, memory_budget="64MiB", seed=3)
    for a, b in zip(fixed, collect(tuned), strict=True):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    assert tuned.metrics()["tuned"] and tuned.metrics()["threads"] >= 1


def test_iterations_walk_the_epochs(folder):
    loader = tilefeed.Loader(folder, batch_size=8, image_size=16, workers=1, epochs=8)
    assert [b.epoch for b in loader] == [0, 0, 0]
    assert [b.epoch for b in loader] == [1, 1, 1]
    loader.set_epoch(5)
    assert [b.epoch for b in loader] == [5, 5, 5]
    for batch in loader:  # leave epoch 6 early: the next iter() starts epoch 7
        assert batch.epoch == 6
        break
    done = iter(loader)
    assert [b.epoch for b in done] == [7, 7, 7]
    assert list(loader) == []  # epochs=8: epochs 0..7 only
    loader.set_epoch(0)
    stale, fresh = iter(loader), iter(loader)
    assert next(done, None) is None  # an ended iterator stays ended
    with pytest.raises(RuntimeError, match="replaced by a newer iter()"):
        next(stale)
    assert next(fresh).epoch == 0
    del fresh
    loader.stop()
    with pytest.raises(ValueError):
        iter(loader)


def test_cifar10(tmp_path):
    rng = np.random.default_rng(1)
    records = {}
    for name, count in [(f"data_batch_{i}.bin", 2) for i in range(1, 6)] + [("test_batch.bin", 6)]:
        labels = rng.integers(0, 10, count, dtype=np.uint8)
        planes = rng.integers(0, 256, (count, 3, 32, 32), dtype=np.uint8)
        blob = b"".join(bytes([l]) + p.tobytes() for l, p in zip(labels, planes))
        (tmp_path / name).write_bytes(blob)
        records[name] = (labels, planes)
    loader = tilefeed.Loader(tmp_path, source="cifar10-test", batch_size=6, image_size=32,
                             mode="eval", eval_resize=32, shuffle=False, workers=1)
    assert len(loader) == 1 and loader.classes[0] == "airplane"
    batch = next(iter(loader))
    labels, planes = records["test_batch.bin"]
    np.testing.assert_array_equal(batch.labels, labels)
    np.testing.assert_array_equal(batch.images, planes.transpose(0, 2, 3, 1))
    train = tilefeed.Loader(tmp_path, source="cifar10-train", batch_size=4, image_size=24,
                            workers=2, seed=9)
    assert epoch_digest(train) == cxx_digest(tmp_path, source="cifar10-train", batch=4,
                                             size=24, seed=9, workers=1)


# -- memory ----------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_numpy_and_torch_views_share_the_slot(folder, layout):
    loader = tilefeed.Loader(folder, batch_size=8, image_size=32, workers=1, layout=layout)
    batch = next(iter(loader))
    images = batch.images
    tensor = batch.torch()
    expected = (8, 32, 32, 3) if layout == "nhwc" else (8, 3, 32, 32)
    assert images.shape == expected and tuple(tensor.shape) == expected
    assert tensor.dtype == torch.uint8
    assert np.shares_memory(images, batch.images)
    assert tensor.data_ptr() == images.ctypes.data
    assert np.shares_memory(batch.labels_int32, batch.labels_int32)
    tensor[0, 0, 0, 0] = 255 - int(tensor[0, 0, 0, 0])
    assert images[0, 0, 0, 0] == int(tensor[0, 0, 0, 0])
    images[1, 1, 1, 1] = 7
    assert int(tensor[1, 1, 1, 1]) == 7
    via_protocol = torch.utils.dlpack.from_dlpack(batch)  # Batch.__dlpack__
    assert via_protocol.data_ptr() == images.ctypes.data
    loader.stop()


def test_views_keep_their_slot_alive(folder):
    loader = tilefeed.Loader(folder, batch_size=4, image_size=32, workers=2, prefetch_depth=2)
    it = iter(loader)
    first = next(it)
    images, tensor, indices = first.images, first.torch(), first.sample_indices
    snapshot, index_snapshot = images.copy(), indices.copy()
    rest = sum(1 for _ in it)  # one of two slots stays held by the views: still progresses
    assert rest == len(loader) - 1
    assert first.released
    with pytest.raises(ValueError, match="released"):
        first.images
    np.testing.assert_array_equal(images, snapshot)
    np.testing.assert_array_equal(tensor.numpy(), snapshot)
    np.testing.assert_array_equal(indices, index_snapshot)
    for _ in loader:  # a whole further epoch: the held slot is never reused
        pass
    loader.stop()
    del loader, it, first
    gc.collect()
    np.testing.assert_array_equal(images, snapshot)  # the views outlive the Loader too
    np.testing.assert_array_equal(tensor.numpy(), snapshot)


def test_depth_one_loop_does_not_stall(folder):
    loader = tilefeed.Loader(folder, batch_size=4, image_size=16, workers=1, prefetch_depth=1)
    assert sum(b.size for b in loader) == SAMPLES
    loader.stop()


def test_kept_copies_do_not_hold_slots(folder):
    views = collect(tilefeed.Loader(folder, batch_size=8, image_size=32, workers=2))
    copies = [batch.images.copy() for batch in tilefeed.Loader(
        folder, batch_size=8, image_size=32, workers=2, prefetch_depth=1)]
    assert len(copies) == len(views)
    for kept, (images, _, _) in zip(copies, views):
        np.testing.assert_array_equal(kept, images)


# -- bad samples -----------------------------------------------------------------------------

def test_fail_policy_raises_loader_error_naming_the_file(bad_folder):
    loader = tilefeed.Loader(bad_folder, batch_size=8, image_size=32, workers=2,
                             bad_sample_policy="fail")
    with pytest.raises(tilefeed.LoaderError) as info:
        for _ in loader:
            pass
    assert isinstance(info.value, RuntimeError)
    assert str(bad_folder / "class1" / "zz_bad.jpg") in str(info.value)
    assert "JPEG" in str(info.value) or "text" in str(info.value)
    loader.stop()


def test_skip_policy_reports_through_the_callback(bad_folder):
    reports = []
    loader = tilefeed.Loader(bad_folder, batch_size=8, image_size=32, workers=2,
                             bad_sample_policy=reports.append)
    sizes, substituted = [], 0
    for batch in loader:
        sizes.append(batch.size)
        substituted += batch.substituted
    loader.stop()  # the loader runs ahead into epoch 1, which may report the file again
    assert sum(sizes) == SAMPLES + 1 and substituted == 1
    bad_path = str(bad_folder / "class1" / "zz_bad.jpg")
    assert [r["where"] for r in reports if r["epoch"] == 0] == [bad_path]
    assert reports[0]["reason"] and reports[0]["epoch"] == 0
    assert loader.bad_samples() == reports
    assert loader.metrics()["bad_samples"] == len(reports)


def test_callback_exception_is_reraised(bad_folder):
    def explode(_):
        raise ZeroDivisionError("from the bad sample callable")
    loader = tilefeed.Loader(bad_folder, batch_size=8, image_size=32, workers=2,
                             bad_sample_policy=explode)
    with pytest.raises(ZeroDivisionError, match="from the bad sample callable"):
        for _ in loader:
            pass
    loader.stop()


# -- threads and signals ---------------------------------------------------------------------

def test_ctrl_c_interrupts_a_blocked_wait(tmp_path):
    # Every file is bad and every report sleeps in Python, so one batch takes 100 x 0.2 s:
    # the consumer is blocked in the C++ Next() while workers take the GIL for callbacks.
    # The third report sends SIGINT, which must end the wait long before the batch could be
    # complete, and stop() must not finish decoding it: both judged by the reports made.
    d = tmp_path / "slow" / "only"
    d.mkdir(parents=True)
    for i in range(100):
        (d / f"{i:03d}.jpg").write_bytes(b"not a jpeg")
    calls = []

    def slow(report):
        calls.append(report)
        if len(calls) == 3:  # the workers have run callbacks while the consumer waits
            os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)

    loader = tilefeed.Loader(tmp_path / "slow", batch_size=100, image_size=16, workers=1,
                             bad_sample_policy=slow)
    with pytest.raises(KeyboardInterrupt):
        for _ in loader:
            pass
    assert len(calls) < 100, "the wait ended only when the batch was complete"
    loader.stop()
    assert len(calls) < 100, "stop() decoded the rest of the batch"


def test_interrupted_request_loses_no_batch(tmp_path):
    # The third batch holds four bad files. The first report blocks until the consumer is
    # inside the C++ wait for that batch, sends SIGINT from there, and goes on blocking until
    # the consumer has the KeyboardInterrupt: the batch is unfinished when the request is
    # interrupted, whatever the load. Then the batch is let finish and is ready in the loader
    # before the next request, which must return it (not skip it).
    root = write_folder(tmp_path / "mixed", classes=1, per_class=8)
    for i in range(4):
        (root / "class0" / f"zz{i}.jpg").write_bytes(b"not a jpeg")
    options = dict(batch_size=4, image_size=16, workers=1, shuffle=False)
    expected = [b.sample_indices.tolist() for b in tilefeed.Loader(root, **options)]
    waiting, interrupted = threading.Event(), threading.Event()
    reports = []

    def report(_):
        reports.append(_)
        if len(reports) == 1:
            assert waiting.wait(120), "the consumer never asked for the third batch"
            os.kill(os.getpid(), signal.SIGINT)
            assert interrupted.wait(120), "SIGINT did not end the consumer's wait"

    loader = tilefeed.Loader(root, bad_sample_policy=report, **options)
    it = iter(loader)
    got = [next(it).sample_indices.tolist(), next(it).sample_indices.tolist()]

    def on_call(frame, event, _):
        # The Python checks of a batch request return; the iterator's C++ __next__ then
        # waits for the batch.
        if event == "return" and frame.f_code.co_name == "_before_next":
            waiting.set()

    sys.setprofile(on_call)
    try:
        with pytest.raises(KeyboardInterrupt):
            next(it)
    finally:
        sys.setprofile(None)
        interrupted.set()
    # Wait for the event itself: all 12 samples (4 substitutes included) are in slots.
    deadline = time.monotonic() + 120
    while loader.metrics()["images"] < 12:
        assert time.monotonic() < deadline, "the third batch was never finished"
        time.sleep(0.01)
    assert loader.state_dict()["position"] == 8
    got.extend(b.sample_indices.tolist() for b in it)
    assert got == expected and len(got) == 3
    loader.stop()


def test_ctrl_c_again_and_again_loses_no_batch(tmp_path):
    # Issue 39 item 8: a Ctrl-C that landed as a batch arrived lost it. A thread sends a real
    # SIGINT each time the loop asks (through a pipe), whenever it gets to run: mostly while
    # the consumer waits in C++ or a batch arrives. The loop catches KeyboardInterrupt and
    # continues the same iterator; every sample of each epoch must arrive exactly once. One
    # signal is in flight at a time: the next is asked for only once the last was caught, and
    # the sender's exit (join) comes after its last kill, so none lands outside the try. The
    # recording of a batch is one C call (list.extend): it ran or it did not.
    root = write_folder(tmp_path / "data", classes=2, per_class=100)
    loader = tilefeed.Loader(root, batch_size=2, image_size=16, workers=1, prefetch_depth=2)
    signals, caught = 30, 0
    request_r, request_w = os.pipe()

    def sender():
        while os.read(request_r, 1) == b"k":
            os.kill(os.getpid(), signal.SIGINT)

    while caught < signals:
        thread = threading.Thread(target=sender)
        thread.start()
        it, seen, requested, quit_sent, finished = iter(loader), [], caught, False, False
        while not finished:
            try:
                for batch in it:
                    seen.extend(batch.sample_indices)
                    if requested == caught < signals:
                        requested += 1
                        os.write(request_w, b"k")
                if not quit_sent:
                    quit_sent = True
                    os.write(request_w, b"q")
                thread.join()  # after the last kill: its KeyboardInterrupt is raised by now
                finished = True
            except KeyboardInterrupt:
                caught += 1
        assert sorted(seen) == list(range(200)), f"{len(seen)} of 200 after {caught} Ctrl-C"
    loader.stop()
    os.close(request_r)
    os.close(request_w)


def test_a_second_consuming_thread_raises(folder):
    # Issue 39 item 8: two threads on one iterator took each other's batches, and at an
    # epoch's end one got the next epoch's first batch, so the next iter() skipped an epoch.
    loader = tilefeed.Loader(folder, batch_size=4, image_size=16, workers=1)
    it = iter(loader)
    seen = next(it).sample_indices.tolist()
    errors = []

    def second():
        for attempt in (lambda: next(it), lambda: iter(loader),
                        lambda: loader.load_state_dict(loader.state_dict())):
            try:
                attempt()
            except RuntimeError as error:
                errors.append(str(error))

    thread = threading.Thread(target=second)
    thread.start()
    thread.join()
    assert errors == ["tilefeed.Loader: a second thread uses this Loader; one thread consumes "
                      "a Loader, the first that asked it for a batch (make a Loader per "
                      "thread, e.g. with slice=(i, n))"] * 3
    seen += [i for batch in it for i in batch.sample_indices.tolist()]
    assert sorted(seen) == list(range(SAMPLES))  # nothing skipped for the first thread
    assert {batch.epoch for batch in loader} == {1}  # the next epoch, none skipped
    loader.stop()


# -- checkpoints -----------------------------------------------------------------------------

RESUME = dict(batch_size=8, image_size=32, seed=4, epochs=2)


def state(epoch, position, seed=RESUME["seed"], size=SAMPLES):
    return {"version": 2, "seed": seed, "epoch": epoch, "position": position,
            "dataset_size": size, "dataset_digest": FOLDER_DIGEST[0]}


def take(batch):
    return (batch.epoch, batch.index, batch.images.copy(), batch.labels.copy(),
            batch.sample_indices.copy())


def assert_same_batches(got, expected):
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a[0] == b[0]  # the epoch (a resumed epoch numbers its batches from 0)
        for x, y in zip(a[2:], b[2:]):
            np.testing.assert_array_equal(x, y)


def run_to_end(loader):
    """Every batch the loader yields from here to its epochs limit, iteration by iteration."""
    got = []
    while loader.epoch < RESUME["epochs"]:
        got.extend(take(b) for b in loader)
    return got


def test_state_dict_follows_the_epochs(folder):
    loader = tilefeed.Loader(folder, workers=2, **RESUME)
    assert loader.state_dict() == state(0, 0)  # before any batch
    it = iter(loader)
    next(it)
    assert loader.state_dict() == state(0, 8)  # mid-epoch
    next(it), next(it)
    assert loader.state_dict() == state(0, SAMPLES)  # the last batch: epoch 0 has no more
    assert list(it) == []
    assert loader.state_dict() == state(1, 0)  # at the epoch end: the next iter() starts 1
    it = iter(loader)
    next(it)
    assert loader.state_dict() == state(1, 8)  # the iterator lives: epoch 1 continues
    del it
    assert loader.state_dict() == state(2, 0)  # left early: the next iter() starts epoch 2
    loader.set_epoch(1)  # restarts epoch 1 from its beginning
    assert loader.state_dict() == state(1, 0)
    loader.set_epoch(0)
    assert loader.state_dict() == state(0, 0)
    assert [b.epoch for b in loader] == [0, 0, 0]
    loader.set_epoch(5)  # past epochs=2: nothing to yield
    assert loader.state_dict() == state(5, 0)
    assert list(loader) == []
    assert loader.state_dict() == state(5, 0)
    loader.stop()
    # Where a run stands is a state, given to load_state_dict(), never options.
    resumed = tilefeed.Loader(folder, workers=1, **dict(RESUME, epochs=None))
    resumed.load_state_dict(state(1, 3))
    assert resumed.state_dict() == state(1, 3)
    resumed.stop()
    for keyword in ("first_epoch", "first_epoch_position", "expected_dataset_size"):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{keyword}'"):
            tilefeed.Loader(folder, **{keyword: 1})


def test_resume_at_any_batch_is_byte_identical(folder):
    loader = tilefeed.Loader(folder, workers=2, **RESUME)
    expected, snapshots = [], [(loader.state_dict(), 0)]  # (state, batches before it)
    while loader.epoch < RESUME["epochs"]:
        for batch in loader:
            expected.append(take(batch))
            snapshots.append((loader.state_dict(), len(expected)))
        snapshots.append((loader.state_dict(), len(expected)))  # after StopIteration
    loader.stop()
    assert len(expected) == 6 and len(snapshots) == 9
    # 0, mid-epoch, the last batch of epoch 0, after its StopIteration, into epoch 1, the end.
    for saved, done in snapshots:
        resumed = tilefeed.Loader(folder, workers=1, prefetch_depth=2, **RESUME)
        resumed.load_state_dict(saved)
        assert resumed.state_dict() == saved
        assert_same_batches(run_to_end(resumed), expected[done:])
        resumed.stop()


def test_load_state_dict_then_set_epoch(folder):
    loader = tilefeed.Loader(folder, workers=1, **RESUME)
    loader.load_state_dict(state(1, 8))
    loader.set_epoch(1)  # the state's epoch: keeps the position (the usual resumed loop)
    assert loader.state_dict() == state(1, 8)
    assert [(b.epoch, b.index, b.size) for b in loader] == [(1, 0, 8), (1, 1, 5)]
    loader.load_state_dict(state(0, 16))
    loader.set_epoch(1)  # another epoch: from its beginning
    assert loader.state_dict() == state(1, 0)
    assert [b.size for b in loader] == [8, 8, 5]
    loader.stop()


def test_load_state_dict_of_another_seed_takes_its_seed(folder):
    other = tilefeed.Loader(folder, workers=1, **dict(RESUME, seed=7))
    other.load_state_dict(state(0, 8, seed=7))
    expected = run_to_end(other)
    other.stop()
    loader = tilefeed.Loader(folder, workers=2, **RESUME)
    next(iter(loader))
    loader.load_state_dict(state(0, 8, seed=7))
    assert loader.options["seed"] == 7 and loader.state_dict() == state(0, 8, seed=7)
    assert_same_batches(run_to_end(loader), expected)
    loader.stop()


def test_views_kept_across_set_epoch_stay_valid(folder):
    loader = tilefeed.Loader(folder, workers=2, prefetch_depth=3, **RESUME)
    batch = next(iter(loader))
    kept, copied = batch.torch(), batch.images.copy()
    loader.set_epoch(1)
    assert [b.epoch for b in loader] == [1, 1, 1]
    np.testing.assert_array_equal(kept.numpy(), copied)
    loader.stop()


def test_state_dict_is_a_picklable_plain_dict(folder):
    loader = tilefeed.Loader(folder, workers=1, **RESUME)
    it = iter(loader)
    next(it)
    saved = loader.state_dict()
    assert type(saved) is dict and all(type(v) is int for v in saved.values())
    assert pickle.loads(pickle.dumps(saved)) == saved == state(0, 8)
    buffer = io.BytesIO()
    torch.save({"loader": saved}, buffer)
    buffer.seek(0)
    restored = torch.load(buffer)["loader"]
    assert restored == saved
    other = tilefeed.Loader(folder, workers=1, **dict(RESUME, seed=99))
    other.load_state_dict(pickle.loads(pickle.dumps(saved)))
    assert other.options["seed"] == RESUME["seed"]  # the state's seed
    assert_same_batches([take(b) for b in other], [take(b) for b in it])
    loader.stop()
    other.stop()


def test_resume_with_another_instance_count(folder):
    # Two instances take two batches of 2 each (global positions 0..7), then three
    # instances split the other 13 samples: 5 each, the last 2 padding.
    options = dict(batch_size=2, image_size=16, seed=7, epochs=1)
    whole = {}
    for batch in tilefeed.Loader(folder, workers=1, **dict(options, batch_size=SAMPLES)):
        whole.update(zip(batch.sample_indices.tolist(), batch.images.copy()))
    delivered, states = [], []
    for index in range(2):
        loader = tilefeed.Loader(folder, workers=1, slice=(index, 2), **options)
        it = iter(loader)
        for _ in range(2):
            delivered.extend(next(it).sample_indices.tolist())
        states.append(loader.state_dict())
        loader.stop()
    assert states[0] == states[1]
    assert states[0]["position"] == 8 and len(set(delivered)) == 8
    remaining, padding = [], []
    for index in range(3):
        loader = tilefeed.Loader(folder, workers=1, slice=(index, 3), **options)
        loader.load_state_dict(states[0])
        local = []
        for batch in loader:
            local.extend(batch.sample_indices.tolist())
            for sample, image in zip(batch.sample_indices.tolist(), batch.images):
                np.testing.assert_array_equal(image, whole[sample])  # same crop and flip
        assert len(local) == 5
        for j, sample in enumerate(local):  # global position 8 + index + 3 j
            (remaining if 8 + index + 3 * j < SAMPLES else padding).append(sample)
        loader.stop()
    assert len(padding) == 2
    assert len(remaining) == len(set(remaining)) == SAMPLES - 8
    assert set(remaining) == set(range(SAMPLES)) - set(delivered)


def test_load_state_dict_rejects_bad_states(folder, tmp_path):
    loader = tilefeed.Loader(folder, workers=1, **RESUME)
    small = tilefeed.Loader(write_folder(tmp_path / "small", per_class=5), workers=1, **RESUME)
    next(iter(small))
    with pytest.raises(ValueError, match="another dataset \\(15 samples"):
        loader.load_state_dict(small.state_dict())
    small.stop()
    with pytest.raises(ValueError, match="version"):
        loader.load_state_dict(dict(state(0, 0), version=1))
    with pytest.raises(ValueError, match=r"position=22 is out of range \[0, 21\]"):
        loader.load_state_dict(state(0, SAMPLES + 1))
    with pytest.raises(ValueError, match="missing"):
        loader.load_state_dict({"version": 2, "epoch": 0})
    with pytest.raises(ValueError, match="out of range"):
        loader.load_state_dict(state(-1, 0))
    with pytest.raises(TypeError, match="position"):
        loader.load_state_dict(state(0, 2.5))
    with pytest.raises(TypeError, match="dict"):
        loader.load_state_dict("tilefeed-loader-state v1 seed=0 epoch=0 position=0 size=21")
    assert loader.state_dict() == state(0, 0)  # nothing changed
    assert [b.size for b in loader] == [8, 8, 5]
    loader.stop()
    with pytest.raises(ValueError, match="stopped"):
        loader.load_state_dict(state(0, 0))


def test_load_state_dict_checks_each_value_and_the_dataset(folder, tmp_path):
    # Issue 39 item 8: epoch 2^64 - 1 was accepted and its next epoch wrapped to 0, and a
    # state of another dataset of the same size (here: the same names, classes and labels,
    # other pixels) was accepted.
    loader = tilefeed.Loader(folder, workers=1, **dict(RESUME, epochs=None))
    for key, value, high in [("epoch", (1 << 64) - 1, (1 << 63) - 1),
                             ("seed", 1 << 64, (1 << 64) - 1),
                             ("dataset_digest", -1, (1 << 64) - 1)]:
        with pytest.raises(ValueError) as error:
            loader.load_state_dict(dict(state(0, 0), **{key: value}))
        assert str(error.value) == (f"tilefeed.Loader.load_state_dict: {key}={value} is out "
                                    f"of range [0, {high}]")
    other = tilefeed.Loader(write_folder(tmp_path / "other", seed=1), workers=1, **RESUME)
    assert other.dataset_size == SAMPLES and other.classes == loader.classes
    with pytest.raises(ValueError, match="^tilefeed.Loader.load_state_dict: the state is for "
                                         "another dataset .*digest [0-9a-f]{16}$"):
        loader.load_state_dict(other.state_dict())
    other.stop()
    assert loader.state_dict() == state(0, 0)  # nothing changed
    loader.stop()
