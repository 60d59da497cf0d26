"""s3:// requests as AWS accepts them, checked by an independent SigV4 implementation.

A loopback S3-compatible server written here records the exact request tilefeed sends
(method, raw path, query, headers) and has botocore's S3SigV4Auth (Debian's python3-botocore)
recompute its signature: the canonical URI from the object key as AWS derives it (the decoded
key, each byte outside A-Za-z0-9-._~ and '/' percent-encoded), the headers as received, the
server's own secret and region. A request without x-amz-content-sha256 is refused with 400,
one whose token or signature differ with 403, as AWS does. `train` reads a whole epoch of a
shard pack and of WebDataset tars through s3:// under keys with spaces, '+', '=', ",;@()!'"
and non-ASCII, with a session token, path style and virtual-hosted; a wrong secret stops it
with one line naming the refusal, a wrong region with one naming the bucket's.

Needs TILEFEED_TRAIN, TILEFEED_PACK and TILEFEED_MAKE_DEMO (tests/CMakeLists.txt sets them).
"""

import email.utils
import glob
import hashlib
import http.server
import io
import json
import os
import re
import subprocess
import tarfile
import threading
import urllib.parse

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

KEY_ID = "AKIDTILEFEEDTEST"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYtilefeed"
TOKEN = "FwoGZXIvYXdzEtilefeed//token+with/slashes=="
REGION = "eu-west-3"
BUCKET = "tilefeed-bucket"
# Prefixes that need encoding: a space, '+', '=', ",;@()!'", non-ASCII.
SHARD_PREFIX = "data set/ü+=,;@()!'/shards"
TAR_PREFIX = "wds é+=/a b"


class S3Server(http.server.ThreadingHTTPServer):
    """Serves root/<bucket>/<key> for GET (ranges) and HEAD, path style or virtual-hosted
    (Host: <bucket>.localhost:port), verifying every request's SigV4 signature."""

    daemon_threads = True

    def __init__(self, root):
        super().__init__(("127.0.0.1", 0), S3Handler)
        self.root = root
        self.requests = []  # dicts: method, path, query, headers, verdict
        self.lock = threading.Lock()

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.server_address[1]


def _verify(method, host, raw_path, query, headers):
    """AWS's verdict on one request: (status, error code, the decoded bucket and key)."""
    path = urllib.parse.unquote(raw_path, errors="strict")
    if host.split(":")[0].endswith(".localhost"):
        bucket, key = host.split(".localhost")[0], path.lstrip("/")
    else:
        bucket, _, key = path.lstrip("/").partition("/")
    lower = {k.lower(): v for k, v in headers.items()}
    auth = lower.get("authorization", "")
    m = re.fullmatch(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/s3/aws4_request, "
                     r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})", auth)
    if m is None:
        return 403, "AccessDenied", bucket, key
    if "x-amz-content-sha256" not in lower:
        return 400, "InvalidRequest", bucket, key  # AWS: "Missing required header"
    if m.group(1) != KEY_ID:
        return 403, "InvalidAccessKeyId", bucket, key
    if m.group(3) != REGION:  # AWS names the bucket's region in a header
        return 400, "AuthorizationHeaderMalformed", bucket, key
    if lower.get("x-amz-security-token") != TOKEN:
        return 403, "InvalidToken", bucket, key
    # The canonical URI AWS derives: the key as decoded, encoded the SigV4 way.
    canonical = urllib.parse.quote(path, safe="/~")
    request = AWSRequest(method=method, url="http://%s%s" % (host, canonical),
                         headers={k: v for k, v in headers.items() if k.lower() != "authorization"})
    if query:
        request.url += "?" + query
    request.context["timestamp"] = lower.get("x-amz-date", "")
    signer = S3SigV4Auth(Credentials(KEY_ID, SECRET, TOKEN), "s3", REGION)
    canonical_request = signer.canonical_request(request)
    signature = signer.signature(signer.string_to_sign(request, canonical_request), request)
    signed = signer.signed_headers(signer.headers_to_sign(request))
    if m.group(4) != signed or m.group(5) != signature or m.group(3) != REGION:
        return 403, "SignatureDoesNotMatch", bucket, key
    return 200, "", bucket, key


class S3Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _error(self, status, code):
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code>"
                "<Message>refused by the test's S3 server</Message></Error>" % code).encode()
        self.send_response(status)
        if code == "AuthorizationHeaderMalformed":
            self.send_header("x-amz-bucket-region", REGION)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _serve(self):
        raw_path, _, query = self.path.partition("?")
        headers = {k: v for k, v in self.headers.items()}
        host = self.headers.get("Host", "")
        status, code, bucket, key = _verify(self.command, host, raw_path, query, headers)
        with self.server.lock:
            self.server.requests.append(dict(method=self.command, path=raw_path, query=query,
                                             headers=headers, status=status, code=code,
                                             key=key))
        if status != 200:
            return self._error(status, code)
        file = os.path.join(self.server.root, bucket, key)
        if not os.path.isfile(file):
            return self._error(404, "NoSuchKey")
        with open(file, "rb") as f:
            data = f.read()
        etag = '"%s"' % hashlib.md5(data).hexdigest()
        if_match, byte_range = self.headers.get("If-Match"), self.headers.get("Range")
        if if_match is not None and if_match != etag:
            return self._error(412, "PreconditionFailed")
        first, last, status = 0, len(data) - 1, 200
        if byte_range is not None:
            m = re.fullmatch(r"bytes=(\d+)-(\d+)", byte_range)
            first, last, status = int(m.group(1)), min(int(m.group(2)), len(data) - 1), 206
        self.send_response(status)
        self.send_header("Content-Length", str(last - first + 1))
        self.send_header("ETag", etag)
        self.send_header("Last-Modified",
                         email.utils.formatdate(os.path.getmtime(file), usegmt=True))
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, len(data)))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(data[first:last + 1])

    do_GET = _serve
    do_HEAD = _serve


def _tool(name):
    path = os.environ.get(name)
    if not path:
        pytest.skip(name + " is not set (run through ctest)")
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A bucket holding a shard pack and tars of one 24-image folder, and its server."""
    work = tmp_path_factory.mktemp("s3")
    subprocess.run([_tool("TILEFEED_MAKE_DEMO"), str(work / "demo"), "--classes", "3",
                    "--train-per-class", "8", "--val-per-class", "0", "--threads", "1"],
                   check=True, capture_output=True, timeout=120)
    bucket = work / "root" / BUCKET
    subprocess.run([_tool("TILEFEED_PACK"), str(work / "demo" / "train"),
                    str(bucket / SHARD_PREFIX), "--shard-size", "40KiB", "--workers", "1"],
                   check=True, capture_output=True, timeout=120)
    images = sorted(glob.glob(str(work / "demo" / "train" / "*" / "*")))
    classes = sorted(os.listdir(work / "demo" / "train"))
    os.makedirs(bucket / TAR_PREFIX)
    for part in range(2):
        with tarfile.open(bucket / TAR_PREFIX / ("train-%06d.tar" % part), "w") as tar:
            for i, image in enumerate(images[part::2]):
                label = classes.index(os.path.basename(os.path.dirname(image)))
                for suffix, data in ((".jpg", open(image, "rb").read()),
                                     (".cls", str(label).encode())):
                    info = tarfile.TarInfo("%s/s%03d%s" % (label, i, suffix))
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    server = S3Server(str(work / "root"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield dict(server=server, work=work, images=len(images))
    server.shutdown()
    server.server_close()


def _train(served, location, secret=SECRET, addressing="auto", endpoint=None, name="train",
           env=None):
    if env is None:
        env = dict(os.environ, AWS_ACCESS_KEY_ID=KEY_ID, AWS_SECRET_ACCESS_KEY=secret,
                   AWS_SESSION_TOKEN=TOKEN, AWS_DEFAULT_REGION=REGION,
                   AWS_ENDPOINT_URL_S3=endpoint or served["server"].endpoint)
        for variable in ("AWS_REGION", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
            env.pop(variable, None)
    report = served["work"] / (name + ".jsonl")
    result = subprocess.run(
        [_tool("TILEFEED_TRAIN"), "--data", location, "--core", "synthetic:us-per-sample=10", "--epochs", "1", "--batch-size", "8", "--image-size", "32", "--workers", "1",
         "--classes", "3", "--bad-sample-policy", "fail", "--json", str(report)] +
        ([] if addressing == "auto" else ["--remote", "s3-addressing=" + addressing]),
        env=env, capture_output=True, text=True, timeout=300)
    return result, report


def _epoch_images(report):
    with open(report, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    return sum(r.get("images", 0) for r in records if r.get("epoch") == 0)


@pytest.mark.parametrize("location,addressing", [
    ("s3://%s/%s" % (BUCKET, SHARD_PREFIX), "auto"),  # path style at an endpoint
    ("s3://%s/%s/train-{000000..000001}.tar" % (BUCKET, TAR_PREFIX), "auto"),
    ("s3://%s/%s" % (BUCKET, SHARD_PREFIX), "virtual"),
])
def test_an_epoch_through_s3_with_signatures_botocore_verifies(served, location, addressing):
    server = served["server"]
    with server.lock:
        server.requests.clear()
    endpoint = None
    if addressing == "virtual":  # libcurl resolves <bucket>.localhost to loopback itself
        endpoint = "http://localhost:%d" % server.server_address[1]
    result, report = _train(served, location, addressing=addressing, endpoint=endpoint,
                            name="epoch-" + addressing + str(len(location)))
    with server.lock:
        requests = list(server.requests)
    refused = [(r["method"], r["path"], r["status"], r["code"], r["headers"]) for r in requests if r["status"] != 200]
    assert not refused, "requests the server refused: %r\nstderr: %s" % (refused[:5],
                                                                        result.stderr)
    assert result.returncode == 0, result.stderr
    assert _epoch_images(report) == served["images"]
    keys = {r["key"] for r in requests}
    prefix = SHARD_PREFIX if "shards" in location else TAR_PREFIX
    assert all(k.startswith(prefix + "/") for k in keys), keys
    for r in requests:
        assert r["path"] == ("" if addressing == "virtual" else "/" + BUCKET) + \
            urllib.parse.quote("/" + r["key"], safe="/~")
        headers = {k.lower(): v for k, v in r["headers"].items()}
        assert headers["x-amz-security-token"] == TOKEN
        assert headers["x-amz-content-sha256"] == hashlib.sha256(b"").hexdigest()
        if addressing == "virtual":
            assert headers["host"].startswith(BUCKET + ".localhost:")
    assert {r["method"] for r in requests} == {"HEAD", "GET"}


def test_a_request_without_content_sha256_is_refused_like_aws(served):
    """The server itself: what AWS refuses, it refuses (so the test above can fail)."""
    status, code, _, _ = _verify("GET", "h", "/b/k", "", {
        "Authorization": "AWS4-HMAC-SHA256 Credential=%s/20240101/%s/s3/aws4_request, "
                         "SignedHeaders=host, Signature=%s" % (KEY_ID, REGION, "0" * 64)})
    assert (status, code) == (400, "InvalidRequest")


def test_a_wrong_secret_is_refused_with_one_line(served):
    result, _ = _train(served, "s3://%s/%s" % (BUCKET, SHARD_PREFIX), secret="not-the-secret",
                       name="wrong-secret")
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "403" in line]
    assert len(lines) == 1, result.stderr
    assert "access denied" in lines[0] and KEY_ID in lines[0], lines[0]
    assert "tilefeed-manifest.txt" in lines[0], lines[0]


def test_keys_and_region_from_an_aws_profile(served, tmp_path):
    """No key in the environment: AWS_PROFILE's section of ~/.aws/credentials, and its region
    from ~/.aws/config, as the AWS CLI reads them; AWS_ENDPOINT_URL for the endpoint."""
    home = tmp_path / "home"
    os.makedirs(home / ".aws")
    (home / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = AKIDWRONG\naws_secret_access_key = wrong\n\n"
        "[tilefeed]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
        "aws_session_token = %s\n" % (KEY_ID, SECRET, TOKEN))
    (home / ".aws" / "config").write_text("[profile tilefeed]\nregion = %s\n" % REGION)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(home), AWS_PROFILE="tilefeed",
               AWS_ENDPOINT_URL=served["server"].endpoint)
    result, report = _train(served, "s3://%s/%s" % (BUCKET, SHARD_PREFIX), env=env,
                            name="profile")
    assert result.returncode == 0, result.stderr
    assert _epoch_images(report) == served["images"]


def test_python_signs_with_the_keys_of_a_credentials_file(served, tmp_path, monkeypatch):
    """tilefeed.Loader finds the keys as the tools do: no key in the environment, the
    AWS_PROFILE section of AWS_SHARED_CREDENTIALS_FILE and its region from AWS_CONFIG_FILE."""
    tilefeed = pytest.importorskip("tilefeed")  # PYTHONPATH=<build>/python (ctest sets it)
    (tmp_path / "credentials").write_text(
        "[default]\naws_access_key_id = AKIDWRONG\naws_secret_access_key = wrong\n\n"
        "[tilefeed]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
        "aws_session_token = %s\n" % (KEY_ID, SECRET, TOKEN))
    (tmp_path / "config").write_text("[profile tilefeed]\nregion = %s\n" % REGION)
    for variable in [v for v in os.environ if v.startswith("AWS_")]:
        monkeypatch.delenv(variable)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AWS_PROFILE", "tilefeed")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    server = served["server"]
    with server.lock:
        server.requests.clear()
    remote = tilefeed.RemoteOptions(s3_endpoint=server.endpoint)
    with tilefeed.Loader("s3://%s/%s" % (BUCKET, SHARD_PREFIX), batch_size=8, image_size=32,
                         workers=1, epochs=1, remote=remote) as loader:
        images = sum(len(batch.labels_int32) for batch in loader)
    assert images == served["images"]
    with server.lock:
        assert server.requests and all(r["status"] == 200 for r in server.requests)


def test_a_wrong_region_is_one_line_naming_the_buckets(served):
    env = dict(os.environ, AWS_ACCESS_KEY_ID=KEY_ID, AWS_SECRET_ACCESS_KEY=SECRET,
               AWS_SESSION_TOKEN=TOKEN, AWS_REGION="us-west-2",
               AWS_ENDPOINT_URL_S3=served["server"].endpoint)
    result, _ = _train(served, "s3://%s/%s" % (BUCKET, SHARD_PREFIX), env=env, name="region")
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "HTTP 400" in line]
    assert len(lines) == 1, result.stderr
    assert "the bucket is in region %s, not us-west-2" % REGION in lines[0], lines[0]
