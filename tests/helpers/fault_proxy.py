"""A small threaded HTTP proxy between s3fs and moto that counts requests and injects faults.

Point s3fs at ``proxy.endpoint_url`` instead of the moto server. The proxy records every request
(method, object key, Range header, status, body bytes sent) and, per ``Fault`` rules, answers
with a 5xx (S3 XML error body), resets the connection (TCP RST), waits before answering, sends
the body slowly, or truncates it (full Content-Length, half the body, then close). Rules fire at a ``rate`` (seeded,
reproducible) and/or on specific 1-based request numbers among the requests they match.
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "expect",
               "upgrade", "te", "trailer"}
_ERROR_CODES = {500: "InternalError", 503: "SlowDown", 403: "AccessDenied", 404: "NoSuchKey"}


@dataclass
class Fault:
    """``kind``: "status" | "reset" | "slow" | "truncate" | "latency" (``delay`` seconds before
    the response, then the whole body: a round trip). Matches ``method`` and ``key`` part."""

    kind: str
    rate: float = 0.0
    requests: frozenset[int] = frozenset()
    method: str | None = "GET"
    key: str | None = None
    status: int = 503
    delay: float = 0.05
    max_times: int | None = None
    seen: int = 0
    fired: int = 0


@dataclass
class Record:
    method: str
    key: str
    range: str | None
    status: int
    fault: str | None
    bytes_sent: int = 0
    finished: bool = False  # the handler has sent all it will send


@dataclass
class _State:
    faults: list[Fault] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    rng: random.Random = field(default_factory=lambda: random.Random(1234))
    in_flight: int = 0
    max_in_flight: int = 0  # the most requests the proxy was answering at once


class FaultProxy:
    """Forward to ``upstream`` (``http://host:port``); ``endpoint_url`` is where to connect."""

    def __init__(self, upstream: str) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.state = _State()
        handler = type("Handler", (_Handler,), {"proxy": self})
        self._server = _QuietServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True, name="fault-proxy")

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add(self, fault: Fault) -> Fault:
        with self.state.lock:
            self.state.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self.state.lock:
            self.state.faults.clear()

    def records(self, method: str | None = "GET", key: str | None = None) -> list[Record]:
        with self.state.lock:
            return [r for r in self.state.records
                    if (method is None or r.method == method) and (key is None or key in r.key)]

    @property
    def max_in_flight(self) -> int:
        """The most requests answered at once so far (concurrency, as a count, not a time)."""
        with self.state.lock:
            return self.state.max_in_flight

    def reset_max_in_flight(self) -> None:
        with self.state.lock:
            self.state.max_in_flight = self.state.in_flight

    def bytes_served(self, key: str) -> int:
        """Body bytes sent for GETs of objects whose key contains ``key`` (all responses)."""
        return sum(r.bytes_sent for r in self.records("GET", key))

    def _choose(self, method: str, key: str) -> Fault | None:
        with self.state.lock:
            for fault in self.state.faults:
                if fault.method not in (None, method) or (fault.key and fault.key not in key):
                    continue
                fault.seen += 1
                if fault.max_times is not None and fault.fired >= fault.max_times:
                    continue
                if fault.seen in fault.requests or self.state.rng.random() < fault.rate:
                    fault.fired += 1
                    return fault
        return None

    def _record(self, record: Record) -> None:
        with self.state.lock:
            self.state.records.append(record)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients hang up on slow or truncated responses on purpose


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    proxy: FaultProxy

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        pass

    def do_GET(self) -> None:
        self._handle()

    do_PUT = do_POST = do_HEAD = do_DELETE = do_GET

    def _handle(self) -> None:
        state = self.proxy.state
        with state.lock:
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            self._answer()
        finally:
            with state.lock:
                state.in_flight -= 1

    def _answer(self) -> None:
        body = self._read_body()
        key = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path.lstrip("/"))
        record = Record(self.command, key, self.headers.get("Range"), 200, None)
        fault = self.proxy._choose(self.command, key)
        record.fault = fault.kind if fault else None
        self.proxy._record(record)  # now, not at the end: a slow response may finish late
        if fault is not None and fault.kind == "status":
            record.status = fault.status
            self._send_error_status(fault.status, key)
        elif fault is not None and fault.kind == "reset":
            record.status = 0
            self._reset()
        else:
            self._forward(body, fault, record)
        record.finished = True

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send_error_status(self, status: int, key: str) -> None:
        code = _ERROR_CODES.get(status, "InternalError")
        payload = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                   f"<Message>injected by fault proxy</Message><Key>{key}</Key></Error>").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _reset(self) -> None:
        # SO_LINGER with a zero timeout makes close() send RST instead of FIN.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def _forward(self, body: bytes, fault: Fault | None, record: Record) -> None:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        upstream = http.client.HTTPConnection(*self.proxy.upstream, timeout=60)
        try:
            upstream.request(self.command, self.path, body=body or None, headers=headers)
            response = upstream.getresponse()
            payload = response.read()
        finally:
            upstream.close()
        record.status = response.status
        self.send_response(response.status)
        for name, value in response.getheaders():
            if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                self.send_header(name, value)
        length = response.getheader("Content-Length") if self.command == "HEAD" else None
        self.send_header("Content-Length", length or str(len(payload)))
        self.end_headers()
        if self.command == "HEAD":
            return
        self._send_body(payload, fault, record)

    def _send_body(self, payload: bytes, fault: Fault | None, record: Record) -> None:
        if fault is not None and fault.kind == "truncate":
            self.wfile.write(payload[: len(payload) // 2])
            record.bytes_sent = len(payload) // 2
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if fault is not None and fault.kind == "latency":
            time.sleep(fault.delay)
        step = 64 * 1024 if fault is not None and fault.kind == "slow" else len(payload) or 1
        for offset in range(0, len(payload), step):
            if fault is not None and fault.kind == "slow":
                time.sleep(fault.delay)
            self.wfile.write(payload[offset:offset + step])
            record.bytes_sent += min(step, len(payload) - offset)


@pytest.fixture
def fault_proxy(s3_server: str) -> Iterator[FaultProxy]:
    """A fresh proxy in front of the session's moto server, stopped after the test."""
    proxy = FaultProxy(s3_server).start()
    try:
        yield proxy
    finally:
        proxy.stop()
