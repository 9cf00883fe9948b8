"""The fsspec backend: objects of any fsspec filesystem (``memory://``, ``gs://``, ``az://`` …).

One filesystem per process (backends.py, K17): a store that crossed a ``fork`` or was pickled
looks its filesystem up again in the new process and never touches the parent's connections.
Metadata calls first drop what the filesystem cached about the path, so an object is seen as
it is now (ST5). Writes are one ``pipe_file`` per object. S3 adds deadlines, multipart uploads
and direct HTTP bodies on top of this (s3_store.py).
Thread-safety: as fsspec's filesystems; shardkit's own state is set once per process.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable
from typing import Any, TypeVar

import fsspec

from shardkit.errors import StorageError, TransientStorageError
from shardkit.storage.atomic import BufferedAtomicWrite
from shardkit.storage.backends import make_filesystem
from shardkit.storage.http_answers import ignored_range
from shardkit.storage.retry import RetryPolicy
from shardkit.storage.store import AtomicWrite, ObjectStat, Store

T = TypeVar("T")

#: Keys of an fsspec ``info()`` that change when an object is replaced, most specific first.
_VERSION_KEYS = ("ETag", "etag", "generation", "VersionId", "mtime", "LastModified", "created")


class FsspecStore(Store):
    """The objects under ``protocol://root`` of an fsspec filesystem."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None,
                 retry: RetryPolicy | None = None) -> None:
        super().__init__(url, storage_options, retry)
        self.protocol, _, rest = url.partition("://")
        self.root = rest.rstrip("/")
        self._fs = make_filesystem(self.protocol, self.storage_options, self.retry, url)
        self._fs_pid = os.getpid()

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The filesystem of this process (a forked child gets its own: K17)."""
        if self._fs_pid != os.getpid():
            self._fs = make_filesystem(self.protocol, self.storage_options, self.retry, self.url)
            self._fs_pid = os.getpid()
            self._after_fork()
        return self._fs

    def _after_fork(self) -> None:
        """Forget what was decided with the parent's filesystem."""

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_fs"], state["_fs_pid"] = None, -1  # the receiving process makes its own
        return state

    def _path(self, name: str) -> str:
        return posixpath.join(self.root, name) if name else self.root

    def url_of(self, name: str) -> str:
        return f"{self.protocol}://{self._path(name)}"

    def _request_options(self) -> dict[str, Any]:
        """Keyword arguments of every byte request (S3: its deadline)."""
        return {}

    # ---- reading -------------------------------------------------------------------------
    def read(self, name: str) -> bytes:
        return bytes(self._call(name, lambda p: self.fs.cat_file(p)))

    def _read_range(self, name: str, start: int, end: int, retry: RetryPolicy | None) -> bytes:
        def once(path: str) -> bytes:
            data = self._cat_range(name, path, start, end)
            if len(data) > end - start:  # a retry gets the same: permanent (K27)
                raise StorageError(f"{self.url_of(name)}: {ignored_range(start, end, len(data))}")
            if len(data) != end - start:
                raise TransientStorageError(
                    f"{self.url_of(name)}: short read at bytes [{start}, {end}): "
                    f"expected {end - start} bytes, got {len(data)}"
                )
            return bytes(data)

        return self._call(name, once, retry)

    def _cat_range(self, name: str, path: str, start: int, end: int) -> bytes:
        return bytes(self.fs.cat_file(path, start=start, end=end, **self._request_options()))

    def stat(self, name: str) -> ObjectStat:
        def once(path: str) -> ObjectStat:
            info = self.fs.info(path)
            token = next((str(info[k]) for k in _VERSION_KEYS if info.get(k) is not None), "")
            return ObjectStat(int(info["size"]), token)

        return self._call_fresh(name, once)

    def size(self, name: str) -> int:
        return self._call_fresh(name, lambda path: int(self.fs.size(path)))

    def exists(self, name: str) -> bool:
        return self._call_fresh(name, lambda path: bool(self.fs.exists(path)))

    def list(self, prefix: str = "") -> list[str]:
        def once(path: str) -> list[str]:
            return list(self.fs.find(path)) if self.fs.exists(path) else []

        found = self._call_fresh(prefix, once)
        root = self.fs._strip_protocol(self.root).rstrip("/") + "/"  # memory:// adds a "/"
        return sorted(p[len(root):] if p.startswith(root) else p for p in found)

    # ---- writing -------------------------------------------------------------------------
    def write_atomic(self, name: str, data: bytes) -> None:
        self._call(name, lambda p: self.fs.pipe_file(p, data))

    def open_atomic(self, name: str) -> AtomicWrite:
        """The pieces are kept until ``commit``, then written as ``write_atomic`` would."""
        return BufferedAtomicWrite(lambda data: self.write_atomic(name, data))

    def delete(self, name: str) -> None:
        def once(path: str) -> None:
            try:
                self.fs.rm(path)
            except FileNotFoundError:
                pass

        self._call(name, once)

    def copy(self, src: str, dst: str) -> None:
        """A server-side copy."""
        self._call(dst, lambda p: self.fs.copy(self._path(src), p))

    def _call_fresh(self, name: str, fn: Callable[[str], T]) -> T:
        """``_call`` that first drops what the filesystem cached about the path (its listings
        and metadata), so the object is seen as it is now."""
        def once(path: str) -> T:
            self.fs.invalidate_cache(path)
            return fn(path)

        return self._call(name, once)
