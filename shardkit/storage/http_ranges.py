"""Ranged GETs of S3 objects over plain keep-alive HTTP connections, body streamed into the
caller's writes (specs/cache.md, K23).

Why not s3fs for the bytes: s3fs reads every response body on its one event-loop thread
(aiohttp), which parses and copies each byte holding the GIL; at loopback or LAN speed that
thread is busy all the time and caps a node's downloads well below the link. Here each
request runs on the caller's own thread: the body is read with ``recv_into`` into a reused
buffer (the GIL is released while the kernel copies) and handed to ``write(piece, offset)``
(the cache ``pwrite``s it) — one copy in, one copy out, as curl does. A caller that can take
bytes from a pipe (``put``, the cache) gets plain-HTTP bodies spliced instead: socket → pipe →
file, one copy, none in user space (body_splice.py).

Nothing about authentication is re-implemented: the caller passes a URL presigned by s3fs's
own botocore client (``Store`` does), so credentials, region, signature version, addressing
style and endpoint are exactly s3fs's. ``Range`` is an unsigned header, which S3 accepts.

Errors: a non-2xx answer raises ``HttpStatusError`` carrying the status and the S3 error code
in the shape classify.py reads from botocore (so 503/429/SlowDown are throttling, 5xx
transient, 404 not found, 403 denied); socket errors, timeouts and truncated bodies are raised
as they come (classify.py calls them transient). Messages never contain the presigned URL.
A reused keep-alive connection that the server closed while it sat idle is retried once on a
new one before anything else is tried, as any HTTP client does.

Connections are pooled per process by (scheme, host, port). A forked child (a DataLoader
worker) never uses its parent's: after ``fork`` it keeps them referenced and never touches
them, and opens its own (K17). Thread-safety: every function may be called from any thread.
"""

from __future__ import annotations

import http.client
import os
import re
import ssl
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from shardkit.storage.body_splice import Put, can_splice, splice_body

#: Bytes read from the socket per piece handed to ``write``: small enough that the piece is
#: still in the core's L2 cache when ``pwrite`` copies it into the page cache, with 16
#: download threads taking turns on a core. Measured (benchmarks/S3.md, CPU seconds per GB on
#: loopback, 16 connections): 128 KiB pieces cost half the CPU of 1 MiB ones, where the
#: ``pwrite`` copy read its source back from memory and took 4-8x the CPU of the socket copy;
#: 64 KiB ones cost more Python per byte than they save. Whole 8 MiB parts were slower still.
PIECE_BYTES = 128 * 1024
_ERROR_BODY_LIMIT = 64 * 1024
_MAX_IDLE = 256  # idle connections kept per (scheme, host, port)
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)

Write = Callable[[memoryview, int], None]


class HttpStatusError(Exception):
    """A non-2xx answer; ``response`` has the keys classify.py reads from botocore errors."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"HTTP {status} {code}: {message}" if message else f"HTTP {status} {code}")
        self.response = {"Error": {"Code": code, "Message": message},
                         "ResponseMetadata": {"HTTPStatusCode": status}}


class RangeNotHonoured(Exception):
    """The server answered a ranged GET with other bytes than those asked for."""


@dataclass(frozen=True)
class Endpoint:
    """Where a presigned URL points, and how to verify it (``verify``: as botocore's
    ``verify``: True, False, or a CA bundle path)."""

    scheme: str
    host: str
    port: int
    verify: bool | str = True


def proxy_applies(url: str, configured: object = None) -> bool:
    """Whether requests to ``url`` would go through an HTTP proxy (from ``configured``, s3fs's
    ``config_kwargs["proxies"]``, or the environment): those stay with s3fs."""
    if configured:
        return True
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    return parts.scheme in proxies and not urllib.request.proxy_bypass(parts.hostname or "")


class _Pool:
    """Idle connections of this process by endpoint; a forked child starts empty (K17)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: dict[Endpoint, list[http.client.HTTPConnection]] = {}
        self.inherited: list[http.client.HTTPConnection] = []  # never used, never closed
        self.contexts: dict[bool | str, ssl.SSLContext] = {}

    def after_fork_in_child(self) -> None:
        self.lock = threading.Lock()
        for connections in self.idle.values():
            self.inherited.extend(connections)
        self.idle = {}

    def take(self, endpoint: Endpoint) -> http.client.HTTPConnection | None:
        with self.lock:
            connections = self.idle.get(endpoint)
            return connections.pop() if connections else None

    def give_back(self, endpoint: Endpoint, conn: http.client.HTTPConnection) -> None:
        with self.lock:
            connections = self.idle.setdefault(endpoint, [])
            if len(connections) < _MAX_IDLE:
                connections.append(conn)
                return
        conn.close()

    def context(self, verify: bool | str) -> ssl.SSLContext:
        with self.lock:
            if verify not in self.contexts:
                self.contexts[verify] = _ssl_context(verify)
            return self.contexts[verify]


_POOL = _Pool()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_POOL.after_fork_in_child)


def _ssl_context(verify: bool | str) -> ssl.SSLContext:
    """As botocore verifies: ``False`` not at all; a path: that CA bundle; else
    ``$AWS_CA_BUNDLE``, else certifi's bundle (botocore's default), else the system's."""
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    cafile = verify if isinstance(verify, str) else os.environ.get("AWS_CA_BUNDLE")
    if cafile is None:
        try:
            import certifi

            cafile = certifi.where()
        except ImportError:
            cafile = None
    return ssl.create_default_context(cafile=cafile)


def stream_range(url: str, start: int, end: int, write: Write, *, verify: bool | str = True,
                 connect_timeout: float = 10.0, read_timeout: float = 60.0, put: Put | None = None) -> None:
    """GET bytes ``[start, end)`` of presigned ``url``; each piece, in order, goes to
    ``write(piece, offset)`` (``piece`` is valid only during the call) or, given ``put``, on a
    plain-HTTP connection on Linux, most of them to ``put(pipe_fd, count, offset)``, which must
    take exactly ``count`` bytes out of the pipe (body_splice.py). An exception from either
    ends the request. A failure may come after some pieces were written."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: scheme {parts.scheme!r}")
    default_port = 443 if parts.scheme == "https" else 80
    endpoint = Endpoint(parts.scheme, parts.hostname, parts.port or default_port,
                        verify if parts.scheme == "https" else True)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    headers = {"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"}
    conn, response = _send(endpoint, target, headers, connect_timeout, read_timeout)
    try:
        _check(response, start, end)
        sock = conn.sock
        framed = response.chunked or response.length != end - start  # only a plain body is spliced
        if put is not None and sock is not None and not framed and can_splice(sock):
            splice_body(response, sock, start, end, write, put, PIECE_BYTES, read_timeout)
        else:
            _drain(response, start, end, write)
    except BaseException:
        response.close()  # its file holds the socket open past conn.close()
        conn.close()  # mid-body or unknown state: never reused
        raise
    if response.will_close:
        response.close()
        conn.close()
    else:
        _POOL.give_back(endpoint, conn)


def _send(endpoint: Endpoint, target: str, headers: dict[str, str], connect_timeout: float,
          read_timeout: float) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """The response's head, on a pooled connection or, if that one turns out closed by the
    server while idle, on a new one."""
    pooled = _POOL.take(endpoint)
    if pooled is not None:
        try:
            pooled.request("GET", target, headers=headers)
            return pooled, pooled.getresponse()
        except _STALE:
            pooled.close()  # closed by the server while idle: once more, on a new connection
        except BaseException:
            pooled.close()
            raise
    conn = _connect(endpoint, connect_timeout, read_timeout)
    try:
        conn.request("GET", target, headers=headers)
        return conn, conn.getresponse()
    except BaseException:
        conn.close()
        raise


def _connect(endpoint: Endpoint, connect_timeout: float, read_timeout: float) -> http.client.HTTPConnection:
    conn: http.client.HTTPConnection
    if endpoint.scheme == "https":
        conn = http.client.HTTPSConnection(endpoint.host, endpoint.port, timeout=connect_timeout,
                                           context=_POOL.context(endpoint.verify))
    else:
        conn = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=connect_timeout)
    conn.connect()
    if conn.sock is not None:
        conn.sock.settimeout(read_timeout)  # every later send and receive
    return conn


def _check(response: http.client.HTTPResponse, start: int, end: int) -> None:
    """Raise unless ``response`` carries exactly bytes ``[start, end)``."""
    status = response.status
    if status == 206:
        found = _CONTENT_RANGE.fullmatch(response.getheader("Content-Range", "").strip())
        if found is None or (int(found[1]), int(found[2])) != (start, end - 1):
            raise RangeNotHonoured(f"asked for bytes {start}-{end - 1}, the answer has "
                                   f"Content-Range {response.getheader('Content-Range')!r}")
    elif status == 200:
        if start != 0 or response.length != end:  # the Range was ignored: the whole object
            raise RangeNotHonoured(f"asked for bytes {start}-{end - 1}, the server sent the whole "
                                   f"object ({response.length} bytes): it ignores Range")
    else:
        body = response.read(_ERROR_BODY_LIMIT).decode("utf-8", "replace")
        code = re.search(r"<Code>([^<]*)</Code>", body)
        message = re.search(r"<Message>([^<]*)</Message>", body)
        raise HttpStatusError(status, code[1] if code else str(status), message[1] if message else "")
    if response.length is not None and response.length != end - start:
        raise RangeNotHonoured(f"asked for {end - start} bytes, Content-Length is {response.length}")


def _drain(response: http.client.HTTPResponse, start: int, end: int, write: Write) -> None:
    view = memoryview(bytearray(min(PIECE_BYTES, end - start)))
    offset = start
    while offset < end:
        got = response.readinto(view[: min(len(view), end - offset)])
        if not got:
            raise http.client.IncompleteRead(b"", end - offset)
        write(view[:got], offset)
        offset += got
