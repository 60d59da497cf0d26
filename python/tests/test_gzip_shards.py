"""gzip-compressed WebDataset shards (.tar.gz/.tgz) are refused with one line that says what
they are and how to convert them, never read wrong or ignored: a .tgz, a .tar.gz,
a brace pattern of them, a directory of them, one beside plain .tar files, and one named
.tar (known by its first bytes). The shards
are written here in the exact layout of webdataset's TarWriter(compress=True)
(webdataset/writer.py: tarfile.open(mode="w|gz"), USTAR, members KEY.<ext> in sorted order,
mode 0o444, user and group "bigdata"); after the conversion the message gives
(gunzip -k), tilefeed reads every sample, label and order as webdataset's reader groups
them (consecutive members with one key form a sample; .cls is the label)."""

import gzip
import io
import shutil
import subprocess
import tarfile

import numpy as np
import pytest
from PIL import Image

import tilefeed


def jpeg(seed):
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (30 + seed % 7, 40, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


def write_shard(path, first, count, compress):
    """A shard as webdataset's TarWriter writes it; returns [(key, label)] in order."""
    samples = []
    with open(path, "wb") as stream:
        with tarfile.open(fileobj=stream, mode="w|gz" if compress else "w|",
                          format=tarfile.USTAR_FORMAT) as tar:
            for n in range(first, first + count):
                key, label = f"sample{n:06d}", (7 * n) % 5
                for ext, value in sorted({"cls": str(label).encode(), "jpg": jpeg(n)}.items()):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size, info.mtime, info.mode = len(value), 1700000000, 0o444
                    info.uname = info.gname = "bigdata"
                    tar.addfile(info, io.BytesIO(value))
                samples.append((key, label))
    return samples


def webdataset_order(paths):
    """(key, label) per sample as webdataset's tar reader groups members, shard by shard."""
    samples = []
    for path in paths:
        opener = gzip.open if str(path).endswith(("gz", "tgz")) else open
        with opener(path, "rb") as raw, tarfile.open(fileobj=raw, mode="r|") as tar:
            current = None
            for member in tar:
                key, ext = member.name.split(".", 1)
                if current is None or current[0] != key:
                    current = [key, None]
                    samples.append(current)
                if ext == "cls":
                    current[1] = int(tar.extractfile(member).read())
    return [tuple(s) for s in samples]


def refused(location):
    with pytest.raises(tilefeed.SourceError) as caught:
        tilefeed.Loader(str(location), batch_size=2, image_size=16)
    message = str(caught.value)
    assert "\n" not in message
    assert "gzip-compressed WebDataset shard" in message and "gunzip -k" in message
    return message


@pytest.fixture
def shards(tmp_path):
    d = tmp_path / "shards"
    d.mkdir()
    write_shard(d / "train-000000.tgz", 0, 5, compress=True)
    write_shard(d / "train-000001.tar.gz", 5, 4, compress=True)
    return d


def test_the_files_are_gzip_in_webdatasets_layout(shards):
    with open(shards / "train-000000.tgz", "rb") as f:
        assert f.read(2) == b"\x1f\x8b"
    assert len(webdataset_order([shards / "train-000000.tgz"])) == 5


def test_gzip_shards_are_refused_by_name_in_one_line(shards, tmp_path):
    assert "train-000000.tgz" in refused(shards / "train-000000.tgz")
    assert "train-000001.tar.gz" in refused(shards / "train-000001.tar.gz")
    # A directory of them: not "no class directories".
    assert "train-000000.tgz" in refused(shards)
    # Beside plain .tar files they are not skipped (their samples would be lost silently).
    write_shard(shards / "train-000002.tar", 9, 3, compress=False)
    assert "2 such file(s)" in refused(shards)
    # A brace pattern naming them.
    refused(str(shards / "train-{000000..000001}.tar.gz"))


def test_gzip_named_tar_is_refused_by_content_in_one_line(tmp_path):
    """A gzip file named .tar is named as gzip (its first bytes), not as a bad tar header,
    and the command the message gives makes it readable."""
    (tmp_path / "d").mkdir()
    gz = tmp_path / "d" / "train-000000.tar"
    expected = write_shard(gz, 0, 4, compress=True)
    with pytest.raises(tilefeed.SourceError) as caught:
        tilefeed.Loader(str(gz), batch_size=2, image_size=16)
    message = str(caught.value)
    assert "\n" not in message and "checksum" not in message, message
    assert "gzip-compressed, although named .tar" in message and "gunzip -c FILE > NEW.tar" \
        in message, message
    (tmp_path / "new").mkdir()
    with open(tmp_path / "new" / "train-000000.tar", "wb") as out:
        subprocess.run(["gunzip", "-c", str(gz)], stdout=out, check=True)
    with tilefeed.Loader(str(tmp_path / "new"), batch_size=2, image_size=16, shuffle=False,
                         epochs=1, workers=1) as loader:
        assert [l for b in loader for l in b.labels.tolist()] == [l for _, l in expected]


def test_the_conversion_the_message_gives_reads_every_sample(shards):
    for name in ("train-000000.tgz", "train-000001.tar.gz"):
        subprocess.run(["gunzip", "-k", str(shards / name)], check=True)
    converted = sorted(shards.glob("*.tar"))
    assert [p.name for p in converted] == ["train-000000.tar", "train-000001.tar"]
    expected = webdataset_order(sorted(shards.glob("*gz")))
    assert webdataset_order(converted) == expected
    for p in shards.glob("*gz"):
        p.unlink()
    with tilefeed.Loader(str(shards), batch_size=3, image_size=16, shuffle=False,
                         epochs=1, workers=1, bad_sample_policy="fail") as loader:
        assert loader.dataset_size == len(expected)
        labels = [l for batch in loader for l in batch.labels.tolist()]
    assert labels == [label for _, label in expected]


def test_tar_named_files_stay_readable_after_a_refusal(tmp_path):
    """The refusal is about gzip: a plain .tar next to nothing else still reads."""
    d = tmp_path / "plain"
    d.mkdir()
    expected = write_shard(d / "a.tar", 0, 4, compress=False)
    with tilefeed.Loader(str(d), batch_size=2, image_size=16, shuffle=False, epochs=1,
                         workers=1) as loader:
        assert [l for b in loader for l in b.labels.tolist()] == [l for _, l in expected]
    assert shutil.which("gunzip")
