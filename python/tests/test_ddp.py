"""examples/train_torch_ddp.py end to end: a few steps on 2 instances under poprun (or
mpirun), a checkpoint by rank 0, then the rest of the epoch on 1 instance. The union of the
samples seen is the epoch, each once, and the ranks hold identical parameters after every
step. TILEFEED_POPRUN (set by ctest) is the poprun binary; without it mpirun is used."""

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "train_torch_ddp.py"
CLASSES, PER_CLASS = 3, 10
SAMPLES = CLASSES * PER_CLASS  # 30
BATCH = 4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher(instances):
    poprun = os.environ.get("TILEFEED_POPRUN")
    if poprun:
        return [poprun, "--instances", str(instances), "--"]
    if shutil.which("mpirun") is None:
        pytest.skip("neither TILEFEED_POPRUN nor mpirun")
    return ["mpirun", "-np", str(instances), "--allow-run-as-root", "--oversubscribe"]


def environment():
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OMPI_", "PMI_", "PMIX_", "TILEFEED_INSTANCES"))
            and k not in ("RANK", "WORLD_SIZE", "MASTER_PORT")}


def run(instances, data, checkpoint, log, *extra):
    command = launcher(instances) + [
        sys.executable, str(EXAMPLE), str(data), "--arch", "resnet18", "--image-size", "32",
        "--batch-size", str(BATCH), "--workers", "1", "--threads", "1", "--epochs", "1",
        "--checkpoint", str(checkpoint), "--log", str(log), "--port", str(free_port()), *extra]
    proc = subprocess.run(command, env=environment(), capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def read_log(log):
    steps = {}
    for path in sorted(log.glob("rank*.jsonl")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            steps.setdefault((entry["world"], entry["step"]), []).append(entry)
    return steps


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    rng = np.random.default_rng(1)
    for c in range(CLASSES):
        (root / f"c{c}").mkdir()
        for i in range(PER_CLASS):
            pixels = rng.integers(0, 256, (36 + i, 40, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / f"c{c}" / f"{i}.jpg")
    return root


def test_two_instances_checkpoint_and_resume_on_one(data, tmp_path):
    checkpoint, log = tmp_path / "ck.pt", tmp_path / "log"
    log.mkdir()
    # 3 steps x 4 samples x 2 instances = 24 of the 30 samples; rank 0 checkpoints.
    first = run(2, data, checkpoint, log, "--steps", "3")
    assert "2 instance(s)" in first.stdout
    assert checkpoint.exists()
    # The rest of the epoch on one instance: 6 samples, a batch of 4 and one of 2.
    run(1, data, checkpoint, log, "--resume")
    steps = read_log(log)
    two = [steps[(2, s)] for s in (1, 2, 3)]
    one = [steps[(1, s)] for s in (4, 5)]
    assert sorted(steps) == [(1, 4), (1, 5), (2, 1), (2, 2), (2, 3)]
    for entries in two:
        assert sorted(e["rank"] for e in entries) == [0, 1]
        # DDP: the parameters are identical on every rank after every step.
        assert entries[0]["params"] == entries[1]["params"]
    assert len({e[0]["params"] for e in two + one}) == 5  # and they do change
    seen = [s for entries in two + one for e in entries for s in e["samples"]]
    assert sorted(seen) == list(range(SAMPLES))  # every sample of the epoch, once


def test_resume_without_a_checkpoint_is_an_error(data, tmp_path):
    command = launcher(1) + [sys.executable, str(EXAMPLE), str(data), "--arch", "tiny",
                             "--image-size", "16", "--checkpoint", str(tmp_path / "none.pt"),
                             "--resume", "--port", str(free_port())]
    proc = subprocess.run(command, env=environment(), capture_output=True, text=True,
                          timeout=200)
    assert proc.returncode != 0
    assert "no checkpoint at" in proc.stderr + proc.stdout
