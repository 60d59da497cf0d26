"""Loader(slice="auto") takes its slice from the launcher: OpenMPI as mpirun and poprun set
it (through the C++ detection that `train` uses), torchrun's RANK/WORLD_SIZE, or an
initialised torch.distributed; an explicit slice overrides. Every dataset is written here."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import tilefeed

SAMPLES = 3 * 9

# One rank: prints its slice and the sample indices of epoch 0 as one JSON line.
RANK_SCRIPT = r"""
import json, sys
import tilefeed
extra = json.loads(sys.argv[2])
if extra.pop("init_torch", None):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=extra.pop("init"), rank=extra.pop("rank"),
                            world_size=extra.pop("world"))
loader = tilefeed.Loader(sys.argv[1], batch_size=4, image_size=16, workers=1, seed=5, epochs=1,
                         **extra)
samples = [int(i) for batch in loader for i in batch.sample_indices]
print(json.dumps({"slice": list(loader.slice), "origin": loader.slice_origin,
                  "samples": samples}), flush=True)
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("instances")
    rng = np.random.default_rng(3)
    for c in range(3):
        (root / f"c{c}").mkdir()
        for i in range(9):
            pixels = rng.integers(0, 256, (20 + i, 24, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / f"c{c}" / f"{i}.jpg")
    return root


def clean_environment(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMI_", "PMIX_", "TILEFEED_INSTANCES"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MPI_LOCALRANKID",
                         "MPI_LOCALNRANKS")}
    env.update(extra)
    return env


def results(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def assert_disjoint_cover(runs, count):
    slices = sorted(tuple(r["slice"]) for r in runs)
    assert slices == [(i, count) for i in range(count)]
    seen = [s for r in runs for s in r["samples"]]
    # 27 samples split 2 ways pad to 28: one repeat (padding), nothing missing.
    assert set(seen) == set(range(SAMPLES))
    assert len(seen) - SAMPLES == (-SAMPLES) % count
    for a in runs:
        for b in runs:
            if a is not b:
                overlap = set(a["samples"]) & set(b["samples"])
                assert len(overlap) <= (-SAMPLES) % count, overlap


def run_ranks(folder, environments, extra=None, timeout=120):
    """Starts one rank per environment; returns their JSON lines and stderr."""
    procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, str(folder),
                               json.dumps(extra[i] if extra else {})],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, env in enumerate(environments)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=timeout)
        assert p.returncode == 0, stderr
        out.append((results(stdout)[0], stderr))
    return out


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="OpenMPI's mpirun is not installed")
def test_two_ranks_under_mpirun_read_disjoint_slices_covering_the_epoch(folder, tmp_path):
    # mpirun forwards both ranks' output through one pipe in chunks that can interleave
    # within a line, so each rank's stdout and stderr go to files of their own.
    outputs = tmp_path / "ranks"
    proc = subprocess.run(
        ["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe",
         "--output-filename", str(outputs), sys.executable, "-c", RANK_SCRIPT, str(folder), "{}"],
        env=clean_environment(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rank_dirs = sorted(outputs.glob("*/rank.*"))
    assert len(rank_dirs) == 2, list(outputs.rglob("*"))
    runs = [results((d / "stdout").read_text())[0] for d in rank_dirs]
    assert_disjoint_cover(runs, 2)
    assert all("OMPI_COMM_WORLD" in r["origin"] for r in runs)
    # Each rank says once which instance it is and from what.
    stderr = "".join((d / "stderr").read_text() for d in rank_dirs)
    for index in range(2):
        assert stderr.count(f"tilefeed: instance {index} of 2 (from OMPI_COMM_WORLD") == 1


def test_torchrun_environment_gives_the_slice(folder):
    runs = run_ranks(folder, [clean_environment(RANK=str(r), WORLD_SIZE="2") for r in range(2)])
    assert_disjoint_cover([r for r, _ in runs], 2)
    for (r, stderr) in runs:
        assert r["origin"] == "RANK/WORLD_SIZE (torchrun)"
        assert stderr.count("tilefeed: instance") == 1, stderr


def test_initialised_torch_distributed_gives_the_slice(folder, tmp_path):
    init = f"file://{tmp_path / 'rendezvous'}"
    extra = [{"init_torch": True, "init": init, "rank": r, "world": 2} for r in range(2)]
    runs = run_ranks(folder, [clean_environment(), clean_environment()], extra)
    assert_disjoint_cover([r for r, _ in runs], 2)
    assert all(r["origin"] == "torch.distributed" for r, _ in runs)


def test_explicit_slice_overrides_the_launcher(folder):
    runs = run_ranks(folder, [clean_environment(RANK="1", WORLD_SIZE="2")],
                     [{"slice": [0, 3]}])
    run, stderr = runs[0]
    assert run["slice"] == [0, 3] and run["origin"] == "explicit"
    assert "tilefeed: instance" not in stderr


def test_no_launcher_is_one_instance_and_silent(folder):
    run, stderr = run_ranks(folder, [clean_environment()])[0]
    assert run["slice"] == [0, 1] and run["origin"] == "no launcher"
    assert len(run["samples"]) == SAMPLES
    assert "tilefeed: instance" not in stderr


@pytest.mark.parametrize("environment, message", [
    ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0", "RANK": "1",
      "WORLD_SIZE": "2"}, "says instance 0 of 2 but RANK/WORLD_SIZE"),
    ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "5"}, "OMPI_COMM_WORLD_RANK"),
    ({"TILEFEED_INSTANCES": "2"}, "TILEFEED_INSTANCES=2"),
    ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not an integer"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 is outside WORLD_SIZE=2"),
])
def test_inconsistent_launcher_environment_is_refused(folder, monkeypatch, environment, message):
    for name in list(os.environ):
        if name not in clean_environment():
            monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        tilefeed.Loader(folder, batch_size=4, image_size=16)
