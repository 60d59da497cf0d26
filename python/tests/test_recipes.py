"""The resolution recipes of examples/train_torch_ddp.py (--recipe low-res, progressive) under
poprun --instances 2 with DDP: a run stopped mid-schedule and resumed yields the batches of the
uninterrupted run (the same samples, sizes and pixels, and the same parameters after every
step); resumed on 1 instance, every sample keeps its size and pixels. And the commands
examples/README.md shows run as written. TILEFEED_POPRUN (set by ctest) is the poprun
binary; without it mpirun is used."""

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from test_ddp import environment, free_port, launcher

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_torch_ddp.py"
CLASSES, TRAIN, VAL = 3, 8, 2  # per class: 24 train samples, 3 steps of 2 x 4 per epoch
EPOCHS = 4
RECIPES = {
    # 32 px for epochs 0-1, then 48 px with the lighter crop for epochs 2-3.
    "low-res": ["--recipe", "low-res", "--image-size", "48", "--start-size", "32",
                "--finetune-epochs", "2"],
    # A ramp 32 -> 64 over epochs 0-3 in steps of 32, evaluated at 96 (FixRes).
    "progressive": ["--recipe", "progressive", "--image-size", "64", "--start-size", "32",
                    "--eval-size", "96"],
}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("recipes")
    rng = np.random.default_rng(2)
    for split, count in (("train", TRAIN), ("val", VAL)):
        for c in range(CLASSES):
            (root / split / f"c{c}").mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (70 + 3 * i, 90 - 2 * i, 3), dtype=np.uint8)
                pixels[:, :, c] //= 4  # something to learn
                Image.fromarray(pixels).save(root / split / f"c{c}" / f"{i}.jpg")
    return root


def train(instances, data, recipe, checkpoint, log, *extra):
    command = launcher(instances) + [
        sys.executable, str(EXAMPLE), str(data), *RECIPES[recipe], "--arch", "tiny",
        "--batch-size", "4", "--workers", "1", "--threads", "1", "--epochs", str(EPOCHS),
        "--checkpoint", str(checkpoint), "--log", str(log), "--port", str(free_port()), *extra]
    log.mkdir(exist_ok=True)
    proc = subprocess.run(command, env=environment(), capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def batches(log):
    """{(world, rank, step): the batch's epoch, size, samples, pixels and the parameters}."""
    found = {}
    for path in sorted(log.glob("rank*.jsonl")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            key = (entry.pop("world"), entry.pop("rank"), entry.pop("step"))
            assert key not in found, f"step {key} logged twice"
            found[key] = entry
    return found


def per_sample(found):
    """{(epoch, sample): (size, pixel digest)} of every batch row."""
    rows = {}
    for entry in found.values():
        for sample, pixels in zip(entry["samples"], entry["pixels"]):
            row = (entry["size"], pixels)
            assert rows.setdefault((entry["epoch"], sample), row) == row
    return rows


@pytest.fixture(scope="module")
def uninterrupted(data, tmp_path_factory):
    runs = {}
    for recipe in RECIPES:
        work = tmp_path_factory.mktemp(recipe)
        output = train(2, data, recipe, work / "ck.pt", work / "log")
        runs[recipe] = (batches(work / "log"), output)
    return runs


def sizes_by_epoch(found):
    sizes = {}
    for entry in found.values():
        sizes.setdefault(entry["epoch"], set()).add(tuple(entry["size"]))
    return {epoch: sizes[epoch] for epoch in sorted(sizes)}


def test_the_recipes_change_the_size_by_epoch(uninterrupted):
    low, output = uninterrupted["low-res"]
    assert sizes_by_epoch(low) == {0: {(32, 32)}, 1: {(32, 32)}, 2: {(48, 48)}, 3: {(48, 48)}}
    assert sorted(low) == [(2, r, s) for r in (0, 1) for s in range(1, 13)]
    ramp, output = uninterrupted["progressive"]
    sizes = sizes_by_epoch(ramp)
    assert sizes[0] == {(32, 32)} and sizes[3] == {(64, 64)}, sizes
    assert all(len(s) == 1 and next(iter(s))[0] % 32 == 0 for s in sizes.values()), sizes
    # FixRes: evaluated above the last training size, on every val sample once.
    assert re.search(r"eval size 96 top-1 [0-9.]+ \(6 samples\)", output), output


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_resume_mid_schedule_is_the_uninterrupted_run(recipe, data, uninterrupted, tmp_path):
    whole, _ = uninterrupted[recipe]
    checkpoint, log = tmp_path / "ck.pt", tmp_path / "log"
    # Stopped inside epoch 1 (step 5 of 12), then inside epoch 2 (step 8: in low-res the
    # first fine-tuning epoch, in progressive the epoch the ramp raised), then to the end.
    train(2, data, recipe, checkpoint, log, "--steps", "5")
    train(2, data, recipe, checkpoint, log, "--resume", "--steps", "8")
    train(2, data, recipe, checkpoint, log, "--resume")
    resumed = batches(log)
    assert whole[(2, 0, 8)]["size"] != whole[(2, 0, 1)]["size"]  # stopped past a size change
    assert sorted(resumed) == sorted(whole)
    for key in whole:
        assert resumed[key] == whole[key], key  # epoch, size, samples, pixels, parameters


def test_two_instances_resumed_on_one_keep_the_schedule(data, uninterrupted, tmp_path):
    whole, _ = uninterrupted["progressive"]
    checkpoint, log = tmp_path / "ck.pt", tmp_path / "log"
    train(2, data, "progressive", checkpoint, log, "--steps", "8")
    train(1, data, "progressive", checkpoint, log, "--resume")
    resumed = per_sample(batches(log))
    expected = per_sample(whole)
    for key, row in resumed.items():
        assert row == expected[key], key  # the sample's size and pixels in that epoch
    for epoch in range(EPOCHS):
        seen = {sample for e, sample in resumed if e == epoch}
        assert seen == set(range(CLASSES * TRAIN)), epoch


def readme_commands():
    """The fenced shell commands of examples/README.md, continuation lines joined."""
    text = (ROOT / "examples" / "README.md").read_text()
    blocks = re.findall(r"^```(?:sh|bash)\n(.*?)^```", text, flags=re.M | re.S)
    return [line for block in blocks for line in block.replace("\\\n", " ").splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_the_readme_commands_run_as_written(data, tmp_path):
    commands = readme_commands()
    assert len(commands) == 2, commands
    poprun = os.environ.get("TILEFEED_POPRUN")
    if not poprun:
        pytest.skip("the commands name poprun: TILEFEED_POPRUN (set by ctest) is not set")
    env = dict(environment(), MASTER_PORT=str(free_port()),
               PATH=os.path.dirname(poprun) + os.pathsep + os.environ.get("PATH", ""))
    for command in commands:
        words = [str(data) if w == "DIR" else w for w in shlex.split(command)]
        proc = subprocess.run(words, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=800)
        assert proc.returncode == 0, command + "\n" + proc.stdout + proc.stderr
        assert re.search(r"eval size \d+ top-1 [0-9.]+ \(6 samples\)", proc.stdout), proc.stdout
