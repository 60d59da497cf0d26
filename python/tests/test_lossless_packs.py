"""--codec jpeg-index, coefficients-fast and coefficients-small are lossless for every
JPEG: a folder and its packs give byte-identical batches in train and eval, including
progressive JPEGs whose scans stop short of full refinement (made with libjpeg-turbo's own
cjpeg -scans and jpegtran -scans), which libjpeg block-smooths; both packers store those as
they came, by the same test. tilefeed-inspect --verify --against SRC decodes every record
whole and compares it with the source file's decode. TILEFEED_PACK and TILEFEED_INSPECT are
set by ctest; cjpeg and jpegtran come from libjpeg-turbo-progs."""

import os
import shutil
import subprocess

import numpy as np
import pytest
from PIL import Image

import tilefeed
from epochs import one_epoch

PACK = os.environ.get("TILEFEED_PACK")
INSPECT = os.environ.get("TILEFEED_INSPECT")

# Scan scripts (libjpeg's wizard.txt syntax) for 3-component files that leave coefficients
# unrefined after the last scan: luma AC 1-5 (what libjpeg smooths), only chroma, and the DC
# of every component. A complete progressive script is the control.
PARTIAL_SCANS = {
    "luma_ac": """0,1,2: 0-0, 0, 1 ; 0: 1-5, 0, 2 ; 2: 1-63, 0, 1 ; 1: 1-63, 0, 1 ;
                  0: 6-63, 0, 2 ; 0,1,2: 0-0, 1, 0 ; 2: 1-63, 1, 0 ; 1: 1-63, 1, 0 ;
                  0: 6-63, 2, 1 ; 0: 6-63, 1, 0 ;""",
    "chroma": """0,1,2: 0-0, 0, 0 ; 0: 1-63, 0, 0 ; 1: 1-63, 0, 1 ; 2: 1-63, 0, 1 ;""",
    "dc": """0,1,2: 0-0, 0, 2 ; 0: 1-63, 0, 0 ; 1: 1-63, 0, 0 ; 2: 1-63, 0, 0 ;""",
    "complete": """0,1,2: 0-0, 0, 1 ; 0: 1-5, 0, 2 ; 2: 1-63, 0, 1 ; 1: 1-63, 0, 1 ;
                   0: 6-63, 0, 2 ; 0: 1-63, 2, 1 ; 0,1,2: 0-0, 1, 0 ; 2: 1-63, 1, 0 ;
                   1: 1-63, 1, 0 ; 0: 1-63, 1, 0 ;""",
}
# cjpeg settings for the encodings the codec tests cover.
CJPEG = {
    "444": ["-sample", "1x1"],
    "422": ["-sample", "2x1"],
    "420": ["-sample", "2x2"],
    "440": ["-sample", "1x2"],
    "411": ["-sample", "4x1"],
    "410": ["-sample", "4x2"],
    "gray": ["-grayscale"],
    "restart": ["-sample", "2x2", "-restart", "1"],
    "progressive": ["-progressive"],
    "optimized": ["-optimize", "-sample", "2x1"],
    "arithmetic": ["-arithmetic"],
}


def tool(name):
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed (apt-get install libjpeg-turbo-progs)")
    return path


def photo(width, height, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    base = 120 + 60 * np.sin(x / 9.0 + seed) * np.cos(y / 13.0) + 40 * (x / width - y / height)
    image = np.stack([base, base[::-1] * 0.8 + 30, 255 - base], axis=-1)
    image += rng.normal(0, 14, image.shape)
    image[height // 3:height // 2, width // 4:] = [30, 200, 90]
    return np.clip(image, 0, 255).astype(np.uint8)


def write_jpegs(d, seed, tmp):
    """Every encoding, each at a size that a 32-pixel output DCT-scales and one it does not."""
    d.mkdir(parents=True)
    ppm = tmp / f"source{seed}.ppm"
    for i, (w, h) in enumerate([(210, 150), (61, 77)]):
        Image.fromarray(photo(w, h, seed + i)).save(ppm)
        for name, args in CJPEG.items():
            with open(d / f"{name}_{i}.jpg", "wb") as out:
                subprocess.run([tool("cjpeg"), "-quality", "88", *args, str(ppm)], stdout=out,
                               check=True)
        Image.fromarray(photo(w, h, seed + i)).convert("CMYK").save(d / f"cmyk_{i}.jpg",
                                                                      quality=90)
        for name, script in PARTIAL_SCANS.items():
            scans = tmp / f"{name}.scans"
            scans.write_text(script.replace(";", ";\n"))
            # cjpeg -scans straight from pixels, jpegtran -scans from a baseline file.
            with open(d / f"cjpeg_{name}_{i}.jpg", "wb") as out:
                subprocess.run([tool("cjpeg"), "-quality", "85", "-scans", str(scans), str(ppm)],
                               stdout=out, check=True)
            with open(d / f"jpegtran_{name}_{i}.jpg", "wb") as out:
                subprocess.run([tool("jpegtran"), "-scans", str(scans),
                                str(d / f"420_{i}.jpg")], stdout=out, check=True)


def pack(src, out, *extra):
    if not PACK:
        pytest.fail("TILEFEED_PACK is not set: run through ctest (python_tests)")
    done = subprocess.run([PACK, str(src), str(out), "--workers", "2", *extra], check=True,
                          capture_output=True, text=True, timeout=300)
    return done.stdout


def inspect(*args):
    if not INSPECT:
        pytest.fail("TILEFEED_INSPECT is not set: run through ctest (python_tests)")
    return subprocess.run([INSPECT, *map(str, args)], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("lossless")
    folder = root / "folder"
    write_jpegs(folder / "a", 0, root)
    write_jpegs(folder / "b", 10, root)
    summaries = {
        "indexed": pack(folder, root / "indexed", "--codec", "jpeg-index"),
        "coefficients-fast": pack(folder, root / "coefficients-fast", "--codec",
                                  "coefficients-fast"),
        "coefficients-small": pack(folder, root / "coefficients-small", "--codec",
                                   "coefficients-small"),
    }
    return root, folder, summaries


def test_partial_refinement_is_what_libjpeg_smooths(data):
    """The files are what the test is about: a partially refined file decodes differently
    from its complete baseline transcode (libjpeg's block smoothing), a complete one not."""
    root, folder, _ = data
    for name, differs in (("luma_ac", True), ("complete", False)):
        original = folder / "a" / f"jpegtran_{name}_0.jpg"
        baseline = root / f"baseline_{name}.jpg"
        with open(baseline, "wb") as out:
            subprocess.run([tool("jpegtran"), str(original)], stdout=out, check=True)
        a = np.asarray(Image.open(original).convert("RGB"))
        b = np.asarray(Image.open(baseline).convert("RGB"))
        assert (not np.array_equal(a, b)) == differs, name


@pytest.mark.parametrize("mode", ["train", "eval", "train_fast", "eval_fast"])
def test_folder_and_lossless_packs_give_identical_batches(data, mode):
    root, folder, _ = data
    options = dict(seed=3, image_size=32, eval_resize=36, bad_sample_policy="fail",
                   mode=mode.split("_")[0],
                   jpeg=tilefeed.JpegOptions(decode_scaling="fast" if "fast" in mode else "exact"))
    images, labels = one_epoch(folder, **options)
    for kind in ("indexed", "coefficients-fast", "coefficients-small"):
        packed_images, packed_labels = one_epoch(root / kind, **options)
        assert np.array_equal(packed_labels, labels), kind
        for row in range(len(images)):
            assert np.array_equal(packed_images[row], images[row]), f"{kind} row {row}"


def test_both_packers_store_the_same_files_as_they_came(data):
    _, folder, summaries = data
    partial = {f"{tool_}_{name}_{i}.jpg" for tool_ in ("cjpeg", "jpegtran")
               for name in ("luma_ac", "chroma", "dc") for i in range(2)}
    # The transcode to baseline Huffman coding also leaves arithmetic-coded files as they
    # came; coefficients are read from them like any other.
    arithmetic = {f"arithmetic_{i}.jpg" for i in range(2)}
    for kind, summary in summaries.items():
        came = {line.split()[3].split("/")[-1].rstrip(":") for line in summary.splitlines()
                if line.startswith("  as it came ")}
        expected = partial | (arithmetic if kind == "indexed" else set())
        # Each of the two classes holds every partial file.
        assert came == expected, f"{kind}: {sorted(came ^ expected)}"
        assert "progressive scans leave coefficients unrefined" in summary, kind


@pytest.mark.parametrize("kind", ["indexed", "coefficients-fast", "coefficients-small"])
def test_inspect_verify_against_source(data, kind, tmp_path):
    root, folder, _ = data
    done = inspect(root / kind, "--verify", "--against", folder)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verify     OK" in done.stdout
    # A source whose file has other pixels than the one packed: named, and the check fails.
    other = tmp_path / "other"
    shutil.copytree(folder, other)
    target = other / "a" / "420_0.jpg"
    Image.open(target).transpose(Image.FLIP_LEFT_RIGHT).save(target, quality=88)
    done = inspect(root / kind, "--verify", "--against", other)
    assert done.returncode == 1
    assert "pixels differ from" in done.stdout and "420_0.jpg" in done.stdout


def test_inspect_against_notes_a_file_that_never_decoded(tmp_path):
    """A broken file is stored as it came: neither side decodes, which is a note, not a
    failure; a pack that lacks a sample of SRC cannot be paired and is refused."""
    folder = tmp_path / "folder"
    (folder / "a").mkdir(parents=True)
    Image.fromarray(photo(40, 30, 1)).save(folder / "a" / "good.jpg", quality=90)
    (folder / "a" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xdb not a JPEG body")
    pack(folder, tmp_path / "indexed", "--codec", "jpeg-index")
    done = inspect(tmp_path / "indexed", "--verify", "--against", folder)
    assert "note" in done.stdout and "neither the record nor" in done.stdout, done.stdout
    assert "broken.jpg" in done.stdout
    Image.fromarray(photo(40, 30, 2)).save(folder / "a" / "more.jpg", quality=90)
    done = inspect(tmp_path / "indexed", "--verify", "--against", folder)
    assert done.returncode == 1 and "pair with samples by index" in done.stderr
