"""Direct S3 range reads against servers that misbehave (tests/helpers/misbehaving_s3.py):
a trickled answer ends at the request's deadline (K25), a chunked 206 leaves its connection
reusable (K26), redirects are followed where safe and refused with what to do elsewhere, and
a server that ignores ``Range`` is one permanent error, on either path (K27). Each case runs
buffered and spliced where both exist. No test measures time: a trickle moves one byte per
tick of the test, and what is compared is how many bytes went before the error came."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from shardkit.errors import StorageError, TransientStorageError
from shardkit.storage import CacheOptions, ShardCache, Store, open_store
from shardkit.storage.retry import NO_RETRY, RetryPolicy
from tests.helpers.keepalive_s3 import KeepAliveS3Server
from tests.helpers.misbehaving_s3 import MisbehavingS3Server
from tests.integration.storage.test_storage_direct_ranges import SPLICED, collect

pytestmark = [
    pytest.mark.s3,
    pytest.mark.filterwarnings("ignore:datetime.datetime.utcnow:DeprecationWarning:botocore"),
]

PAYLOAD = os.urandom(391 * 1024 + 7)
URL = "s3://bucket/ds"
#: Deadline tests: a short total timeout, a read timeout the trickle never trips.
TRICKLED = RetryPolicy(max_attempts=3, base_delay=0.0, timeout=0.5, read_timeout=30.0)
#: Permanent-error tests: retries would be quick, and are counted.
QUICK = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.01)


@pytest.fixture
def root(tmp_path: Any) -> str:
    (tmp_path / "bucket" / "ds").mkdir(parents=True)
    (tmp_path / "bucket" / "ds" / "blob.bin").write_bytes(PAYLOAD)
    return str(tmp_path)


@pytest.fixture
def serve(root: str) -> Iterator[Callable[..., MisbehavingS3Server]]:
    started: list[KeepAliveS3Server] = []

    def start(mode: str, **options: Any) -> MisbehavingS3Server:
        server = MisbehavingS3Server(root, mode, **options).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def signed_options(server: KeepAliveS3Server) -> dict[str, Any]:
    """Credentials instead of ``anon``: s3fs presigns every URL (the server checks nothing)."""
    return {"key": "testing", "secret": "testing",
            "client_kwargs": {"endpoint_url": server.endpoint_url, "region_name": "us-east-1"}}


def gets(server: KeepAliveS3Server) -> list[str | None]:
    return [r.range for r in server.records() if r.method == "GET" and r.key.endswith("blob.bin")]


def run_in_thread(fn: Callable[[], object]) -> tuple[threading.Event, list[BaseException]]:
    """``fn()`` on a daemon thread; the event is set when it has returned or raised."""
    done, errors = threading.Event(), []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # handed to the test
            errors.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, daemon=True, name="under-test").start()
    return done, errors


@SPLICED
@pytest.mark.parametrize("mode", ["trickle-body", "trickle-head"])
def test_a_trickled_answer_ends_at_the_request_deadline_not_at_its_last_byte_k25(
    serve: Callable[..., MisbehavingS3Server], mode: str, spliced: bool
) -> None:
    """One byte per tick, each well within the 30 s read timeout: before K25 the read went on
    to the last byte; now it ends at its 0.5 s deadline, a transient error that names the
    object, the range, the bytes that came and the deadline."""
    server = serve(mode)
    store = open_store(URL, server.storage_options(), retry=TRICKLED)
    done, errors = run_in_thread(lambda: collect(store, "blob.bin", 100, 300, spliced))
    sent = server.tick_until(done, most=1000)  # more than the head (~130 bytes) and the body (200)
    assert done.wait(60) and errors, f"the read delivered all it was sent ({sent} bytes) without an error"
    error = errors[0]
    assert isinstance(error, TransientStorageError), repr(error)
    assert "deadline" in str(error) and "0.5s" in str(error), str(error)
    assert f"{URL}/blob.bin" in str(error) and "bytes 100-299" in str(error), str(error)
    assert "bytes had come" in str(error) and "Signature" not in str(error)
    assert sent < 200  # not even the body's worth of ticks


@pytest.fixture
def certificate(tmp_path: Any) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1: (certificate, key) paths."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: no certificate for a TLS server")
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.mark.parametrize("mode", ["trickle-body", "trickle-head"])
def test_a_trickled_answer_over_tls_ends_at_the_deadline_too_k25(
    serve: Callable[..., MisbehavingS3Server], certificate: tuple[str, str], mode: str
) -> None:
    """TLS bodies are read in user space (never spliced): the same deadline, through the TLS
    socket's own receives."""
    server = serve(mode, tls=certificate)
    options = server.storage_options()
    options["client_kwargs"]["verify"] = certificate[0]
    store = open_store(URL, options, retry=TRICKLED)
    done, errors = run_in_thread(lambda: collect(store, "blob.bin", 100, 300, spliced=True))
    sent = server.tick_until(done, most=1000)
    assert done.wait(60) and errors, f"the read delivered all it was sent ({sent} bytes) without an error"
    assert isinstance(errors[0], TransientStorageError) and "deadline" in str(errors[0]), repr(errors[0])
    assert sent < 200


def test_a_trickled_answer_read_through_s3fs_ends_at_the_deadline_too_k25(
    serve: Callable[..., MisbehavingS3Server],
) -> None:
    server = serve("trickle-body")
    store = open_store(URL, server.storage_options(), retry=TRICKLED)
    done, errors = run_in_thread(lambda: store.read_range("blob.bin", 100, 300, retry=NO_RETRY))
    sent = server.tick_until(done, most=1000)
    assert done.wait(60) and errors, f"the read delivered all it was sent ({sent} bytes) without an error"
    assert isinstance(errors[0], TransientStorageError), repr(errors[0])
    message = str(errors[0])
    assert "deadline" in message and f"{URL}/blob.bin" in message and "[100, 300)" in message, message
    assert sent < 200


def test_a_trickled_cache_download_fails_at_its_deadline_k25(
    serve: Callable[..., MisbehavingS3Server], tmp_path: Any
) -> None:
    """The issue's case: a small shard's one part trickled; the download fails (the retry
    layer sends no second request past ``timeout``) well before the trickle is over."""
    server = serve("trickle-body")
    store = open_store(URL, server.storage_options(), retry=TRICKLED)
    cache = ShardCache(str(tmp_path / "cache"), 1 << 24, CacheOptions(poll_interval=0.02, hedge_after=None))
    data = PAYLOAD[:391]
    digest = hashlib.sha256(data).hexdigest()

    def download() -> None:
        with cache.open(store, "small.bin", key=f"fp/small@{digest[:12]}", num_bytes=len(data)):
            pass

    with open(os.path.join(server.root, "bucket", "ds", "small.bin"), "wb") as fh:
        fh.write(data)
    done, errors = run_in_thread(download)
    sent = server.tick_until(done, most=len(data) * 2)
    assert done.wait(60) and errors, f"the download took all {sent} bytes without an error"
    assert isinstance(errors[0], StorageError) and "deadline" in str(errors[0]), repr(errors[0])
    assert sent < len(data)


@SPLICED
def test_a_chunked_206_is_read_to_its_end_and_its_connection_reused_k26(
    serve: Callable[..., MisbehavingS3Server], spliced: bool
) -> None:
    """Before K26 the terminating chunk stayed unread, the connection went back to the pool,
    and the next read on it failed, permanently (``ResponseNotReady``)."""
    server = serve("chunked")
    store = open_store(URL, server.storage_options(), retry=QUICK)
    for start in (5, 200_000, 0):
        assert collect(store, "blob.bin", start, start + 150_001, spliced) == PAYLOAD[start : start + 150_001]
    assert len(gets(server)) == 3
    assert server.num_connections == 1  # each answer read to its end, then pooled


@SPLICED
def test_a_redirect_to_the_same_origin_is_followed_with_its_range_k27(
    serve: Callable[..., MisbehavingS3Server], spliced: bool
) -> None:
    server = serve("redirect-here")
    store = open_store(URL, signed_options(server), retry=QUICK)
    assert collect(store, "blob.bin", 10, 300_010, spliced) == PAYLOAD[10:300_010]
    assert gets(server) == ["bytes=10-300009"] * 2


def test_an_unsigned_request_follows_a_redirect_to_another_host_k27(
    serve: Callable[..., MisbehavingS3Server], root: str
) -> None:
    with KeepAliveS3Server(root) as target:
        server = serve("redirect-away", redirect_to=target.endpoint_url)
        store = open_store(URL, server.storage_options(), retry=QUICK)  # anon: nothing signed
        assert collect(store, "blob.bin", 3, 40_003) == PAYLOAD[3:40_003]
        assert gets(server) == gets(target) == ["bytes=3-40002"]


@pytest.mark.parametrize(("status", "bare"), [(307, False), (307, True), (301, False)])
def test_a_presigned_request_redirected_elsewhere_says_which_region_to_set_k27(
    serve: Callable[..., MisbehavingS3Server], root: str, status: int, bare: bool
) -> None:
    """S3's answer for a new bucket, or one in another region: a permanent error that names
    the region and what to set, not "HTTP 307 307" retried."""
    with KeepAliveS3Server(root) as target:
        server = serve("redirect-away", redirect_to=target.endpoint_url, status=status, bare=bare)
        store = open_store(URL, signed_options(server), retry=QUICK)
        with pytest.raises(StorageError) as caught:
            collect(store, "blob.bin", 0, 100)
        message = str(caught.value)
        assert not isinstance(caught.value, TransientStorageError), message
        assert f"{URL}/blob.bin" in message and f"HTTP {status}" in message, message
        assert "eu-west-3" in message and "region_name" in message and "endpoint_url" in message, message
        assert "Signature" not in message and f"{status} {status}" not in message
        assert len(gets(server)) == 1 and gets(target) == []


def test_a_redirect_loop_ends_after_a_few_redirects_k27(serve: Callable[..., MisbehavingS3Server]) -> None:
    server = serve("redirect-loop")
    store = open_store(URL, server.storage_options(), retry=QUICK)
    with pytest.raises(StorageError, match="redirects") as caught:
        collect(store, "blob.bin", 0, 100)
    assert not isinstance(caught.value, TransientStorageError)
    assert 2 < len(gets(server)) <= 10  # followed a few times (MAX_REDIRECTS), then given up


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "s3fs"])
@pytest.mark.parametrize(("start", "end"), [(10, 20), (500, 999)])
def test_a_server_that_ignores_range_is_one_permanent_error_on_either_path_k27(
    serve: Callable[..., MisbehavingS3Server], direct: bool, start: int, end: int
) -> None:
    """Not a "short read" of a long body retried for seconds, and "bytes 500-998" is no 500."""
    server = serve("ignore-range")
    store: Store = open_store(URL, server.storage_options(), retry=QUICK, direct_ranges=direct)
    with pytest.raises(StorageError, match="ignores Range") as caught:
        store.stream_range("blob.bin", start, end, lambda piece, offset: None)
    assert not isinstance(caught.value, TransientStorageError)
    assert f"{URL}/blob.bin" in str(caught.value)
    assert len(gets(server)) == 1
