"""One definition of each shared option (tilefeed/loader/option_specs.h): tilefeed.Loader's
keywords take their ranges, words and defaults from the table the tools use, and slice= is
the one name of an instance's share of the epoch (no old spellings: the project has no
release)."""

import inspect
import math
import numpy as np
import pytest
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
            "epochs", "split", "cache_limit", "remote_retries", "held_slots_timeout",
            "bad_sample_policy"} <= set(SPECS)
    assert SPECS["image_size"]["range"] == "between 1 and 16384"  # the library's range
    assert SPECS["split"]["choices"] == ["train", "val", "test"]
    assert SPECS["slice"]["flag"] == "--slice"


@pytest.mark.parametrize("name", NUMERIC)
def test_out_of_range_messages_are_the_tables(folder, name):
    spec = SPECS[name]
    for value in outside(spec):
        with pytest.raises(ValueError) as info:
            options = dict(workers=1, image_size=16, batch_size=2)
            options[name] = value
            tilefeed.Loader(folder, **options)
        assert str(info.value) == (f"tilefeed.Loader: {name} must be {spec['range']}, "
                                   f"got {value!r}")


# The C++ field types: a value these cannot hold is a TypeError before any range check.
UNSIGNED = {"batch_size", "prefetch_depth", "seed", "first_epoch", "first_epoch_position"}
INT32 = {"image_size", "eval_resize", "workers", "max_substitute_attempts"}


def held(name, value):
    """Whether the C++ field of keyword `name` can hold `value`."""
    return not ((name in UNSIGNED and value < 0) or (name in INT32 and abs(value) >= 1 << 31))


# LoaderOptions fields with a value outside the range that the field can hold (not epochs:
# 0 is the C++ "no end", which Python spells None and refuses as 0).
CXX_CHECKED = [n for n in NUMERIC if n in tilefeed._D and n != "epochs"
               and any(held(n, v) for v in outside(SPECS[n]))]


@pytest.mark.parametrize("name", CXX_CHECKED)
def test_the_cxx_keyword_checks_use_the_table(name):
    # The binding's own checks (every path into the C++ loader), without Python's in front.
    spec = SPECS[name]
    for value in (v for v in outside(spec) if held(name, v)):
        with pytest.raises(ValueError) as info:
            _tilefeed._plan_sample({name: value}, 0, 0, 64, 64)
        assert str(info.value) == (f"tilefeed.Loader: {name} must be {spec['range']}, "
                                   f"got {value!r}")


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


def test_iterable_dataset_takes_slice(folder):
    pytest.importorskip("torch")
    dataset = tilefeed.IterableDataset(folder, batch_size=2, image_size=16, workers=1,
                                       epochs=1, slice=(0, 2))
    assert sum(len(images) for images, _ in dataset) == 4
