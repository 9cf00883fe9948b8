"""A plain-HTTP response body moved socket → pipe → file with ``splice(2)``: the bytes never
pass through user space (specs/cache.md, K23).

Why: read into a buffer and ``pwrite``n, every byte is copied twice by the CPU (socket to
buffer, buffer to page cache), and with many download threads taking turns on a core the
buffer is often out of the cache by the time ``pwrite`` copies it. ``splice`` from a TCP
socket into a pipe moves references to the received pages, not bytes; ``splice`` from the pipe
into the file copies them once into the page cache. Measured on loopback with 16 connections
(benchmarks/S3.md): about half the CPU per GB of the buffered path.

Only for plain HTTP (a TLS socket's bytes must be decrypted in user space) on Linux
(``os.splice``); anything else reads into a buffer (http_ranges.py). ``put(pipe_fd, count,
offset)`` must move exactly ``count`` bytes out of ``pipe_fd`` to ``offset`` (the cache
splices them into its file, ``splice_to_file``); an exception from it ends the request and the
pipe, with whatever it still held, is closed. The pipe lives for one request.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import http.client
import math
import os
import select
import socket
import ssl
from collections.abc import Callable

from shardkit.storage.http_deadline import RequestDeadlineExceeded, check_deadline

#: ``put(pipe_fd, count, offset)``: take exactly ``count`` bytes out of ``pipe_fd`` into place.
Put = Callable[[int, int, int], None]
Write = Callable[[memoryview, int], None]

#: Errors of a ``splice`` into a file whose filesystem does not support it: copy instead.
_NO_SPLICE = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)


def can_splice(sock: socket.socket) -> bool:
    """Whether a body on ``sock`` can be spliced: Linux, and not TLS."""
    return hasattr(os, "splice") and not isinstance(sock, ssl.SSLSocket)


def splice_body(response: http.client.HTTPResponse, sock: socket.socket, start: int, end: int,
                write: Write, put: Put, piece_bytes: int, read_timeout: float | None,
                deadline: float | None = None) -> None:
    """Bytes ``[start, end)`` of ``response``'s body, which the caller has checked carries
    exactly those: what the head's reader already buffered goes to ``write``, the rest to
    ``put`` in pieces of at most ``piece_bytes``; then ``response`` is closed (its connection
    may carry the next request). No wait for the socket outlasts ``read_timeout``, and none
    ends past ``deadline`` (``time.monotonic()`` seconds): ``RequestDeadlineExceeded`` (K25)."""
    offset = start
    held = response.fp.peek(1)[: end - offset]  # the head's reader may hold the body's start
    if held:
        write(memoryview(held), offset)
        response.fp.read1(len(held))
        offset += len(held)
    pipe_out, pipe_in = os.pipe()
    try:
        with contextlib.suppress(OSError, AttributeError):  # else the default 64 KiB pipe
            fcntl.fcntl(pipe_in, fcntl.F_SETPIPE_SZ, piece_bytes)
        fd = sock.fileno()
        while offset < end:
            check_deadline(deadline)  # a trickle that never makes us wait ends there too
            try:
                got = os.splice(fd, pipe_in, min(piece_bytes, end - offset))
            except BlockingIOError:  # a socket with a timeout is non-blocking: wait as it would
                _wait_readable(fd, read_timeout, deadline)
                continue
            if not got:
                raise http.client.IncompleteRead(b"", end - offset)
            put(pipe_out, got, offset)
            offset += got
    finally:
        os.close(pipe_in)
        os.close(pipe_out)
    response.close()  # the body is consumed: only the response's reader is closed, not the socket


def splice_to_file(pipe_fd: int, fd: int, count: int, offset: int) -> None:
    """Move ``count`` bytes waiting in ``pipe_fd`` to ``offset`` of the file ``fd``; on a
    filesystem that cannot take a splice, read them and ``pwrite`` them. ``OSError`` as the
    disk raises it."""
    while count:
        try:
            moved = os.splice(pipe_fd, fd, count, offset_dst=offset)
        except OSError as exc:
            if exc.errno not in _NO_SPLICE:
                raise
            moved = _copy(pipe_fd, fd, count, offset)
        count, offset = count - moved, offset + moved


def _copy(pipe_fd: int, fd: int, count: int, offset: int) -> int:
    data = memoryview(os.read(pipe_fd, count))
    done = len(data)
    while data:
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written
    return done


def _wait_readable(fd: int, timeout: float | None, deadline: float | None) -> None:
    left = check_deadline(deadline)
    cut = left is not None and (timeout is None or left < timeout)
    wait = left if cut else timeout
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    if not poller.poll(None if wait is None else math.ceil(wait * 1000)):
        if cut:
            raise RequestDeadlineExceeded("the request's deadline passed")
        raise TimeoutError("timed out")  # as a socket's own read timeout says it
