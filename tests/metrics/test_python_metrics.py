"""Python's Loader.metrics() speaks the schema's names (docs/metrics.md), so one dashboard
reads every tool and Python alike."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import metrics_schema  # noqa: E402
from test_metrics import demo, tool  # noqa: E402,F401  (the fixture)

# The loader's figures under the interval record's names (cumulative in metrics()).
SHARED = ["images", "bad_samples", "read_s", "decode_s", "resize_s", "wait_s",
          "ring_occupancy", "ring_slots", "images_per_s", "elapsed_s", "threads", "tuned"]


def test_loader_metrics_use_the_schema_names(demo):
    tilefeed = pytest.importorskip("tilefeed")
    schema = metrics_schema.load_schema()
    interval = schema["$defs"]["interval"]["properties"]
    loader = tilefeed.Loader(str(demo / "train"), batch_size=8, image_size=32, workers=1)
    for _ in loader:
        pass
    figures = loader.metrics()
    for name in SHARED:
        assert name in interval, name + " is not in the schema"
        assert name in figures, name + " is missing from Loader.metrics()"
        kind = interval[name]["type"]
        assert isinstance(figures[name], {"integer": int, "string": str}.get(kind, (int, float))), name
    # One name per figure: the schema's, plus batches, bytes_read and the slots' size.
    assert sorted(figures) == sorted(SHARED + ["batches", "bytes_read", "slot_bytes"])
    assert figures["images"] > 0 and figures["decode_s"] > 0 and figures["ring_slots"] == 4
    assert figures["threads"] == 1 and figures["tuned"] == ""  # no tuner without auto
