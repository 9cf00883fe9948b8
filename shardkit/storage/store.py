"""A store: the bytes of a dataset folder at any fsspec URL (local path, ``s3://`` …).

A ``Store`` knows nothing of shard layout. Names passed to it are relative to its root and use
``/``; callers validate them (``format.manifest``) before they get here.

Errors: every failure is a ``StorageError`` naming the URL (``NotFoundError`` for 404,
``TransientStorageError`` for what is worth retrying). Reads are retried per ``retry``.
Thread-safety: a ``Store`` may be shared by threads; it holds no per-call state.
Pickling: never pickled by shardkit; DataLoader workers rebuild it from ``(url, options)``.
"""

from __future__ import annotations

import os
import posixpath
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from shardkit.errors import StorageError, TransientStorageError
from shardkit.storage.atomic import AtomicWrite, BufferedAtomicWrite, LocalAtomicWrite
from shardkit.storage.backends import make_filesystem
from shardkit.storage.classify import to_storage_error
from shardkit.storage.local_files import read_regular_file
from shardkit.storage.retry import RetryPolicy, call_with_retry

T = TypeVar("T")

#: Remote writes at least this large go through a streamed (multipart) upload.
MULTIPART_THRESHOLD = 16 * 1024 * 1024
MULTIPART_PART_BYTES = 16 * 1024 * 1024


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
        self.fs = make_filesystem(self.protocol, self.storage_options, self.retry, url)

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    @property
    def is_local(self) -> bool:
        return self.protocol == "file"

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
        if self.is_local:  # a FIFO or device must not hang or exhaust the reader (local_files.py)
            return read_regular_file(self.local_path(name))
        return bytes(self._call(name, lambda p: self.fs.cat_file(p)))

    def read_range(self, name: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``; a short body is retried, then raised (names URL and range)."""
        if start < 0 or end < start:
            raise ValueError(f"{self.url_of(name)}: invalid byte range [{start}, {end})")
        if end == start:
            return b""

        def once(path: str) -> bytes:
            data = self.fs.cat_file(path, start=start, end=end)
            if len(data) != end - start:
                raise TransientStorageError(
                    f"{self.url_of(name)}: short read at bytes [{start}, {end}): "
                    f"expected {end - start} bytes, got {len(data)}"
                )
            return bytes(data)

        return self._call(name, once)

    def read_suffix(self, name: str, length: int, size: int | None = None) -> tuple[bytes, int]:
        """The last ``length`` bytes (or the whole object if shorter) and the object size."""
        size = self.size(name) if size is None else size
        start = max(0, size - length)
        return self.read_range(name, start, size), size

    def size(self, name: str) -> int:
        def once(path: str) -> int:
            if not self.is_local:
                self.fs.invalidate_cache(path)
            return int(self.fs.size(path))

        return self._call(name, once)

    def exists(self, name: str) -> bool:
        def once(path: str) -> bool:
            if not self.is_local:
                self.fs.invalidate_cache(path)
            return bool(self.fs.exists(path))

        return self._call(name, once)

    def list(self, prefix: str = "") -> list[str]:
        """Names (relative to the root) of the objects under ``prefix``, sorted."""
        def once(path: str) -> list[str]:
            if not self.is_local:
                self.fs.invalidate_cache(path)
            if not self.fs.exists(path):
                return []
            return list(self.fs.find(path))

        found = self._call(prefix, once)
        root = self.fs._strip_protocol(self.root).rstrip("/") + "/"  # memory:// adds a "/"
        return sorted(p[len(root):] if p.startswith(root) else p for p in found)

    # ---- writing -------------------------------------------------------------------------
    def write_atomic(self, name: str, data: bytes) -> None:
        """Publish ``data`` under ``name`` all at once: readers see the old object or the new.

        Local: a temp file in the same folder, fsync, rename. Object stores: one PUT, or for
        ``MULTIPART_THRESHOLD`` bytes and more a multipart upload completed only at the end;
        both are atomic for readers already.
        """
        if self.is_local:
            file = LocalAtomicWrite(self.local_path(name))
            file.write(data)
            file.commit()
            return
        if len(data) < MULTIPART_THRESHOLD:
            self._call(name, lambda p: self.fs.pipe_file(p, data))
            return

        def upload(path: str) -> None:
            fh = self.fs.open(path, "wb", block_size=MULTIPART_PART_BYTES)
            try:
                view = memoryview(data)
                for offset in range(0, len(view), MULTIPART_PART_BYTES):
                    fh.write(view[offset:offset + MULTIPART_PART_BYTES])
                fh.close()  # completes the multipart upload: the object appears whole
            except BaseException:
                _discard(fh)
                raise

        self._call(name, upload)

    def open_atomic(self, name: str) -> AtomicWrite:
        """Write ``name`` piece by piece, then ``commit()`` publishes it whole, as
        ``write_atomic`` would (``discard()`` leaves nothing). Local: the pieces go straight to
        a temp file beside ``name``; object stores: they are kept until ``commit`` (atomic.py)."""
        if self.is_local:
            return LocalAtomicWrite(self.local_path(name))
        return BufferedAtomicWrite(lambda data: self.write_atomic(name, data))

    def delete(self, name: str) -> None:
        def once(path: str) -> None:
            try:
                self.fs.rm(path)
            except FileNotFoundError:
                pass

        self._call(name, once)

    def temp_name(self, name: str) -> str:
        """A unique sibling name for staging ``name`` (never listed in a manifest)."""
        head, tail = posixpath.split(name)
        return posixpath.join(head, f".tmp-{uuid.uuid4().hex}-{tail}")

    # ---- helpers -------------------------------------------------------------------------
    def _call(self, name: str, fn: Callable[[str], T]) -> T:
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

        return call_with_retry(once, policy=self.retry, what=url)


def open_store(url: str, storage_options: dict[str, Any] | None = None,
               retry: RetryPolicy | None = None) -> Store:
    """The store rooted at ``url`` (a folder path or an fsspec URL)."""
    return Store(url, storage_options, retry)


def _discard(fh: Any) -> None:
    """Abort a failed streamed upload. A plain ``close()`` (or ``with``) would *complete* the
    multipart upload and publish the partial object."""
    try:
        fh.discard()  # s3fs: AbortMultipartUpload
    except Exception:  # best effort: S3 lifecycle rules reap abandoned uploads
        pass
    finally:
        fh.closed = True
