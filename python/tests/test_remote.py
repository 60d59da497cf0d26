"""tilefeed.Loader on datasets served over HTTP by a real nginx on loopback (Debian's
nginx, started here with a generated configuration on a free port): the remote options
(cache_dir, cache_limit, s3_endpoint, remote_retries) reach the C++ loader, batches over
http:// equal the local ones with and without the cache, the cache directory fills and
keeps the tars' indexes, and bad options or a missing URL give one clear error."""

import io
import os
import shutil
import socket
import subprocess
import tarfile
import time
import urllib.request

import numpy as np
import pytest
from PIL import Image

import tilefeed
from epochs import one_epoch

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
SAMPLES_PER_TAR = 10


def write_tars(out, tars=2, seed=0):
    """WebDataset tars as its TarWriter lays them out: KEY.jpg then KEY.cls."""
    rng = np.random.default_rng(seed)
    for t in range(tars):
        with tarfile.open(out / f"train-{t:06d}.tar", "w") as tar:
            for i in range(SAMPLES_PER_TAR):
                key = f"sample_{t}_{i:03d}"
                pixels = rng.integers(0, 256, (32 + i, 40, 3), dtype=np.uint8)
                jpeg = io.BytesIO()
                Image.fromarray(pixels).save(jpeg, format="JPEG", quality=90)
                for name, data in ((key + ".jpg", jpeg.getvalue()),
                                   (key + ".cls", str(i % 3).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("remote")
    www, work = root / "www", root / "nginx"
    (www / "wds").mkdir(parents=True)
    (work / "tmp").mkdir(parents=True)
    write_tars(www / "wds")
    port = free_port()
    temp = " ".join(f"{kind}_temp_path {work}/tmp/{kind};"
                    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    (work / "nginx.conf").write_text(
        f"daemon off; master_process off; worker_processes 1; pid {work}/nginx.pid;\n"
        f"error_log {work}/error.log warn; events {{ worker_connections 256; }}\n"
        f"http {{ access_log off; {temp}\n"
        f"  server {{ listen 127.0.0.1:{port}; root {www}; }} }}\n")
    server = subprocess.Popen([NGINX, "-e", f"{work}/error.log", "-p", f"{work}/",
                               "-c", f"{work}/nginx.conf"])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{url}/wds/train-000000.tar", timeout=2).close()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail(f"nginx did not start: {(work / 'error.log').read_text()}")
            time.sleep(0.05)
    yield www, url
    server.terminate()
    server.wait(timeout=30)


def epoch(data, **kwargs):
    """Every batch of one epoch: (images, labels) concatenated."""
    return one_epoch(data, seed=5, **kwargs)


def test_http_tars_equal_local_tars_with_and_without_the_cache(served, tmp_path):
    www, url = served
    pattern = "train-{000000..000001}.tar"
    local_images, local_labels = epoch(www / "wds" / pattern)
    assert len(local_labels) == 2 * SAMPLES_PER_TAR
    for options in ({}, dict(remote=tilefeed.RemoteOptions(cache_dir=tmp_path / "cache",
                                                          cache_limit=64 << 20)),
                    dict(remote=tilefeed.RemoteOptions(cache_dir=str(tmp_path / "cache"),
                                                       remote_retries=0))):
        images, labels = epoch(f"{url}/wds/{pattern}", **options)
        np.testing.assert_array_equal(labels, local_labels)
        np.testing.assert_array_equal(images, local_images)
    files = os.listdir(tmp_path / "cache" / "blocks")  # blocks and the tars' indexes
    indexes = [name for name in files if name.endswith(".tfidx")]
    assert len(files) - len(indexes) >= 2, files  # one block or more per tar
    assert len(indexes) == 2, indexes


def test_a_missing_url_is_one_source_error_naming_it(served):
    _, url = served
    missing = f"{url}/wds/missing-000000.tar"
    with pytest.raises(tilefeed.SourceError) as error:
        tilefeed.Loader(missing, remote=tilefeed.RemoteOptions(remote_retries=1))
    message = str(error.value)
    assert missing in message and "HTTP 404" in message and "\n" not in message, message


@pytest.mark.parametrize("option, error", [
    (dict(cache_limit=1 << 20), ValueError),
    (dict(cache_limit="1GiB"), TypeError),
    (dict(remote_retries=-1), ValueError),
    (dict(remote_retries=21), ValueError),
    (dict(remote_retries=True), TypeError),
    (dict(cache_dir=3), TypeError),
    (dict(cache_dir=""), TypeError),
    (dict(s3_endpoint=""), TypeError),
])
def test_bad_remote_options_are_refused(served, option, error):
    _, url = served
    with pytest.raises(error, match="tilefeed.Loader: "):
        tilefeed.Loader(f"{url}/wds/train-000000.tar", remote=tilefeed.RemoteOptions(**option))
