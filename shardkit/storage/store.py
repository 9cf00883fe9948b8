"""A store: the bytes of a dataset folder at any fsspec URL (local path, ``s3://`` …).

A ``Store`` knows nothing of shard layout. Names passed to it are relative to its root and use
``/``; callers validate them (``format.manifest``) before they get here.

Errors: every failure is a ``StorageError`` naming the URL (``NotFoundError`` for 404,
``TransientStorageError`` for what is worth retrying). Reads are retried per ``retry``.
Thread-safety: a ``Store`` may be shared by threads; it holds no per-call state.
Processes: a ``Store`` that crossed a ``fork`` (or was pickled to a spawned process) looks up
its filesystem again in the new process and never touches the parent's connections (K17,
backends.py); so stores may be shared with DataLoader workers as they are.
"""

from __future__ import annotations

import os
import posixpath
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import fsspec
from fsspec.exceptions import FSTimeoutError

from shardkit.errors import StorageError, TransientStorageError
from shardkit.storage.atomic import BufferedAtomicWrite, LocalAtomicWrite, link_or_copy
from shardkit.storage.backends import make_filesystem
from shardkit.storage.body_splice import Put
from shardkit.storage.classify import to_storage_error
from shardkit.storage.http_answers import ignored_range
from shardkit.storage.http_ranges import Write, proxy_applies, stream_range
from shardkit.storage.local_files import read_regular_file
from shardkit.storage.multipart import MultipartAtomicWrite
from shardkit.storage.retry import RetryPolicy, call_with_retry

T = TypeVar("T")

#: What ``Store.open_atomic`` returns: ``write`` pieces, then ``commit`` or ``discard``.
AtomicWrite = LocalAtomicWrite | MultipartAtomicWrite | BufferedAtomicWrite

#: Bytes per part of an S3 upload (``Store.part_bytes``); an object that fills a part is sent
#: as a multipart upload, a smaller one as one PUT (multipart.py).
MULTIPART_PART_BYTES = 16 * 1024 * 1024
MULTIPART_THRESHOLD = MULTIPART_PART_BYTES
#: Keys of an fsspec ``info()`` that change when an object is replaced, most specific first.
_VERSION_KEYS = ("ETag", "etag", "generation", "VersionId", "mtime", "LastModified", "created")


def split_protocol(url: str) -> tuple[str, str]:
    """``"s3://b/ds"`` → ``("s3", "b/ds")``; a plain path → ``("file", abspath)``."""
    if "://" in url:
        protocol, _, rest = url.partition("://")
        if protocol == "file":
            return "file", os.path.abspath(rest)
        return protocol, rest.rstrip("/")
    return "file", os.path.abspath(url)


class Store:
    """Read and write objects under one root URL."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None,
                 retry: RetryPolicy | None = None) -> None:
        self.url = url.rstrip("/") if "://" in url else url
        self.storage_options = dict(storage_options or {})
        self.retry = retry or RetryPolicy()
        self.protocol, self.root = split_protocol(url)
        self._fs = make_filesystem(self.protocol, self.storage_options, self.retry, url)
        self._fs_pid = os.getpid()
        self.part_bytes = MULTIPART_PART_BYTES  # S3 uploads: bytes per part (>= 5 MiB)
        #: ``stream_range`` of S3 objects over plain HTTP connections when it can (K23);
        #: False: always through s3fs.
        self.direct_ranges = True
        self._direct: bool | None = None  # decided on first use, per process

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The filesystem of this process (a forked child gets its own: K17)."""
        if self._fs_pid != os.getpid():
            self._fs = make_filesystem(self.protocol, self.storage_options, self.retry, self.url)
            self._fs_pid, self._direct = os.getpid(), None
        return self._fs

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_fs"], state["_fs_pid"] = None, -1  # the receiving process makes its own
        state["_direct"] = None
        return state

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    @property
    def is_local(self) -> bool:
        return self.protocol == "file"

    @property
    def _is_s3(self) -> bool:
        return self.protocol in ("s3", "s3a")

    def path(self, name: str) -> str:
        """The backend path of ``name`` (no protocol)."""
        return posixpath.join(self.root, name) if name else self.root

    def url_of(self, name: str) -> str:
        """The full URL of ``name``, for error messages and logs."""
        if self.is_local:
            return os.path.join(self.root, name)
        return f"{self.protocol}://{self.path(name)}"

    def local_path(self, name: str) -> str:
        """Filesystem path of ``name``; only for local stores."""
        if not self.is_local:
            raise StorageError(f"{self.url_of(name)} is not a local file")
        return os.path.join(self.root, name)

    # ---- reading -------------------------------------------------------------------------
    def read(self, name: str) -> bytes:
        """The whole object, in one request (s3fs would otherwise ask for its size first, to
        split large objects: a second round trip on every manifest open). Large objects are
        read with ``read_range`` or downloaded in chunks (download.py), not with this."""
        if self.is_local:  # a FIFO or device must not hang or exhaust the reader (local_files.py)
            return read_regular_file(self.local_path(name))
        options = {"max_concurrency": 1, **self._deadline()} if self._is_s3 else {}
        return bytes(self._call(name, lambda p: self.fs.cat_file(p, **options)))

    def read_range(self, name: str, start: int, end: int, *,
                   retry: RetryPolicy | None = None) -> bytes:
        """Bytes ``[start, end)``; a short body is retried, then raised (names URL and range).
        ``retry`` replaces the store's policy for this call (cache downloads retry each part
        themselves, so that throttling lowers their concurrency: download.py)."""
        if start < 0 or end < start:
            raise ValueError(f"{self.url_of(name)}: invalid byte range [{start}, {end})")
        if end == start:
            return b""

        def once(path: str) -> bytes:
            try:
                data = self.fs.cat_file(path, start=start, end=end, **self._deadline())
            except FSTimeoutError as exc:
                raise TransientStorageError(f"{self.url_of(name)}: bytes [{start}, {end}) not read by the "
                                            f"request's deadline, {self.retry.timeout:g}s (K25)") from exc
            if len(data) > end - start:  # a retry gets the same: permanent (K27)
                raise StorageError(f"{self.url_of(name)}: {ignored_range(start, end, len(data))}")
            if len(data) != end - start:
                raise TransientStorageError(
                    f"{self.url_of(name)}: short read at bytes [{start}, {end}): "
                    f"expected {end - start} bytes, got {len(data)}"
                )
            return bytes(data)

        return self._call(name, once, retry)

    def stream_range(self, name: str, start: int, end: int, write: Write, *,
                     retry: RetryPolicy | None = None, put: Put | None = None) -> None:
        """Bytes ``[start, end)`` handed to ``write(piece, offset)`` in order as they arrive
        (``piece`` valid only during the call); errors and retries as ``read_range``, and an
        exception from ``write`` ends the read (raised as it is if a ``StorageError``). Every
        attempt starts over at ``start``: a failed one may have written a prefix. S3 objects
        go over plain HTTP connections, presigned by s3fs (K23, http_ranges.py) when
        ``direct_ranges`` allows, most of a plain-HTTP body spliced to ``put(pipe_fd, count,
        offset)`` when given (it must take exactly ``count`` bytes out of the pipe);
        anything else is one ``read_range``. Each request ends within ``self.retry.timeout`` (K25)."""
        if start < 0 or end < start:
            raise ValueError(f"{self.url_of(name)}: invalid byte range [{start}, {end})")
        if end == start:
            return
        if not self._direct_ok(name):
            write(memoryview(self.read_range(name, start, end, retry=retry)), start)
            return
        verify = (self.storage_options.get("client_kwargs") or {}).get("verify", True)
        policy = self.retry

        def once(path: str) -> None:
            stream_range(self.fs.url(path), start, end, write, verify=verify, put=put, total_timeout=policy.timeout,
                         connect_timeout=policy.connect_timeout, read_timeout=policy.read_timeout)

        self._call(name, once, retry)

    def _deadline(self) -> dict[str, float]:
        """fsspec's bound on one s3fs call: past it the request is cancelled (K25)."""
        return {"timeout": self.retry.timeout} if self._is_s3 else {}

    def _direct_ok(self, name: str) -> bool:
        """Whether this process's reads of ``name`` may skip s3fs for the bytes (K23): an S3
        store without requester-pays, extra request arguments or version awareness, whose
        endpoint is plain HTTP(S) without a proxy."""
        if not (self.direct_ranges and self._is_s3):
            return False
        fs = self.fs  # first: a forked child resets ``_direct``
        if self._direct is None:
            special = (getattr(fs, "requester_pays", False) or getattr(fs, "s3_additional_kwargs", None)
                       or getattr(fs, "version_aware", False))
            proxies = (self.storage_options.get("config_kwargs") or {}).get("proxies")
            self._direct = not special and not proxy_applies(
                self._call(name, lambda p: str(fs.url(p))), proxies)
        return self._direct

    def read_suffix(self, name: str, length: int, size: int | None = None) -> tuple[bytes, int]:
        """The last ``length`` bytes (or the whole object if shorter) and the object size."""
        size = self.size(name) if size is None else size
        start = max(0, size - length)
        return self.read_range(name, start, size), size

    def size(self, name: str) -> int:
        return self._call_fresh(name, lambda path: int(self.fs.size(path)))

    def version(self, name: str) -> tuple[int, str]:
        """``(size, version)`` of ``name`` from one metadata request (a HEAD on S3). ``version``
        is the object's ETag (GCS: generation; local and memory stores: the modification or
        creation time), so a republished object gets a different one (K18)."""
        def once(path: str) -> tuple[int, str]:
            info = self.fs.info(path)
            token = next((str(info[k]) for k in _VERSION_KEYS if info.get(k) is not None), "")
            return int(info["size"]), token

        return self._call_fresh(name, once)

    def exists(self, name: str) -> bool:
        return self._call_fresh(name, lambda path: bool(self.fs.exists(path)))

    def list(self, prefix: str = "") -> list[str]:
        """Names (relative to the root) of the objects under ``prefix``, sorted."""
        def once(path: str) -> list[str]:
            return list(self.fs.find(path)) if self.fs.exists(path) else []

        found = self._call_fresh(prefix, once)
        root = self.fs._strip_protocol(self.root).rstrip("/") + "/"  # memory:// adds a "/"
        return sorted(p[len(root):] if p.startswith(root) else p for p in found)

    # ---- writing -------------------------------------------------------------------------
    def write_atomic(self, name: str, data: bytes) -> None:
        """Publish ``data`` under ``name`` all at once: readers see the old object or the new.

        Local: a temp file in the same folder, fsync, rename. S3: one PUT, or from
        ``part_bytes`` on a multipart upload completed only at the end, each part retried on
        its own (multipart.py); both are atomic for readers already. Other stores: one
        ``pipe_file``.
        """
        if self.is_local or self._is_s3:
            file = self.open_atomic(name)
            file.write(data)
            file.commit()
            return
        self._call(name, lambda p: self.fs.pipe_file(p, data))

    def open_atomic(self, name: str) -> AtomicWrite:
        """Write ``name`` piece by piece, then ``commit()`` publishes it whole, as
        ``write_atomic`` would (``discard()`` leaves nothing). Local: the pieces go straight to
        a temp file beside ``name``; S3: a multipart upload streamed part by part (memory:
        one part of ``part_bytes``); other stores: the pieces are kept until ``commit``."""
        if self.is_local:
            return LocalAtomicWrite(self.local_path(name))
        if self._is_s3:
            return MultipartAtomicWrite(self.fs, self.path(name), lambda fn: self._call(name, fn),
                                        self.part_bytes)
        return BufferedAtomicWrite(lambda data: self.write_atomic(name, data))

    def delete(self, name: str) -> None:
        def once(path: str) -> None:
            try:
                self.fs.rm(path)
            except FileNotFoundError:
                pass

        self._call(name, once)

    def copy(self, src: str, dst: str) -> None:
        """Publish a copy of ``src`` at ``dst``, atomically for readers; ``src`` stays.
        Local: a hard link renamed into place (no bytes copied); object stores: a server-side
        copy."""
        if self.is_local:
            link_or_copy(self.local_path(src), self.local_path(dst))
            return
        self._call(dst, lambda p: self.fs.copy(self.path(src), p))

    def temp_name(self, name: str) -> str:
        """A unique sibling name for staging ``name`` (never listed in a manifest)."""
        head, tail = posixpath.split(name)
        return posixpath.join(head, f".tmp-{uuid.uuid4().hex}-{tail}")

    # ---- helpers -------------------------------------------------------------------------
    def _call(self, name: str, fn: Callable[[str], T], retry: RetryPolicy | None = None) -> T:
        """``fn(path)`` with errors mapped to the shardkit tree and transient ones retried."""
        path = self.path(name)
        url = self.url_of(name)

        def once() -> T:
            try:
                return fn(path)
            except StorageError:
                raise
            except Exception as exc:  # backends raise anything; classify names the URL
                raise to_storage_error(exc, url) from exc

        return call_with_retry(once, policy=retry or self.retry, what=url)

    def _call_fresh(self, name: str, fn: Callable[[str], T]) -> T:
        """``_call`` that first drops what a remote filesystem cached about the path (its
        listings and metadata), so the object is seen as it is now."""
        def once(path: str) -> T:
            if not self.is_local:
                self.fs.invalidate_cache(path)
            return fn(path)

        return self._call(name, once)


def open_store(url: str, storage_options: dict[str, Any] | None = None,
               retry: RetryPolicy | None = None) -> Store:
    """The store rooted at ``url`` (a folder path or an fsspec URL)."""
    return Store(url, storage_options, retry)

