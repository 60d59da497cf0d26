"""tilefeed-report answers "is it the input?" only if its page draws and its verdict is right:
the page (rendered in headless chromium where there is one) and its verdicts on a
deliberately input-bound and a compute-bound training run."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_metrics import TIMEOUT, assert_valid, local_train, run, tool  # noqa: E402


def make_demo(path):
    run([tool("TILEFEED_MAKE_DEMO"), "--classes", "2", "--train-per-class", "64",
         "--val-per-class", "0", "--seed", "7", "--threads", "1", str(path)])


def train(demo, out, us_per_sample, batch, image_size, extra=(), workers="1"):
    run([local_train(), "--data", str(demo), "--core",
         f"synthetic:us-per-sample={us_per_sample}", "--batch-size", str(batch), "--image-size", str(image_size),
         "--workers", workers, "--epochs", "2", "--metrics", f"file={out},interval=0.25",
         *extra])
    assert_valid(out)


def report(files, out):
    return run([sys.executable, tool("TILEFEED_REPORT"), *map(str, files), "-o", str(out),
                "--verdict"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("report")
    make_demo(work / "data")
    # Input-bound: a core that costs 1 us per sample against one decode worker making
    # 128-pixel crops. Compute-bound: 20 ms per sample against 32-pixel crops.
    train(work / "data" / "train", work / "input.jsonl", 1, 16, 128)
    train(work / "data" / "train", work / "compute.jsonl", 20000, 4, 32)
    train(work / "data" / "train", work / "tuned.jsonl", 20000, 4, 32, workers="auto")
    return work


def summary_of(page):
    found = re.search(
        r'<script type="application/json" id="tilefeed-report-summary">(.*?)</script>', page,
        re.S)
    assert found, "no summary in the page"
    return json.loads(found.group(1).replace("<\\/", "</"))


def test_verdicts(runs, tmp_path):
    out = report([runs / "input.jsonl"], tmp_path / "input.html")
    assert "input-bound: the core waited" in out, out
    out = report([runs / "compute.jsonl"], tmp_path / "compute.html")
    assert "compute-bound: stall" in out, out
    assert "tuner" not in out, out
    out = report([runs / "tuned.jsonl"], tmp_path / "tuned.html")
    assert re.search(r"compute-bound: .*; the tuner settled at \d+ threads \(\d+ % of the "
                     r"cores\), depth \d+ \([a-z ]+\)", out), out


def test_each_image_size_phase_gets_its_own_verdict(runs, tmp_path):
    train(runs / "data" / "train", tmp_path / "sizes.jsonl", 1, 16, "32,1:64")
    epochs = [json.loads(line) for line in (tmp_path / "sizes.jsonl").read_text().splitlines()
              if '"record":"epoch"' in line]
    assert [e["image_size"] for e in epochs] == ["32", "64"]
    assert all(e["first_wait_s"] is not None and e["median_wait_s"] is not None for e in epochs)
    out = report([tmp_path / "sizes.jsonl"], tmp_path / "sizes.html")
    assert re.search(r"image size 32, epoch 0: (input|compute)-bound", out), out
    assert re.search(r"image size 64, epoch 1: (input|compute)-bound", out), out
    assert "image size 64, epoch 1" in (tmp_path / "sizes.html").read_text()


def test_page_renders_every_plot_with_data(runs, tmp_path):
    page_path = tmp_path / "both.html"
    report([runs / "input.jsonl", runs / "compute.jsonl"], page_path)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium:
        # The DOM as the browser built it, not just the file we wrote.
        page = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
             page_path.as_uri()], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            timeout=TIMEOUT).stdout
    else:
        page = page_path.read_text()
    summary = summary_of(page)
    assert len(summary["runs"]) == 2  # side by side
    images = dict(re.findall(r'<img id="([\w-]+)"[^>]*src="data:image/png;base64,([^"]+)"',
                             page))
    for run_summary in summary["runs"]:
        assert len(run_summary["plots"]) == 2  # over time, per epoch
        for plot in run_summary["plots"]:
            assert len(images.get(plot["id"], "")) > 1000, "plot %s missing" % plot["id"]
            assert plot["series"], plot
            for name, points in plot["series"].items():
                assert points > 0, "%s: series %s is empty" % (plot["id"], name)


def test_text_report_draws_each_series_and_the_verdict(runs):
    # The text form (the README's picture): verdict first, then per instance a sparkline of
    # images/s, stall % and ready batches, one cell per interval (at most 48).
    out = run([sys.executable, tool("TILEFEED_REPORT"), str(runs / "input.jsonl"),
               str(runs / "compute.jsonl"), "--text"])
    assert "verdict: input-bound: the core waited" in out, out
    assert "verdict: compute-bound: stall" in out, out
    intervals = [sum(1 for line in open(runs / name) if '"interval"' in line)
                 for name in ("input.jsonl", "compute.jsonl")]
    sparks = re.findall(r"^    (images/s|stall %|ready batches) +([\u2581-\u2588]+)  ", out, re.M)
    assert [label for label, _ in sparks] == ["images/s", "stall %", "ready batches"] * 2, out
    for k, (label, cells) in enumerate(sparks):
        assert len(cells) == min(48, intervals[k // 3]), (label, cells)
    # The input-bound run waited >= 5 % on a 0..5 % scale: its stall line is not flat.
    assert set(sparks[1][1]) != {"\u2581"}, out
    # The images/s lines rise above the floor: the loader delivered.
    assert set(sparks[0][1]) != {"\u2581"} and set(sparks[3][1]) != {"\u2581"}, out


def test_bad_input_gets_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"record": "interval"}\n')
    result = subprocess.run([sys.executable, tool("TILEFEED_REPORT"), str(bad), "-o",
                             str(tmp_path / "x.html")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, timeout=TIMEOUT)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "no config record" in result.stderr
