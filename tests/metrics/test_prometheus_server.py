"""train's metrics endpoint as Debian's Prometheus server scrapes it.

`poprun --instances 2 train --metrics port=P` serves instance i at 127.0.0.1:P+i (the
documented rule: P + the instance's index on its host); a real `prometheus` on loopback
with a generated config scrapes both every second, and its HTTP query API must return each
instance's tilefeed_images_total with the labels as tilefeed wrote them (tilefeed_instance,
tool; no exported_instance). `promtool check metrics` finds a scraped page clean. Requests to
other paths and with other methods get 404/405 and the job keeps training.

Needs TILEFEED_TRAIN, TILEFEED_POPRUN and TILEFEED_MAKE_DEMO, and /usr/bin/prometheus and
promtool (Debian's prometheus package).
"""

import json
import os
import re
import selectors
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

DEADLINE = 240  # seconds for any one wait: a loaded 2-core machine, under ASan


def tool(name):
    path = os.environ.get(name)
    if not path or not os.path.exists(path):
        pytest.skip(name + " not given")
    return path


def free_port(count=1):
    """A port p with p .. p+count-1 free on 127.0.0.1 (checked, then released)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count > 65535:
            continue
        try:
            held = []
            for p in range(base, base + count):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError("no free ports")


def http(method, url):
    """(status, body) of one request; HTTP errors are answers, not exceptions."""
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def query(web, expression):
    """The result list of Prometheus (at 127.0.0.1:`web`) for `expression`, or None while it
    cannot answer."""
    try:
        status, body = http("GET", "http://127.0.0.1:%d/api/v1/query?query=%s" % (
            web, urllib.parse.quote(expression)))
    except OSError:
        return None
    return json.loads(body)["data"]["result"] if status == 200 else None


def wait_for(what, check, process=None):
    deadline = time.monotonic() + DEADLINE
    while True:
        value = check()
        if value:
            return value
        if process is not None and process.poll() is not None:
            pytest.fail("%s: the job ended (exit %s) first" % (what, process.returncode))
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(0.25)


def images_by_instance(port):
    """{tilefeed_instance: value} of tilefeed_images_total on one endpoint, or None."""
    try:
        status, text = http("GET", "http://127.0.0.1:%d/metrics" % port)
    except OSError:
        return None
    if status != 200:
        return None
    found = re.findall(r'^tilefeed_images_total\{([^}]*)\} (\S+)$', text, re.M)
    return {re.search(r'tilefeed_instance="(\d+)"', labels).group(1): float(value)
            for labels, value in found} or None


@pytest.fixture
def demo(tmp_path):
    out = tmp_path / "data"
    subprocess.run([tool("TILEFEED_MAKE_DEMO"), "--classes", "2", "--train-per-class", "16",
                    "--val-per-class", "0", "--threads", "1", str(out)], check=True,
                   capture_output=True, timeout=DEADLINE)
    return out / "train"


def test_prometheus_scrapes_every_instance_of_a_poprun_job(demo, tmp_path):
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prometheus is None or promtool is None:
        pytest.fail("Debian's prometheus package (prometheus, promtool) is not installed")
    base = free_port(2)
    web = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: tilefeed\n    static_configs:\n"
        "      - targets: ['127.0.0.1:%d', '127.0.0.1:%d']\n" % (base, base + 1))
    server = subprocess.Popen(
        [prometheus, "--config.file", str(config), "--storage.tsdb.path", str(tmp_path / "tsdb"),
         "--web.listen-address", "127.0.0.1:%d" % web], stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "prometheus.log", "w"))
    log = open(tmp_path / "train.log", "w+")
    job = subprocess.Popen(
        [tool("TILEFEED_POPRUN"), "--instances", "2", "--", tool("TILEFEED_TRAIN"), "--data",
         str(demo), "--core", "synthetic:us-per-sample=3000", "--batch-size", "4",
         "--image-size", "32", "--workers", "1", "--epochs", "100000", "--seconds", "600",
         "--metrics", "port=%d" % base], stdout=subprocess.DEVNULL, stderr=log)
    try:
        # Each instance prints the address it bound.
        def printed():
            log.seek(0)
            return sorted(re.findall(r"\[train\] instance (\d): Prometheus metrics at "
                                     r"http://127\.0\.0\.1:(\d+)/metrics", log.read()))
        assert wait_for("both instances' URLs", lambda: len(printed()) == 2 and printed(),
                        job) == [("0", str(base)), ("1", str(base + 1))]

        # Prometheus has both series, with tilefeed's labels as written.
        def both_series():
            result = query(web, "tilefeed_images_total > 0") or []
            return result if len(result) == 2 else None
        series = wait_for("Prometheus to hold both instances' tilefeed_images_total",
                          both_series, job)
        by_target = {s["metric"]["instance"]: s["metric"] for s in series}
        for index in (0, 1):
            labels = by_target["127.0.0.1:%d" % (base + index)]
            assert labels == {"__name__": "tilefeed_images_total", "instance":
                              "127.0.0.1:%d" % (base + index), "job": "tilefeed",
                              "tilefeed_instance": str(index), "tool": "train"}, labels

        # promtool finds a scraped page clean.
        status, page = http("GET", "http://127.0.0.1:%d/metrics" % (base + 1))
        assert status == 200
        checked = subprocess.run([promtool, "check", "metrics"], input=page, text=True,
                                 capture_output=True, timeout=DEADLINE)
        assert checked.returncode == 0 and not checked.stdout.strip() and \
            not checked.stderr.strip(), checked.stdout + checked.stderr

        # Other paths and methods: 404 / 405, and the server stays up.
        url = "http://127.0.0.1:%d" % base
        for method, path, expected in [("GET", "/", 404), ("GET", "/favicon.ico", 404),
                                       ("GET", "/metricsx", 404), ("GET", "/a/b?c=d", 404),
                                       ("HEAD", "/", 404), ("POST", "/metrics", 405),
                                       ("DELETE", "/metrics", 405), ("PUT", "/metrics", 405),
                                       ("POST", "/", 404)]:
            assert http(method, url + path)[0] == expected, (method, path)
        # ... and the job keeps training: the counter still moves.
        first = images_by_instance(base)["0"]
        wait_for("tilefeed_images_total to move after the bad requests",
                 lambda: (images_by_instance(base) or {}).get("0", 0) > first, job)
        assert job.poll() is None
    finally:
        for process in (job, server):
            if process.poll() is None:
                process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_the_endpoint_binds_loopback_unless_told_and_prints_what_it_bound(demo, tmp_path):
    """A bare --metrics port=P binds 127.0.0.1 only; bind= moves it (here to another
    loopback address, 127.0.0.2); the printed URL is the address bound."""
    for bind, other in ((None, "127.0.0.2"), ("127.0.0.2", "127.0.0.1")):
        log = open(tmp_path / ("bind-%s.log" % bind), "w+")
        train = subprocess.Popen(
            [tool("TILEFEED_TRAIN"), "--data", str(demo), "--core",
             "synthetic:us-per-sample=3000", "--batch-size", "4", "--image-size", "32", "--workers",
             "1", "--epochs", "100000", "--seconds", "300", "--metrics",
             "port=0" if bind is None else "port=0,bind=" + bind],
            stdout=subprocess.DEVNULL, stderr=log)
        try:
            def printed():
                log.seek(0)
                return re.search(r"Prometheus metrics at http://([\d.]+):(\d+)/metrics",
                                 log.read())
            found = wait_for("the printed URL", printed, train)
            assert found.group(1) == (bind or "127.0.0.1")
            port = int(found.group(2))
            assert http("GET", "http://%s:%d/metrics" % (found.group(1), port))[0] == 200
            with pytest.raises(OSError):
                http("GET", "http://%s:%d/metrics" % (other, port))
        finally:
            train.terminate()
            train.wait(timeout=60)


class Silent:
    """`count` connections to 127.0.0.1:`port` that send nothing, or half a request head (a
    slowloris), watched on a thread of their own: each one the endpoint closes is counted
    and, with `replace`, opened again, so the pressure holds until stop()."""

    def __init__(self, port, count, replace):
        self.port, self.replace, self.closed = port, replace, 0
        self.selector = selectors.DefaultSelector()
        self.stopping = threading.Event()
        for n in range(count):
            self.open(n)
        self.thread = threading.Thread(target=self.watch)
        self.thread.start()

    def open(self, n):
        s = socket.socket()
        if n < 8:  # the first 8: half a request head, and then nothing
            s.settimeout(DEADLINE)
            s.connect(("127.0.0.1", self.port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
            s.setblocking(False)
        else:  # the others send nothing; their connects wait in the kernel, not here
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", self.port))
        self.selector.register(s, selectors.EVENT_READ, n)

    def watch(self):
        while not self.stopping.is_set():
            for key, _ in self.selector.select(timeout=0.1):  # 0.1 s: how soon stop() is seen
                try:
                    data = key.fileobj.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    self.selector.unregister(key.fileobj)
                    key.fileobj.close()
                    self.closed += 1
                    if self.replace:
                        self.open(key.data)

    def stop(self):
        self.stopping.set()
        self.thread.join()
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()


def test_silent_connections_and_big_heads_do_not_take_the_endpoint_down(demo, tmp_path):
    """Silent and half-sent requests are served beside a scrape, not before it: with 100 of
    them held open (past the 64-connection cap: the oldest are closed) a scrape answers, and
    with 48 held open all along (each closed at its deadline, then opened again) Debian's
    Prometheus scrapes the endpoint. A request head over 8 KiB gets 431."""
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.fail("Debian's prometheus package is not installed")
    log = open(tmp_path / "train.log", "w+")
    train = subprocess.Popen(
        [tool("TILEFEED_TRAIN"), "--data", str(demo), "--core", "synthetic:us-per-sample=3000",
         "--batch-size", "4", "--image-size", "32", "--workers", "1", "--epochs", "100000",
         "--seconds", "600", "--metrics", "port=0"], stdout=subprocess.DEVNULL, stderr=log)
    server = None
    try:
        def printed():
            log.seek(0)
            return re.search(r"Prometheus metrics at http://127\.0\.0\.1:(\d+)/metrics",
                             log.read())
        port = int(wait_for("the printed URL", printed, train).group(1))
        url = "http://127.0.0.1:%d/metrics" % port

        flood = Silent(port, 100, replace=False)
        try:
            assert http("GET", url)[0] == 200
            # Each is closed, by the cap or at its deadline, whatever it sends.
            wait_for("the endpoint to close every silent connection", lambda: flood.closed == 100)
        finally:
            flood.stop()

        big = urllib.request.Request(url, headers={"X-Big": "a" * 16384})
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(big, timeout=30)
        assert caught.value.code == 431
        assert http("GET", url)[0] == 200

        held = Silent(port, 48, replace=True)
        try:
            web = free_port()
            config = tmp_path / "prometheus.yml"
            config.write_text(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                "scrape_configs:\n  - job_name: tilefeed\n    static_configs:\n"
                "      - targets: ['127.0.0.1:%d']\n" % port)
            server = subprocess.Popen(
                [prometheus, "--config.file", str(config), "--storage.tsdb.path",
                 str(tmp_path / "tsdb"), "--web.listen-address", "127.0.0.1:%d" % web],
                stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "w"))
            wait_for("three scrapes by Prometheus past the held connections",
                     lambda: query(web, "sum_over_time(up[10m]) >= 3"), train)
            wait_for("the deadline to close the held connections", lambda: held.closed >= 48)
        finally:
            held.stop()
    finally:
        for process in (train, server):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(timeout=60)
