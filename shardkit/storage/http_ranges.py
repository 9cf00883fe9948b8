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
own botocore client (``DirectS3Store`` does), so credentials, region, signature version, addressing
style and endpoint are exactly s3fs's. ``Range`` is an unsigned header, which S3 accepts.

Errors: a non-2xx answer raises ``HttpStatusError`` carrying the status and the S3 error code
in the shape classify.py reads from botocore (so 503/429/SlowDown are throttling, 5xx
transient, 404 not found, 403 denied); socket errors, timeouts and truncated bodies are raised
as they come (classify.py calls them transient); an answer that is not the range, and a
redirect that cannot be followed, are permanent (http_answers.py, K27). Messages never
contain the presigned URL. A reused keep-alive connection that the server closed while it sat
idle is retried once on a new one before anything else is tried, as any HTTP client does.

A request has a total deadline (``total_timeout``, K25): every receive on its connection, and
every wait of a splice, ends by then (http_deadline.py), so a server that trickles its answer
cannot hold a download for longer than that, whatever the read timeout.

Connections are pooled per process by (scheme, host, port), and only once the answer they
carried has been read to its very end (a chunked body's terminating chunk included): anything
else is closed, never reused (K26). A forked child (a DataLoader worker) never uses its
parent's: after ``fork`` it keeps them referenced and never touches them, and opens its own
(K17). Thread-safety: every function may be called from any thread.
"""

from __future__ import annotations

import http.client
import os
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from shardkit.storage.body_splice import Put, can_splice, splice_body
from shardkit.storage.http_answers import (
    MAX_REDIRECTS,
    RangeNotHonoured,
    RedirectRefused,
    check_answer,
    redirect_target,
)
from shardkit.storage.http_deadline import (
    RequestDeadlineExceeded,
    TimedSSLSocket,
    arm,
    check_deadline,
    create_connection,
)

#: Bytes read from the socket per piece handed to ``write``: small enough that the piece is
#: still in the core's L2 cache when ``pwrite`` copies it into the page cache, with 16
#: download threads taking turns on a core. Measured (benchmarks/S3.md, CPU seconds per GB on
#: loopback, 16 connections): 128 KiB pieces cost half the CPU of 1 MiB ones, where the
#: ``pwrite`` copy read its source back from memory and took 4-8x the CPU of the socket copy;
#: 64 KiB ones cost more Python per byte than they save. Whole 8 MiB parts were slower still.
PIECE_BYTES = 128 * 1024
_MAX_IDLE = 256  # idle connections kept per (scheme, host, port)
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)

Write = Callable[[memoryview, int], None]


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
        context.sslsocket_class = TimedSSLSocket
        return context
    cafile = verify if isinstance(verify, str) else os.environ.get("AWS_CA_BUNDLE")
    if cafile is None:
        try:
            import certifi

            cafile = certifi.where()
        except ImportError:
            cafile = None
    context = ssl.create_default_context(cafile=cafile)
    context.sslsocket_class = TimedSSLSocket  # receives that honour the request's deadline (K25)
    return context


def stream_range(url: str, start: int, end: int, write: Write, *, verify: bool | str = True,
                 connect_timeout: float = 10.0, read_timeout: float = 60.0, put: Put | None = None,
                 total_timeout: float | None = None) -> None:
    """GET bytes ``[start, end)`` of presigned ``url``; each piece, in order, goes to
    ``write(piece, offset)`` (``piece`` is valid only during the call) or, given ``put``, on a
    plain-HTTP connection on Linux, most of them to ``put(pipe_fd, count, offset)``, which must
    take exactly ``count`` bytes out of the pipe (body_splice.py). An exception from either
    ends the request. A failure may come after some pieces were written. A redirect is
    followed where that is safe (K27). ``total_timeout``: the most seconds the request may
    take, redirects, head and body together; then ``RequestDeadlineExceeded`` (K25)."""
    deadline = None if total_timeout is None else time.monotonic() + total_timeout
    sink = _Counted(write, put)
    try:
        for _ in range(MAX_REDIRECTS + 1):
            next_url = _one_request(url, start, end, sink, verify, connect_timeout, read_timeout, deadline)
            if next_url is None:
                return
            url = next_url
    except RequestDeadlineExceeded:
        raise RequestDeadlineExceeded(
            f"bytes {start}-{end - 1}: {sink.received} of {end - start} bytes had come at the request's "
            f"deadline, {total_timeout:g}s after it was sent (read timeout {read_timeout:g}s): the server "
            f"sends too slowly") from None
    raise RedirectRefused(f"bytes {start}-{end - 1}: still redirected after {MAX_REDIRECTS} redirects")


class _Counted:
    """The caller's ``write`` and ``put``, counting the bytes they took."""

    def __init__(self, write: Write, put: Put | None) -> None:
        self._write, self._put = write, put
        self.received = 0
        self.put = None if put is None else self._put_counted

    def write(self, piece: memoryview, offset: int) -> None:
        self._write(piece, offset)
        self.received += len(piece)

    def _put_counted(self, pipe_fd: int, count: int, offset: int) -> None:
        self._put(pipe_fd, count, offset)  # type: ignore[misc]
        self.received += count


def _one_request(url: str, start: int, end: int, sink: _Counted, verify: bool | str, connect_timeout: float,
                 read_timeout: float, deadline: float | None) -> str | None:
    """One GET of ``url``: its body into ``sink``, and None; or the URL a redirect points to."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: scheme {parts.scheme!r}")
    default_port = 443 if parts.scheme == "https" else 80
    endpoint = Endpoint(parts.scheme, parts.hostname, parts.port or default_port,
                        verify if parts.scheme == "https" else True)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    headers = {"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"}
    conn, response = _send(endpoint, target, headers, connect_timeout, read_timeout, deadline)
    try:
        location = check_answer(response, start, end)
        if location is not None:
            next_url = redirect_target(url, location, response)
        else:
            next_url = None
            _body(conn, response, start, end, sink, read_timeout, deadline)
    except BaseException:
        response.close()  # its file holds the socket open past conn.close()
        conn.close()  # mid-body or unknown state: never reused
        raise
    if response.isclosed() and not response.will_close:
        _POOL.give_back(endpoint, conn)  # only once its answer is read to the end (K26)
    else:
        response.close()
        conn.close()
    return next_url


def _body(conn: http.client.HTTPConnection, response: http.client.HTTPResponse, start: int, end: int,
          sink: _Counted, read_timeout: float, deadline: float | None) -> None:
    """The checked body into ``sink``, and of a chunked answer its end too (K26)."""
    sock = conn.sock
    framed = response.chunked or response.length != end - start  # only a plain body is spliced
    if sink.put is not None and sock is not None and not framed and can_splice(sock):
        splice_body(response, sock, start, end, sink.write, sink.put, PIECE_BYTES, read_timeout, deadline)
        return
    _drain(response, start, end, sink.write)
    if response.chunked and not response.isclosed() and response.read(1):
        # the terminating chunk must come next; left unread, the next request on this
        # connection would find the end of this one (``ResponseNotReady``)
        raise RangeNotHonoured(f"asked for {end - start} bytes, the chunked answer carries more")


def _send(endpoint: Endpoint, target: str, headers: dict[str, str], connect_timeout: float,
          read_timeout: float, deadline: float | None
          ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """The response's head, on a pooled connection or, if that one turns out closed by the
    server while idle, on a new one."""
    pooled = _POOL.take(endpoint)
    if pooled is not None:
        try:
            return pooled, _get(pooled, target, headers, read_timeout, deadline)
        except _STALE:
            pooled.close()  # closed by the server while idle: once more, on a new connection
        except BaseException:
            pooled.close()
            raise
    left = check_deadline(deadline)
    conn = _connect(endpoint, connect_timeout if left is None else min(connect_timeout, left), read_timeout)
    try:
        return conn, _get(conn, target, headers, read_timeout, deadline)
    except BaseException:
        conn.close()
        raise


def _get(conn: http.client.HTTPConnection, target: str, headers: dict[str, str], read_timeout: float,
          deadline: float | None) -> http.client.HTTPResponse:
    """The GET on ``conn``, its receives armed with the request's deadline (K25); its head."""
    if conn.sock is not None:
        arm(conn.sock, deadline, read_timeout)
    conn.request("GET", target, headers=headers)
    return conn.getresponse()


def _connect(endpoint: Endpoint, connect_timeout: float, read_timeout: float) -> http.client.HTTPConnection:
    conn: http.client.HTTPConnection
    if endpoint.scheme == "https":
        conn = http.client.HTTPSConnection(endpoint.host, endpoint.port, timeout=connect_timeout,
                                           context=_POOL.context(endpoint.verify))
    else:
        conn = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=connect_timeout)
    conn._create_connection = create_connection  # type: ignore[attr-defined]  # a deadline-aware socket
    conn.connect()
    if conn.sock is not None:
        conn.sock.settimeout(read_timeout)  # every later send and receive
    return conn


def _drain(response: http.client.HTTPResponse, start: int, end: int, write: Write) -> None:
    view = memoryview(bytearray(min(PIECE_BYTES, end - start)))
    offset = start
    while offset < end:
        got = response.readinto(view[: min(len(view), end - offset)])
        if not got:
            raise http.client.IncompleteRead(b"", end - offset)
        write(view[:got], offset)
        offset += got
