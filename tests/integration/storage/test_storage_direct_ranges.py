"""K23: the bodies of S3 range reads go over plain keep-alive HTTP connections, presigned by
s3fs, streamed piece by piece (read into a buffer, or spliced through a pipe when the caller
takes pipes); errors are those of the s3fs path; connections are pooled per process and never
shared with a forked child. Against moto (through the fault proxy), the keep-alive S3 server
and a server that ignores ``Range``."""

from __future__ import annotations

import functools
import http.server
import multiprocessing
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from shardkit.errors import NotFoundError, StorageError, ThrottledError, TransientStorageError
from shardkit.storage import Store, open_store
from shardkit.storage.http_ranges import PIECE_BYTES
from shardkit.storage.retry import NO_RETRY
from tests.helpers.fault_proxy import Fault, FaultProxy
from tests.helpers.keepalive_s3 import KeepAliveS3Server
from tests.helpers.s3 import storage_options

pytestmark = [
    pytest.mark.s3,
    pytest.mark.filterwarnings("ignore:datetime.datetime.utcnow:DeprecationWarning:botocore"),
]

PAYLOAD = os.urandom(3 * 1024 * 1024 + 17)  # more than one piece, not a whole number of them


def collect(store: Store, name: str, start: int, end: int, spliced: bool = False) -> bytes:
    """``stream_range`` into a buffer; every piece must land right after the one before.
    ``spliced``: the caller takes pipes too (as the cache does), each drained exactly."""
    out = bytearray()

    def write(piece: memoryview, offset: int) -> None:
        assert offset == start + len(out)
        out.extend(piece)

    def put(pipe_fd: int, count: int, offset: int) -> None:
        assert offset == start + len(out) and 0 < count <= PIECE_BYTES
        while count:
            data = os.read(pipe_fd, count)
            out.extend(data)
            count -= len(data)

    store.stream_range(name, start, end, write, retry=NO_RETRY, put=put if spliced else None)
    return bytes(out)


SPLICED = pytest.mark.parametrize("spliced", [False, True], ids=["buffered", "spliced"])


@pytest.fixture
def keepalive(tmp_path: Any) -> Iterator[KeepAliveS3Server]:
    (tmp_path / "bucket" / "ds").mkdir(parents=True)
    (tmp_path / "bucket" / "ds" / "blob.bin").write_bytes(PAYLOAD)
    with KeepAliveS3Server(str(tmp_path)) as running:
        yield running


@pytest.fixture
def moto_object(s3_bucket: tuple[str, dict[str, Any]]) -> str:
    open_store(*s3_bucket).write_atomic("ds/blob.bin", PAYLOAD)
    return s3_bucket[0]


@SPLICED
@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize(("start", "end"), [(0, len(PAYLOAD)), (5, 2 * 1024 * 1024 + 3), (7, 8)])
def test_stream_range_yields_exactly_the_range_direct_or_through_s3fs_k23(
    keepalive: KeepAliveS3Server, direct: bool, start: int, end: int, spliced: bool
) -> None:
    store = open_store("s3://bucket/ds", keepalive.storage_options(), direct_ranges=direct)
    assert collect(store, "blob.bin", start, end, spliced) == PAYLOAD[start:end]
    gets = [r for r in keepalive.records() if r.method == "GET"]
    assert [r.range for r in gets] == [f"bytes={start}-{end - 1}"]


def test_a_direct_read_hands_over_pieces_no_larger_than_a_cache_sized_buffer_k23(
    keepalive: KeepAliveS3Server,
) -> None:
    """Each piece is ``pwrite``n while still in the CPU cache (K23): never a whole part."""
    store = open_store("s3://bucket/ds", keepalive.storage_options())
    sizes: list[int] = []
    store.stream_range("blob.bin", 0, len(PAYLOAD), lambda piece, _: sizes.append(len(piece)), retry=NO_RETRY)
    assert sum(sizes) == len(PAYLOAD)
    assert max(sizes) <= PIECE_BYTES <= 256 * 1024
    assert len(sizes) >= len(PAYLOAD) // PIECE_BYTES


@SPLICED
def test_direct_reads_reuse_their_keep_alive_connection_k23(keepalive: KeepAliveS3Server, spliced: bool) -> None:
    store = open_store("s3://bucket/ds", keepalive.storage_options())
    for start in range(0, 3 * 1024 * 1024, 1024 * 1024):  # spliced: past what the head's reader holds
        assert collect(store, "blob.bin", start, start + 300_000, spliced) == PAYLOAD[start : start + 300_000]
    assert len({r.connection_id for r in keepalive.records() if r.method == "GET"}) == 1


FAULTS = {
    "503 SlowDown": (Fault("status", status=503, requests=frozenset({1})), ThrottledError),
    "429": (Fault("status", status=429, requests=frozenset({1})), ThrottledError),
    "500": (Fault("status", status=500, requests=frozenset({1})), TransientStorageError),
    "404": (Fault("status", status=404, requests=frozenset({1})), NotFoundError),
    "403": (Fault("status", status=403, requests=frozenset({1})), StorageError),
    "truncated body": (Fault("truncate", requests=frozenset({1})), TransientStorageError),
}


@SPLICED
@pytest.mark.parametrize("fault", FAULTS)
def test_a_direct_read_fails_as_the_s3fs_path_does_k23(
    s3_bucket: tuple[str, dict[str, Any]], moto_object: str, fault: str, tmp_path: Any, spliced: bool
) -> None:
    """The same fault, once per path, on a fresh proxy each: the same error class (and
    throttling is throttling), the message names the object, never the presigned URL. (A
    connection reset is not compared: s3fs retries it inside; the next test covers it.)"""
    rule, expected = FAULTS[fault]
    raised: list[BaseException] = []
    for direct in (True, False):
        proxy = FaultProxy(s3_bucket[1]["client_kwargs"]["endpoint_url"]).start()
        try:
            proxy.add(Fault(rule.kind, status=rule.status, requests=rule.requests, key="blob.bin"))
            store = open_store(moto_object, storage_options(proxy.endpoint_url), direct_ranges=direct)
            with pytest.raises(StorageError) as caught:
                collect(store, "ds/blob.bin", 0, len(PAYLOAD), spliced)
            raised.append(caught.value)
        finally:
            proxy.stop()
    for error in raised:
        assert isinstance(error, expected), (fault, type(error), error)
        assert isinstance(error, TransientStorageError) == issubclass(expected, TransientStorageError)
        assert f"{moto_object}/ds/blob.bin" in str(error) and "Signature" not in str(error)


@SPLICED
def test_a_pooled_connection_reset_is_retried_once_on_a_new_one_k23(
    s3_bucket: tuple[str, dict[str, Any]], moto_object: str, fault_proxy: FaultProxy, spliced: bool
) -> None:
    """A keep-alive connection the server dropped while it sat idle costs no retry (the second
    GET, on the pooled connection, is reset); a reset on a new connection is an error."""
    fault_proxy.add(Fault("reset", requests=frozenset({2, 3}), key="blob.bin"))
    store = open_store(moto_object, storage_options(fault_proxy.endpoint_url))
    assert collect(store, "ds/blob.bin", 0, 100, spliced) == PAYLOAD[:100]  # GET 1, pooled after
    with pytest.raises(TransientStorageError):  # GET 2 on the pooled one, GET 3 on a new one
        collect(store, "ds/blob.bin", 100, 200, spliced)
    assert collect(store, "ds/blob.bin", 100, 200, spliced) == PAYLOAD[100:200]  # GET 4
    assert [r.fault for r in fault_proxy.records("GET", "blob.bin")] == [None, "reset", "reset", None]


class _IgnoresRange(http.server.SimpleHTTPRequestHandler):
    """The standard library's file server: answers every GET with the whole file (200)."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        pass


def test_a_server_that_ignores_range_is_an_error_not_wrong_bytes_k23(tmp_path: Any) -> None:
    (tmp_path / "bucket" / "ds").mkdir(parents=True)
    (tmp_path / "bucket" / "ds" / "blob.bin").write_bytes(PAYLOAD)
    handler = functools.partial(_IgnoresRange, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        store = open_store("s3://bucket/ds", {"anon": True, "client_kwargs": {"endpoint_url": endpoint}})
        with pytest.raises(StorageError, match="ignores Range") as caught:
            collect(store, "blob.bin", 10, 20)
        assert not isinstance(caught.value, TransientStorageError)
        assert collect(store, "blob.bin", 0, len(PAYLOAD)) == PAYLOAD  # the range is the object
    finally:
        server.shutdown()
        server.server_close()


class _ChunkedRanges(http.server.BaseHTTPRequestHandler):
    """Answers a ranged GET with 206 and the range in ``Transfer-Encoding: chunked`` framing."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        first, last = (int(x) for x in self.headers["Range"].removeprefix("bytes=").split("-"))
        body = PAYLOAD[first : last + 1]
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {first}-{last}/{len(PAYLOAD)}")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for at in range(0, len(body), 100_000):
            chunk = body[at : at + 100_000]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        pass


@SPLICED
def test_a_chunked_body_is_unframed_never_spliced_as_it_is_k23(spliced: bool) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ChunkedRanges)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        store = open_store("s3://bucket/ds", {"anon": True, "client_kwargs": {"endpoint_url": endpoint}})
        assert collect(store, "blob.bin", 5, 700_005, spliced) == PAYLOAD[5:700_005]
    finally:
        server.shutdown()
        server.server_close()


def _read_in_child(store: Store) -> None:
    os._exit(0 if collect(store, "blob.bin", 0, 1000) == PAYLOAD[:1000] else 3)


def test_a_forked_child_opens_its_own_connections_and_the_parents_stay_usable_k23(
    keepalive: KeepAliveS3Server,
) -> None:
    store = open_store("s3://bucket/ds", keepalive.storage_options())
    assert collect(store, "blob.bin", 0, 10) == PAYLOAD[:10]
    parents = {r.connection_id for r in keepalive.records()}
    child = multiprocessing.get_context("fork").Process(target=_read_in_child, args=(store,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    childs = {r.connection_id for r in keepalive.records()} - parents
    assert childs  # the child's GET came on a connection of its own
    before = len(keepalive.records())
    assert collect(store, "blob.bin", 10, 20) == PAYLOAD[10:20]
    assert {r.connection_id for r in keepalive.records()[before:]} <= parents  # pooled, intact
