"""A read-only, keep-alive S3 server over a local folder, for tests and benchmarks.

``KeepAliveS3Server(root)`` serves ``root/<bucket>/<key>`` path-style on a free 127.0.0.1 port
with HTTP/1.1 persistent connections, as nginx or S3 itself would: ``HEAD`` and ``GET`` of
objects (with ``Range: bytes=a-b``), ``HEAD`` of a bucket, and ``ListObjectsV2``
(``GET /<bucket>?list-type=2&prefix=…&delimiter=…``). Every write is refused (405). No
authentication is checked (``anon=True`` or any keys work).

Unlike moto's development server it keeps every connection open between requests, so a client
that pools connections reuses them — which is what real object stores do and what the tests of
connection handling across ``fork`` need. It records each request with the id of the TCP
connection it arrived on (``records``), and ``num_connections`` counts accepted connections.
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import os
import re
import shutil
import tempfile
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar
from xml.sax.saxutils import escape

T = TypeVar("T")
_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
_XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"


@dataclass(frozen=True)
class Request:
    method: str
    key: str
    range: str | None
    status: int
    connection_id: int


class KeepAliveS3Server:
    """Serve ``root`` (a folder of bucket folders) as path-style S3 on 127.0.0.1."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self._lock = threading.Lock()
        self._records: list[Request] = []
        self._connections = 0
        handler = type("Handler", (self._handler_base(),), {"server_state": self})
        self._server = _Server(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True, name="keepalive-s3")

    def _handler_base(self) -> type[_Handler]:
        """The request handler; a subclass may answer otherwise (misbehaving_s3.py)."""
        return _Handler

    def start(self) -> KeepAliveS3Server:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> KeepAliveS3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        """s3fs options for this server (anonymous, path-style by virtue of the endpoint)."""
        return {"anon": True, "client_kwargs": {"endpoint_url": self.endpoint_url,
                                                "region_name": "us-east-1"}, **extra}

    def records(self) -> list[Request]:
        with self._lock:
            return list(self._records)

    @property
    def num_connections(self) -> int:
        with self._lock:
            return self._connections

    def _new_connection(self) -> int:
        with self._lock:
            self._connections += 1
            return self._connections

    def _record(self, request: Request) -> None:
        with self._lock:
            self._records.append(request)

    def resolve(self, bucket: str, key: str) -> str | None:
        """The file for ``bucket/key``, or None when it is missing or outside the root."""
        path = os.path.realpath(os.path.join(self.root, bucket, key))
        if not path.startswith(self.root + os.sep) or not os.path.isfile(path):
            return None
        return path

    def list_keys(self, bucket: str, prefix: str) -> Iterator[tuple[str, str]]:
        """(key, file path) of every object of ``bucket`` whose key starts with ``prefix``."""
        top = os.path.join(self.root, bucket)
        for folder, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(folder, name)
                key = os.path.relpath(path, top).replace(os.sep, "/")
                if key.startswith(prefix):
                    yield key, path


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients hang up whenever they like


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # persistent connections unless the client says close
    server_state: KeepAliveS3Server

    def setup(self) -> None:
        super().setup()
        self.connection_id = self.server_state._new_connection()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        pass

    def do_HEAD(self) -> None:
        self._dispatch(head=True)

    def do_GET(self) -> None:
        self._dispatch(head=False)

    def do_PUT(self) -> None:
        self._drain()
        self._error(405, "MethodNotAllowed", "this server is read-only")

    do_POST = do_DELETE = do_PUT

    def _drain(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)

    def _dispatch(self, head: bool) -> None:
        parts = urllib.parse.urlsplit(self.path)
        bucket, _, key = urllib.parse.unquote(parts.path.lstrip("/")).partition("/")
        query = urllib.parse.parse_qs(parts.query)
        if not key:
            if not os.path.isdir(os.path.join(self.server_state.root, bucket)):
                return self._error(404, "NoSuchBucket", bucket, head)
            if head or "list-type" not in query:
                return self._send(200, b"" if head else b"", {}, head, bucket)
            return self._list(bucket, query)
        path = self.server_state.resolve(bucket, key)
        if path is None:
            return self._error(404, "NoSuchKey", key, head)
        self._object(path, key, head)

    def _object(self, path: str, key: str, head: bool) -> None:
        stat = os.stat(path)
        size = stat.st_size
        headers = {"ETag": _etag(stat), "Last-Modified": email.utils.formatdate(stat.st_mtime, usegmt=True),
                   "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes"}
        start, end, status = 0, size, 200
        wanted = self.headers.get("Range")
        if wanted and not head:
            match = _RANGE.match(wanted.strip())
            if match is None or (not match.group(1) and not match.group(2)):
                return self._error(416, "InvalidRange", key)
            if match.group(1):
                start = int(match.group(1))
                end = min(size, int(match.group(2)) + 1) if match.group(2) else size
            else:
                start = max(0, size - int(match.group(2)))
            if start >= size or end <= start:
                return self._error(416, "InvalidRange", key)
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        body = b""
        if not head:
            with open(path, "rb") as file:
                file.seek(start)
                body = file.read(end - start)
        self._send(status, body, headers, head, key, length=end - start)

    def _list(self, bucket: str, query: dict[str, list[str]]) -> None:
        prefix = query.get("prefix", [""])[0]
        delimiter = query.get("delimiter", [""])[0]
        max_keys = int(query.get("max-keys", ["1000"])[0])
        contents, prefixes = [], []
        for key, path in self.server_state.list_keys(bucket, prefix):
            rest = key[len(prefix):]
            if delimiter and delimiter in rest:
                common = prefix + rest.split(delimiter, 1)[0] + delimiter
                if common not in prefixes:
                    prefixes.append(common)
                continue
            stat = os.stat(path)
            modified = email.utils.formatdate(stat.st_mtime, usegmt=True)
            contents.append(f"<Contents><Key>{escape(key)}</Key><LastModified>"
                            f"{_iso(modified)}</LastModified><ETag>{escape(_etag(stat))}</ETag>"
                            f"<Size>{stat.st_size}</Size><StorageClass>STANDARD</StorageClass>"
                            f"</Contents>")
        entries = (contents + [f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>"
                               for p in prefixes])[:max_keys]
        body = (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="{_XMLNS}">'
                f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix>"
                f"<KeyCount>{len(entries)}</KeyCount><MaxKeys>{max_keys}</MaxKeys>"
                f"<Delimiter>{escape(delimiter)}</Delimiter><IsTruncated>false</IsTruncated>"
                f"{''.join(entries)}</ListBucketResult>").encode()
        self._send(200, body, {"Content-Type": "application/xml"}, False, bucket)

    def _error(self, status: int, code: str, resource: str, head: bool = False) -> None:
        body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                f"<Message>{code}</Message><Resource>{escape(resource)}</Resource></Error>").encode()
        self._send(status, body, {"Content-Type": "application/xml"}, head, resource)

    def _send(self, status: int, body: bytes, headers: dict[str, str], head: bool, key: str,
              length: int | None = None) -> None:
        self.server_state._record(Request(self.command, key, self.headers.get("Range"), status,
                                          self.connection_id))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)


def _etag(stat: os.stat_result) -> str:
    digest = hashlib.md5(f"{stat.st_ino}-{stat.st_size}-{stat.st_mtime_ns}".encode(),
                         usedforsecurity=False)
    return f'"{digest.hexdigest()}"'


def _iso(http_date: str) -> str:
    parsed = email.utils.parsedate_to_datetime(http_date)
    return parsed.strftime("%Y-%m-%dT%H:%M:%S.000Z")


@contextlib.contextmanager
def serve_dataset(folder: str, bucket: str = "data") -> Iterator[tuple[str, KeepAliveS3Server]]:
    """Serve the packed dataset ``folder`` as ``s3://<bucket>/<basename>``; yield (url, server).

    The server's root is a fresh folder whose ``<bucket>/<basename>`` holds hard links to (or
    copies of) the dataset's files; the dataset folder itself is never touched.
    """
    with tempfile.TemporaryDirectory(prefix="keepalive-s3-") as root:
        name = os.path.basename(os.path.normpath(folder))
        shutil.copytree(folder, os.path.join(root, bucket, name), copy_function=_link_or_copy)
        with KeepAliveS3Server(root) as server:
            yield f"s3://{bucket}/{name}", server


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def call_within(seconds: float, fn: Callable[[], T]) -> T:
    """``fn()`` in a daemon thread; ``AssertionError`` if it has not returned after ``seconds``
    (a request stuck on a broken pooled connection waits out the 60 s read timeout instead)."""
    result: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True, name="call-within")
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise AssertionError(f"still waiting after {seconds:.0f}s: a request hangs")
    if errors:
        raise errors[0]
    return result[0]
