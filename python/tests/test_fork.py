"""Fork safety: a torch DataLoader whose forked workers each build a Loader after the parent
used one (and still runs it). Every run is its own process, so a crash is counted rather
than taking the test runner down. Registered as its own ctest entry (python;slow)."""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from PIL import Image

import tilefeed

RUNS = 20
SAMPLES = 24

# The program each run executes: the parent's Loader is mid-epoch (its workers decoding
# ahead) when the DataLoader forks its two workers; each worker reads its half of the
# dataset through its own Loader; then the parent's Loader must still deliver its epoch.
PROGRAM = textwrap.dedent("""
    import sys
    import torch
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info
    import tilefeed

    root = sys.argv[1]
    options = dict(batch_size=4, image_size=32, workers=2, epochs=1)
    parent = tilefeed.Loader(root, slice=(0, 1), **options)
    it = iter(parent)
    first = next(it).sample_indices.tolist()

    class PerWorker(IterableDataset):
        def __iter__(self):
            info = get_worker_info()
            loader = tilefeed.Loader(root, slice=(info.id, info.num_workers), **options)
            for batch in loader:
                yield torch.from_numpy(batch.sample_indices.astype("int64"))

    data = DataLoader(PerWorker(), batch_size=None, num_workers=2,
                      multiprocessing_context="fork")
    seen = sorted(torch.cat(list(data)).tolist())
    assert seen == list(range(%d)), seen
    rest = [i for batch in it for i in batch.sample_indices.tolist()]
    assert sorted(first + rest) == list(range(%d)), (first, rest)
    print("ok")
""" % (SAMPLES, SAMPLES))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("fork")
    rng = np.random.default_rng(0)
    for i in range(SAMPLES):
        d = root / f"class{i % 3}"
        d.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(d / f"{i}.jpg")
    return root


def test_forked_dataloader_workers_build_loaders(folder):
    failures = []
    for run in range(RUNS):
        done = subprocess.run([sys.executable, "-c", PROGRAM, str(folder)],
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0 or done.stdout.strip() != "ok":
            failures.append(f"run {run}: exit {done.returncode}: {done.stderr[-600:]}")
    assert not failures, f"{len(failures)} of {RUNS} runs failed:\n" + "\n".join(failures)


def test_inherited_loader_refuses_in_the_child(folder):
    """A Loader made before fork() has no workers in the child: using it there is one
    clear error, not a hang or a crash; the parent's copy keeps working."""
    loader = tilefeed.Loader(folder, batch_size=4, image_size=32, workers=2, slice=(0, 1))
    it = iter(loader)
    next(it)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what using the inherited loader does
        os.close(read)
        signal.alarm(60)  # a child that hangs dies, and the parent reads no message
        try:
            next(it)
            message = "no error"
        except tilefeed.LoaderError as error:
            message = "LoaderError: " + str(error)
        except BaseException as error:  # noqa: BLE001 - reported to the parent
            message = f"{type(error).__name__}: {error}"
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        message = pipe.read()
    os.waitpid(pid, 0)
    assert message.startswith("LoaderError: ") and "fork" in message, message
    assert len([b for b in it]) == SAMPLES // 4 - 1
