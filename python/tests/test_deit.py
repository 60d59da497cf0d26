"""examples/train_torch_deit.py under poprun (or mpirun) with 2 instances: docs/options.md's
command as written, then a logged run whose ranks must agree on every step's mixing draws
and parameters, with a finite loss, Mixup and CutMix both used (on the GPU too, skipped
with its reason without one)."""

import json
import math
import pathlib
import subprocess
import sys

import pytest
from test_cuda import needs_gpu
from test_ddp import data, environment, free_port, launcher  # noqa: F401 (data: a fixture)

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_torch_deit.py"


def run(command, port):
    proc = subprocess.run(command, env=dict(environment(), MASTER_PORT=str(port)), cwd=ROOT,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_the_documented_command_runs(data):
    lines = [line.strip() for line in (ROOT / "docs" / "options.md").read_text().splitlines()
             if "examples/train_torch_deit.py" in line and line.strip().startswith("poprun")]
    assert len(lines) == 1, lines
    words = lines[0].split()
    assert words[:3] == ["poprun", "--instances", "2"] and words[-1] == "DATA"
    assert lines[0] in EXAMPLE.read_text()  # the example's own usage line
    proc = run(launcher(2) + words[3:-1] + [str(data)], free_port())
    assert "epoch 0 step 1 loss" in proc.stdout
    assert "RandAugment(" in proc.stdout and "RandomErasing(" in proc.stdout


def logged_run(data, log, *extra):
    """The per-rank logs of 3 epochs on the test data: 30 samples, 15 per instance, 5 batches
    of 3 an epoch, so 15 steps on each rank."""
    run(launcher(2) + [sys.executable, str(EXAMPLE), str(data), "--arch", "tiny",
                       "--image-size", "24", "--batch-size", "3", "--workers", "1",
                       "--epochs", "3", "--seed", "1", "--log", str(log), *extra], free_port())
    return [[json.loads(line) for line in (log / f"rank{r}.jsonl").read_text().splitlines()]
            for r in (0, 1)]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_gpu)])
def test_two_instances_agree_on_the_mixing_draws_and_train(data, tmp_path, device):
    ranks = logged_run(data, tmp_path, "--device", device)
    assert [e["step"] for e in ranks[0]] == [e["step"] for e in ranks[1]] == list(range(15))
    for zero, one in zip(*ranks):
        assert zero["draws"] == one["draws"]
        assert zero["params"] == one["params"]  # DDP kept the ranks identical
        assert math.isfinite(zero["loss"]) and math.isfinite(one["loss"])
    assert {e["draws"]["choice"] for e in ranks[0]} == {0, 1}  # Mixup and CutMix
    assert len({e["params"] for e in ranks[0]}) == 15  # it trains: every step moves
    assert len({e["draws"]["lam"] for e in ranks[0]}) == 15
