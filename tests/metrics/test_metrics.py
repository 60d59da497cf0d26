"""Every tool's metrics stream validated against docs/metrics-schema.json with a
standard validator (python3-jsonschema's Draft202012Validator), broken records rejected, the schema
against docs/metrics.md, and the Prometheus endpoint during a run.

The tools come from the environment (set by tests/CMakeLists.txt): TILEFEED_TRAIN,
TILEFEED_SERVE, TILEFEED_PACK, TILEFEED_LOADER_BENCH, TILEFEED_STALL_BENCH,
TILEFEED_MAKE_DEMO, TILEFEED_POPRUN. A tool that is not given is skipped."""

import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import metrics_schema  # noqa: E402

SCHEMA = metrics_schema.load_schema()
TIMEOUT = 240  # generous: a loaded 2-core machine


def tool(name):
    path = os.environ.get(name)
    if not path or not os.path.exists(path):
        pytest.skip(name + " not given")
    return path


def local_train():
    """`train` on a local dataset, or a skip where it is known to fail for reasons outside
    the metrics (TILEFEED_LOCAL_TRAIN_BROKEN names them; set in the sanitizer trees)."""
    reason = os.environ.get("TILEFEED_LOCAL_TRAIN_BROKEN")
    if reason:
        pytest.skip(reason)
    return tool("TILEFEED_TRAIN")


def run(args, **kwargs):
    result = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=TIMEOUT, **kwargs)
    assert result.returncode == 0, "%s exited %d:\n%s" % (args[0], result.returncode,
                                                         result.stdout)
    return result.stdout


def assert_valid(path):
    errors = metrics_schema.file_errors(str(path), SCHEMA)
    assert not errors, "\n".join(errors)
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "data"
    run([tool("TILEFEED_MAKE_DEMO"), "--classes", "2", "--train-per-class", "48",
         "--val-per-class", "8", "--seed", "5", "--threads", "1", str(out)])
    return out


# --- the schema itself -------------------------------------------------------------------

def test_doc_tables_match_the_schema():
    assert metrics_schema.doc_tables() == metrics_schema.schema_tables(SCHEMA)


def test_a_missing_or_renamed_field_fails():
    good = {"record": "epoch", "time": 1.0, "instance": 0, "epoch": 0, "steps": 1, "images": 8,
            "seconds": 1.0, "images_per_s": 8.0, "stall_percent": 0.0, "wait_s": 0.0,
            "first_wait_s": 0.0, "median_wait_s": 0.0, "image_size": "224", "read_s": 0.0, "decode_s": 0.0, "resize_s": 0.0, "bad_samples": 0, "loss": None,
            "accuracy": None, "val_accuracy": None}
    assert metrics_schema.record_errors(good, SCHEMA) == []
    missing = dict(good)
    del missing["stall_percent"]
    assert metrics_schema.record_errors(missing, SCHEMA)
    renamed = dict(missing, stall_pct=0.0)
    assert len(metrics_schema.record_errors(renamed, SCHEMA)) == 2
    wrong_type = dict(good, steps=1.5)
    assert metrics_schema.record_errors(wrong_type, SCHEMA)
    not_nullable = dict(good, seconds=None)
    assert metrics_schema.record_errors(not_nullable, SCHEMA)


def test_the_schema_is_a_draft_2020_12_json_schema():
    from jsonschema import Draft202012Validator
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(SCHEMA)


def _good(kind):
    """A valid record of `kind`, from the schema's own field types."""
    sample = {"string": "x", "integer": 1, "number": 1.0, "object": {}}
    record = {}
    for name, spec in SCHEMA["$defs"][kind]["properties"].items():
        types = spec["type"] if isinstance(spec["type"], list) else [spec["type"]]
        record[name] = spec["const"] if "const" in spec else (
            spec["enum"][0] if "enum" in spec else sample[types[0]])
    if kind == "end":
        record["error"] = None
    return record


@pytest.mark.parametrize("broken,why", [
    ({}, "no record kind"), ([], "not an object"), ("config", "a string"), (42, "a number"),
    (None, "null"), ({"record": "config"}, "no other field"),
    ({"record": "progress"}, "an unknown kind"),
    (dict(_good("config"), schema=1), "another schema version"),
    (dict(_good("config"), tool="my_tool"), "a tool the doc does not list"),
    (dict(_good("config"), instances=0), "no instances"),
    (dict(_good("config"), options={"--workers": 4}), "an option value that is not a string"),
    (dict(_good("config"), interval_s=0), "an interval of 0 s"),
    (dict(_good("interval"), images=-1), "a negative count"),
    (dict(_good("interval"), images=1.5), "a fractional count"),
    (dict(_good("interval"), images=True), "a boolean count"),
    (dict(_good("interval"), stall_percent=150.0), "a share above 100 %"),
    (dict(_good("interval"), rss_mb=1.0), "a field the schema does not have"),
    (dict(_good("epoch"), seconds=None), "null where not nullable"),
    (dict(_good("epoch"), accuracy=1.5), "an accuracy above 1"),
    (dict(_good("epoch"), loss="0.3"), "a number as a string"),
    (dict(_good("end"), exit="crashed"), "an exit the doc does not list"),
    (dict(_good("end"), exit="error", error=None), "an error exit without its message"),
    (dict(_good("end"), exit="completed", error="boom"), "a message without an error exit"),
    ({k: v for k, v in _good("end").items() if k != "peak_rss_mib"}, "a missing field"),
])
def test_a_standard_validator_rejects_broken_records(broken, why):
    assert metrics_schema.record_errors(broken, SCHEMA), "accepted " + why


@pytest.mark.parametrize("kind", ["config", "interval", "epoch", "end"])
def test_a_standard_validator_accepts_each_kind(kind):
    assert metrics_schema.record_errors(_good(kind), SCHEMA) == []


# --- every tool --------------------------------------------------------------------------

def test_loader_bench(demo, tmp_path):
    out = tmp_path / "lb.jsonl"
    run([tool("TILEFEED_LOADER_BENCH"), "--data", str(demo), "--batch-size", "8", "--image-size", "32",
         "--workers", "1", "--epochs", "2", "--warmup", "1",
         "--metrics", f"file={out},interval=0.2"])
    records = assert_valid(out)
    assert records[0]["tool"] == "loader_bench"
    assert [r["epoch"] for r in records if r["record"] == "epoch"] == [0, 1]
    end = records[-1]
    assert end["exit"] == "completed" and end["images"] > 0 and end["decode_s"] > 0


def test_train(demo, tmp_path):
    out = tmp_path / "train.jsonl"
    log = run([local_train(), "--data", str(demo), "--core",
               "synthetic:us-per-sample=50", "--batch-size", "8", "--image-size", "32", "--workers",
               "1", "--epochs", "2", "--metrics", f"file={out},interval=0.2"])
    records = assert_valid(out)
    epochs = [r for r in records if r["record"] == "epoch"]
    assert [r["epoch"] for r in epochs] == [0, 1]
    assert all(r["loss"] is not None and r["steps"] == 12 for r in epochs)
    assert records[-1]["steps"] == 24 and records[-1]["images"] == 24 * 8
    # Off a terminal: one plain progress line per interval on stderr.
    assert re.search(r"\[train\] instance 0: .* images/s, stall .* %", log)


def test_train_prints_no_credentials_of_a_url():
    """A URL's user:password and a presigned URL's signature stay out of what train prints
    (here the error of a server that is not there): the URL is named as http://***@host/."""
    url = "http://alice:s3cret@127.0.0.1:9/train-000000.tar?X-Amz-Signature=SIGVALUE"
    result = subprocess.run([tool("TILEFEED_TRAIN"), "--data", url],
                            capture_output=True, text=True, timeout=TIMEOUT)
    printed = result.stdout + result.stderr
    assert result.returncode != 0 and "http://***@127.0.0.1:9/" in printed, printed
    assert "s3cret" not in printed and "SIGVALUE" not in printed, printed


def test_serve_and_train_over_loopback(demo, tmp_path):
    serve_out, train_out = tmp_path / "serve.jsonl", tmp_path / "train.jsonl"
    reader = subprocess.Popen(
        [tool("TILEFEED_SERVE"), "--data", str(demo / "train"), "--bind", "tcp://127.0.0.1:*",
         "--batch-size", "8", "--image-size", "32", "--epochs", "2", "--workers", "1",
         "--prefetch-depth", "2", "--slice", "0/1", "--drop-last",
         "--metrics", f"file={serve_out},interval=0.2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        endpoint = None
        for line in reader.stderr:
            found = re.search(r" on (tcp://127\.0\.0\.1:\d+)", line)
            if found:
                endpoint = found.group(1)
                break
        assert endpoint, "the reader named no endpoint"
        run([local_train(), "--readers", endpoint, "--data", str(demo), "--core", "synthetic:us-per-sample=50", "--batch-size", "8", "--image-size", "32",
             "--epochs", "2", "--metrics", f"file={train_out},interval=0.2"])
        reader.stderr.read()
        assert reader.wait(timeout=TIMEOUT) == 0
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    served = assert_valid(serve_out)
    assert served[0]["tool"] == "tilefeed-serve" and served[-1]["batches"] >= 24
    trained = assert_valid(train_out)
    assert trained[-1]["steps"] == 24


def test_stall_bench(demo, tmp_path):
    out = tmp_path / "sb.jsonl"
    result = subprocess.run(
        [tool("TILEFEED_STALL_BENCH"), "--data", str(demo), "--batch", "4", "--image-size",
         "32", "--steps", "3", "--capacity-steps", "3", "--rounds", "1", "--tune-rounds", "0",
         "--mixed-seconds", "0.5", "--demands", "1.2", "--metrics", f"file={out},interval=0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT)
    assert result.returncode in (0, 3), result.stdout  # 3: an invalid (too short) run
    records = assert_valid(out)
    assert records[-1]["steps"] > 0


def test_pack(demo, tmp_path):
    out = tmp_path / "pack.jsonl"
    run([tool("TILEFEED_PACK"), str(demo / "train"), str(tmp_path / "shards"), "--workers", "1",
         "--metrics", f"file={out},interval=0.2"])
    records = assert_valid(out)
    assert records[0]["tool"] == "tilefeed-pack"
    assert records[-1]["images"] == 96 and records[-1]["bytes_read"] > 0


def test_two_instances_write_one_file_each(demo, tmp_path):
    out = tmp_path / "run.jsonl"
    run([tool("TILEFEED_POPRUN"), "--instances", "2", "--", local_train(), "--data",
         str(demo), "--core", "synthetic:us-per-sample=50", "--batch-size", "4",
         "--image-size", "32", "--workers", "1", "--epochs", "1",
         "--metrics", f"file={out},interval=0.2"])
    for index in (0, 1):
        records = assert_valid(tmp_path / ("run.%d.jsonl" % index))
        assert records[0]["instance"] == index and records[0]["instances"] == 2
        assert all(r["instance"] == index for r in records)
    assert not out.exists()


@pytest.mark.parametrize("name", ["TILEFEED_TRAIN", "TILEFEED_LOADER_BENCH",
                                  "TILEFEED_STALL_BENCH", "TILEFEED_SERVE"])
def test_a_file_that_cannot_be_written_is_one_line(demo, name):
    args = [tool(name), "--data", str(demo / "train"), "--metrics", "file=/nonexistent/m.jsonl"]
    if name == "TILEFEED_TRAIN":
        args += ["--core", "synthetic"]
    result = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            timeout=TIMEOUT)
    assert result.returncode != 0
    lines = [l for l in result.stderr.splitlines() if "/nonexistent/m.jsonl" in l]
    assert len(lines) == 1 and "cannot open the metrics file" in lines[0], result.stderr


# --- Prometheus --------------------------------------------------------------------------

def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        found = re.match(r'^(tilefeed_\w+)\{[^}]*tilefeed_instance="0"[^}]*\} (\S+)$', line)
        if found:
            values[found.group(1)] = float(found.group(2))
    return values


def test_prometheus_counters_move_during_a_run(demo, tmp_path):
    train = subprocess.Popen(
        [local_train(), "--data", str(demo), "--core", "synthetic:us-per-sample=2000", "--batch-size", "4", "--image-size", "32", "--workers", "1", "--epochs",
         "100000", "--seconds", "60", "--metrics",
         "port=127.0.0.1:0,file=%s,interval=0.5" % (tmp_path / "train.jsonl")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in train.stderr:
            found = re.search(r"Prometheus metrics at http://127\.0\.0\.1:(\d+)/metrics", line)
            if found:
                port = int(found.group(1))
                break
        assert port, "train named no Prometheus port"
        first = scrape(port)
        # Counters move: wait (bounded) until the consumer has taken more images.
        deadline = time.monotonic() + 120
        later = scrape(port)
        while later["tilefeed_images_total"] <= first["tilefeed_images_total"]:
            assert time.monotonic() < deadline, "tilefeed_images_total did not move"
            time.sleep(0.2)
            later = scrape(port)
        # A port in use: one clear line and a failing exit status, no crash.
        taken = subprocess.run(
            [tool("TILEFEED_TRAIN"), "--data", str(demo), "--core", "synthetic", "--epochs", "1",
             "--metrics", "port=127.0.0.1:%d" % port], stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, timeout=TIMEOUT)
        assert taken.returncode == 1
        assert "cannot serve Prometheus metrics on 127.0.0.1:%d" % port in taken.stderr
        for name in ("tilefeed_steps_total", "tilefeed_busy_seconds_total",
                     "tilefeed_elapsed_seconds"):
            assert later[name] >= first[name]
        assert later["tilefeed_ring_slots"] == 4 and later["tilefeed_rss_bytes"] > 0
    finally:
        train.terminate()
        train.wait(timeout=TIMEOUT)
