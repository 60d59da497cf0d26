"""One definition of each shared option (loader/option_specs.h): tilefeed.Loader's
keywords take their ranges, words and defaults from the table the tools use, and slice= is
the one name of an instance's share of the epoch (no old spellings: the project has no
release)."""

import dataclasses
import importlib.util
import inspect
import math
import os
import re
import numpy as np
import pytest
import subprocess
from PIL import Image

import tilefeed
from tilefeed import _tilefeed

SPECS = _tilefeed._option_specs()
NUMERIC = [name for name, spec in SPECS.items()
           if spec["kind"] in ("integer", "number", "seconds", "size")]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("options")
    rng = np.random.default_rng(11)
    for c in range(2):
        (root / f"c{c}").mkdir()
        for i in range(4):
            pixels = rng.integers(0, 256, (20 + i, 26, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / f"c{c}" / f"{i}.jpg")
    return root


def outside(spec):
    """Values just outside the spec's range, of the keyword's kind."""
    whole = spec["kind"] in ("integer", "size")
    values = [int(spec["min"]) - 1 if whole else spec["min"] - 0.5]
    if math.isfinite(spec["max"]):
        values.append(int(spec["max"]) + 1 if whole else spec["max"] * 2)
    return values


def test_the_table_names_the_shared_keywords():
    # What Python and the tools share, by keyword; a keyword dropped from the table fails here.
    assert {"batch_size", "image_size", "mode", "workers", "prefetch_depth", "seed", "slice",
            "epochs", "split", "cache_limit", "remote_retries", "bad_sample_policy"} <= set(SPECS)
    assert SPECS["image_size"]["range"] == "between 1 and 16384"  # the library's range
    assert SPECS["split"]["choices"] == ["train", "val", "test"]
    assert SPECS["slice"]["flag"] == "--slice"


# The table's Python names that are fields of remote=tilefeed.RemoteOptions(...) and
# jpeg=tilefeed.JpegOptions(...).
REMOTE = {f.name for f in dataclasses.fields(tilefeed.RemoteOptions)}
JPEG = {f.name for f in dataclasses.fields(tilefeed.JpegOptions)}


def test_every_python_name_of_the_table_is_a_keyword_or_a_remote_field():
    params = inspect.signature(tilefeed.Loader).parameters
    assert set(SPECS) <= set(params) | REMOTE | JPEG, set(SPECS) - set(params) - REMOTE - JPEG
    assert REMOTE <= set(SPECS)  # every remote field is the table's
    for name in REMOTE:
        if SPECS[name]["default"]:
            assert str(getattr(tilefeed.RemoteOptions(), name)) == str(
                _size(SPECS[name]["default"]) if SPECS[name]["kind"] == "size"
                else SPECS[name]["default"]), name


def test_the_tools_remote_keys_are_the_remote_fields(tmp_path):
    # The tools' --remote KEY=VALUE group takes each RemoteOptions field under its Python name
    # (with '-' for '_'), with the table's range, default and help, and refuses a value out of
    # range with the table's words, as Python does (tilefeed-pack stands for every tool).
    pack = os.environ.get("TILEFEED_PACK")
    if not pack:
        pytest.skip("TILEFEED_PACK is not set (run through ctest)")
    text = subprocess.run([pack, "--help"], capture_output=True, text=True, check=True).stdout
    keys = {m.group(1): line.strip() for line in text.splitlines()
            for m in [re.match(r"\s+([a-z0-9-]+)(?: \(|:)", line)] if m}
    for name in REMOTE:
        spec, key = SPECS[name], name.replace("_", "-")
        assert key in keys, (key, sorted(keys))
        line = keys[key]
        assert spec["help"] in line and spec["range"] in line, line
        if spec["default"]:
            assert "default " + spec["default"] in line, line
        if spec["kind"] in ("integer", "number", "seconds"):
            for value in outside(spec):
                done = subprocess.run([pack, str(tmp_path), str(tmp_path / "out"), "--remote",
                                       f"{key}={value}"], capture_output=True, text=True)
                assert done.returncode == 2
                assert done.stderr == (f"tilefeed-pack: --remote {key} must be {spec['range']}, "
                                       f"got {value}\n")


def number_text(value):
    """A number as the table's messages write it (RangeProblem): whole numbers without a
    fraction, 2 rather than 2.0."""
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.15g}"


@pytest.mark.parametrize("name", NUMERIC)
def test_out_of_range_messages_are_the_tables(folder, name):
    # Refused once, in C++ (loader::OptionsProblem, RemoteOptionsProblem): the Loader's
    # ValueError is the table's line, as the tools print it for the flag.
    spec = SPECS[name]
    for value in outside(spec):
        with pytest.raises(ValueError) as info:
            options = dict(workers=1, image_size=16, batch_size=2)
            if name in REMOTE:  # a field of remote=tilefeed.RemoteOptions(...)
                options["remote"] = tilefeed.RemoteOptions(**{name: value})
            else:
                options[name] = value
            tilefeed.Loader(folder, **options)
        assert str(info.value) == (f"tilefeed.Loader: {name} must be {spec['range']}, "
                                   f"got {number_text(value)}")


# Every LoaderOptions keyword of the table, straight into the binding: the same line without
# anything in Python in front (a negative count, which no unsigned field holds, included).
CXX_CHECKED = [n for n in NUMERIC if n in tilefeed._D]


@pytest.mark.parametrize("name", CXX_CHECKED)
def test_the_cxx_keyword_checks_use_the_table(name):
    spec = SPECS[name]
    for value in outside(spec):
        with pytest.raises(ValueError) as info:
            _tilefeed._plan_sample({name: value}, 0, 0, 64, 64)
        assert str(info.value) == (f"tilefeed.Loader: {name} must be {spec['range']}, "
                                   f"got {number_text(value)}")


# mean/std: their ranges are C++'s (loader::OptionsProblem); Python only makes 3 floats of
# them. The CPU Loader, device="cuda" (before any GPU is looked for) and the binding itself
# say the same one line.
NORMALISATION = [
    (dict(dtype="float32", std=(0.2, 0.0, 0.2)), "std must be finite and > 0, got (0.2, 0, 0.2)"),
    (dict(dtype="float16", mean=(math.nan, 0.5, 0.0)), "mean must be finite, got (nan, 0.5, 0)"),
    (dict(dtype="uint8", mean=(0.5, 0.5, 0.5)),
     "mean and std must be 0 and 1 for dtype uint8 (ask for a float dtype to normalise), "
     "got (0.5, 0.5, 0.5) and (1, 1, 1)"),
]


@pytest.mark.parametrize("bad, problem", NORMALISATION)
def test_mean_and_std_are_checked_once_in_cxx(folder, bad, problem):
    line = "tilefeed.Loader: " + problem
    devices = ("cpu", "cuda") if importlib.util.find_spec("torch") else ("cpu",)
    for device in devices:
        with pytest.raises(ValueError) as info:
            tilefeed.Loader(folder, device=device, workers=1, image_size=16, batch_size=2, **bad)
        assert str(info.value) == line, device
    with pytest.raises(ValueError) as info:
        _tilefeed._check_options(bad, {})
    assert str(info.value) == line


def test_python_checks_no_range():
    # The one validator is C++'s: the package keeps no range of its own to drift.
    source = inspect.getsource(tilefeed) + inspect.getsource(tilefeed._options)
    for name in ("_NUMERIC", "_numeric", "_from_table", "_range_text", "isfinite"):
        assert name not in source, name


def test_keyword_defaults_are_the_tables():
    params = inspect.signature(tilefeed.Loader).parameters
    for name, spec in SPECS.items():
        if name not in params or not spec["default"]:
            continue
        default = params[name].default
        if spec["kind"] == "size":
            assert default == _size(spec["default"]), name
        else:
            assert str(default) == spec["default"], name


def _size(text):
    units = {"": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
    digits = text.rstrip("KMGTiB")
    return int(digits) * units[text[len(digits):]]


def test_split_choices_are_the_tables(folder):
    with pytest.raises(ValueError) as info:
        tilefeed.Loader(folder, split="validation")
    assert str(info.value) == ("tilefeed.Loader: split='validation'; expected one of " +
                               ", ".join(repr(c) for c in SPECS["split"]["choices"]))


def test_image_sides_take_the_librarys_range(folder):
    with tilefeed.Loader(folder, batch_size=2, image_size=(1, 300), workers=1,
                         epochs=1, slice=(0, 1)) as loader:
        batch = next(iter(loader))
        assert (batch.height, batch.width) == (1, 300)  # below the tools' old 16


# -- slice=, the one name ----------------------------------------------------------------------


def test_the_old_slice_names_are_gone(folder):
    with pytest.raises(TypeError, match="unexpected keyword argument 'shard'"):
        tilefeed.Loader(folder, shard=(1, 2))
    assert not hasattr(tilefeed, "detect_shard")
    assert "detect_slice" in tilefeed.__all__
    assert not hasattr(tilefeed.Loader, "shard")


def test_the_torch_dataset_is_the_loader(folder):
    torch = pytest.importorskip("torch")
    loader = tilefeed.Loader(folder, batch_size=2, image_size=16, workers=1, epochs=1,
                             slice=(0, 2))
    assert isinstance(loader, torch.utils.data.IterableDataset)
    assert sum(len(images) for images, _ in loader) == 4
    assert not hasattr(tilefeed, "IterableDataset")  # one torch dataset


# -- jpeg=: libjpeg-turbo's tuning in one object ----------------------------------------------


def test_jpeg_knobs_are_one_keyword_with_the_cxx_defaults(folder):
    params = inspect.signature(tilefeed.Loader).parameters
    for knob in ("max_pixels", "max_scans", "corrupt_data", "decode_scaling", "fast_dct",
                 "fast_upsample"):
        assert knob not in params, knob
        assert getattr(tilefeed.JpegOptions(), knob) == tilefeed._D[knob], knob
    assert params["jpeg"].default is None
    # The knobs that change pixels say so where they are set.
    for knob in ("corrupt_data", "decode_scaling", "fast_dct", "fast_upsample"):
        line = next(l for l in tilefeed.JpegOptions.__doc__.splitlines() if l.strip().startswith(knob))
        assert "BREAKS THE PIXEL CONTRACT" in line, knob
    jpeg = tilefeed.JpegOptions(fast_dct=True, max_scans=7)
    with tilefeed.Loader(folder, batch_size=2, image_size=16, workers=1, epochs=1,
                         jpeg=jpeg) as loader:
        assert loader.options["fast_dct"] is True and loader.options["max_scans"] == 7
        assert sum(b.size for b in loader) == 8
    assert repr(jpeg) == "tilefeed.JpegOptions(max_scans=7, fast_dct=True)"
    # One setting for DCT scaling: the spellings it replaced are gone, a wrong value is named.
    for retired in ("dct_scales", "eval_dct_scaling"):
        with pytest.raises(TypeError, match=retired):
            tilefeed.JpegOptions(**{retired: True})
    with pytest.raises(ValueError, match='decode_scaling="eighths"; expected one of "exact", "fast"'):
        tilefeed.Loader(folder, image_size=16, jpeg=tilefeed.JpegOptions(decode_scaling="eighths"))
