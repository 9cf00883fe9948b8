"""The keep-alive S3 server (keepalive_s3.py) misbehaving on ranged object GETs, as some
servers, proxies and networks do (specs/cache.md, K25–K27). ``mode``:

- ``"trickle-body"``: the head at once (with ``Content-Length``), the body one byte per tick;
- ``"trickle-head"``: the whole answer, status line and headers included, one byte per tick;
- ``"chunked"``: 206 with the range in ``Transfer-Encoding: chunked`` framing;
- ``"ignore-range"``: 200 with the whole object, whatever the ``Range``;
- ``"redirect-here"``: the first GET of each key answers 307 to the same URL with
  ``redirected=1`` added to its query, which is served normally;
- ``"redirect-loop"``: 307 to the URL itself, every time;
- ``"redirect-away"``: 307 (``status``) to the same path on ``redirect_to``, with S3's
  ``x-amz-bucket-region: <region>`` header and a ``TemporaryRedirect`` XML body (none if
  ``bare``).

Ticks come from the test: ``tick_until(done, most)`` lets one byte go, then waits briefly on
``done`` (an event the test sets when the request under test has ended), and so on: a client
that honours a deadline ends before the trickle does, whatever the machine's load, and the
test compares byte counts, never times. Every answer is recorded as the base server records.
"""

from __future__ import annotations

import ssl
import threading
import urllib.parse
from typing import Any

from tests.helpers.keepalive_s3 import KeepAliveS3Server, Request, _Handler

#: How long ``tick_until`` waits on ``done`` between bytes: what makes a trickle slow.
TICK_WAIT_S = 0.05


class MisbehavingS3Server(KeepAliveS3Server):
    """``KeepAliveS3Server`` whose ranged object GETs answer as ``mode`` says."""

    def __init__(self, root: str, mode: str, *, redirect_to: str = "", status: int = 307,
                 region: str = "eu-west-3", tls: tuple[str, str] | None = None, bare: bool = False) -> None:
        self.mode, self.redirect_to, self.status, self.region = mode, redirect_to, status, region
        self.bare = bare  # redirects without S3's XML body
        self.ticks = threading.Semaphore(0)
        self.trickled = 0  # bytes let go by ticks so far
        self._stopping = threading.Event()
        super().__init__(root)
        if tls is not None:  # (certificate, key) paths: serve https
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            self.endpoint_url = self.endpoint_url.replace("http://", "https://")

    def _handler_base(self) -> type[_Handler]:
        return _MisbehavingHandler

    def stop(self) -> None:
        self._stopping.set()  # a handler waiting for a tick gives up
        super().stop()

    def tick_until(self, done: threading.Event, most: int) -> int:
        """Let bytes of a trickle go one at a time until ``done`` is set or ``most`` have
        gone; the number that went."""
        for _ in range(most):
            if done.is_set():
                break
            self.ticks.release()
            done.wait(TICK_WAIT_S)
        return self.trickled

    def take_tick(self) -> bool:
        """Wait for the test's next tick; False once the server is stopping."""
        while not self.ticks.acquire(timeout=0.1):
            if self._stopping.is_set():
                return False
        self.trickled += 1
        return True


class _MisbehavingHandler(_Handler):
    server_state: MisbehavingS3Server

    def _object(self, path: str, key: str, head: bool) -> None:
        wanted = self.headers.get("Range")
        query = urllib.parse.urlsplit(self.path).query
        if head or not wanted or (self.server_state.mode == "redirect-here" and "redirected=1" in query):
            return super()._object(path, key, head)
        first, last = (int(x) for x in wanted.removeprefix("bytes=").split("-"))
        with open(path, "rb") as file:
            whole = file.read()
        self.server_state._record(Request(self.command, key, wanted, 0, self.connection_id))
        answer = getattr(self, "_" + self.server_state.mode.replace("-", "_"))
        answer(whole, first, last)

    def _head(self, status: int, headers: dict[str, Any]) -> bytes:
        lines = [f"HTTP/1.1 {status} {self.responses[status][0]}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _ranged_head(self, whole: bytes, first: int, last: int) -> bytes:
        return self._head(206, {"Content-Range": f"bytes {first}-{last}/{len(whole)}",
                                "Content-Length": last + 1 - first, "Content-Type": "application/octet-stream"})

    def _trickle(self, data: bytes) -> None:
        for at in range(len(data)):
            if not self.server_state.take_tick():
                return
            self.wfile.write(data[at : at + 1])

    def _trickle_body(self, whole: bytes, first: int, last: int) -> None:
        self.wfile.write(self._ranged_head(whole, first, last))
        self._trickle(whole[first : last + 1])

    def _trickle_head(self, whole: bytes, first: int, last: int) -> None:
        self._trickle(self._ranged_head(whole, first, last) + whole[first : last + 1])

    def _chunked(self, whole: bytes, first: int, last: int) -> None:
        self.wfile.write(self._head(206, {"Content-Range": f"bytes {first}-{last}/{len(whole)}",
                                          "Transfer-Encoding": "chunked"}))
        body = whole[first : last + 1]
        for at in range(0, len(body), 100_000):
            chunk = body[at : at + 100_000]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")

    def _ignore_range(self, whole: bytes, first: int, last: int) -> None:
        self.wfile.write(self._head(200, {"Content-Length": len(whole)}) + whole)

    def _redirect(self, location: str, headers: dict[str, Any]) -> None:
        body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>TemporaryRedirect</Code>'
                b"<Message>Please re-send this request to the specified temporary endpoint.</Message></Error>")
        status = self.server_state.status
        body = b"" if self.server_state.bare else body
        self.wfile.write(self._head(status, {"Location": location, "Content-Type": "application/xml",
                                             "Content-Length": len(body), **headers}) + body)

    def _redirect_here(self, whole: bytes, first: int, last: int) -> None:
        self._redirect(self.path + ("&" if "?" in self.path else "?") + "redirected=1", {})

    def _redirect_loop(self, whole: bytes, first: int, last: int) -> None:
        self._redirect(self.path, {})

    def _redirect_away(self, whole: bytes, first: int, last: int) -> None:
        self._redirect(self.server_state.redirect_to + self.path,
                       {"x-amz-bucket-region": self.server_state.region})
