"""Sockets whose every receive honours the total deadline of the request they carry
(specs/cache.md, K25).

A socket read timeout bounds one ``recv``, not a request: a server (or a middlebox) that sends
one byte every ``read_timeout - 1`` seconds keeps a request alive for as long as it likes. So
each connection of http_ranges.py is made of a socket class here: the request ``arm``s it
with its deadline, and before every ``recv_into`` — the head's lines, chunk framing, the body,
plain or TLS — the socket's timeout is set to the read timeout or the time left before the
deadline, whichever is less; past the deadline the receive raises ``RequestDeadlineExceeded``
(a ``TimeoutError``: transient, classify.py). Splicing reads the socket's descriptor without
``recv`` and checks the same deadline itself (body_splice.py, ``check_deadline``). Changing the
timeout costs a system call, so it happens only within the last ``read_timeout`` before the
deadline.

Thread-safety: a socket carries one request at a time (its connection's), as http.client does.
"""

from __future__ import annotations

import socket
import ssl
import time
from typing import Any


class RequestDeadlineExceeded(TimeoutError):
    """A request was still unanswered (head or body) at its total deadline."""


def arm(sock: socket.socket, deadline: float | None, read_timeout: float) -> None:
    """Bound every later receive on ``sock`` by ``deadline`` (``time.monotonic()`` seconds;
    None: by ``read_timeout`` alone)."""
    sock.deadline = deadline  # type: ignore[attr-defined]
    sock.read_timeout = read_timeout  # type: ignore[attr-defined]
    if sock.gettimeout() != read_timeout:
        sock.settimeout(read_timeout)


def check_deadline(deadline: float | None) -> float | None:
    """Seconds left before ``deadline`` (None: no deadline); ``RequestDeadlineExceeded`` if
    none are."""
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise RequestDeadlineExceeded("the request's deadline passed")
    return left


def _bound(sock: Any) -> bool:
    """Set ``sock``'s timeout for one receive; True when the deadline, not the read timeout,
    is what bounds it."""
    left = check_deadline(sock.deadline)
    if left is None or left >= sock.read_timeout:
        return False
    sock.settimeout(left)
    return True


def _receive(sock: Any, receive: Any, *args: Any) -> int:
    """One receive, ``receive(*args)``, under ``sock``'s request deadline: a timeout the
    deadline cut short is ``RequestDeadlineExceeded``; a plain read timeout stays a
    ``TimeoutError``. A plain call, not a context manager: it runs once per TLS record."""
    cut = sock.deadline is not None and _bound(sock)
    try:
        got: int = receive(*args)
        return got
    except TimeoutError:
        if cut:
            raise RequestDeadlineExceeded("the request's deadline passed") from None
        raise


class _TimedSocket(socket.socket):
    """A plain TCP socket whose receives honour its request's deadline."""

    deadline: float | None = None
    read_timeout: float = 60.0

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        return _receive(self, super().recv_into, buffer, nbytes, flags)


class TimedSSLSocket(ssl.SSLSocket):
    """A TLS socket whose receives honour its request's deadline (``SSLContext.sslsocket_class``)."""

    deadline: float | None = None
    read_timeout: float = 60.0

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        return _receive(self, super().recv_into, buffer, nbytes, flags)


def create_connection(address: tuple[str, int], timeout: Any = None,
                      source_address: tuple[str, int] | None = None) -> socket.socket:
    """``socket.create_connection`` (as http.client calls it), made of a ``_TimedSocket``."""
    raw = socket.create_connection(address, timeout, source_address)
    try:
        sock = _TimedSocket(raw.family, raw.type, raw.proto, raw.fileno())
    except BaseException:
        raw.close()
        raise
    raw.detach()
    sock.settimeout(raw.gettimeout())
    return sock
