"""The local-files backend: a folder on this machine's filesystem, read with ``pread``.

Every read opens with local_files.py's checks (a FIFO or device is refused, never read);
``local_path`` hands callers the file itself, for ``mmap``/``pread`` (ST10), and the cache never
copies these objects (``worth_caching`` False, K8). Writes go to a temp file beside the target,
fsynced, then renamed (atomic.py). ``stat``'s etag is inode, size and modification time (ST5).
Thread-safety: every method may be called from any thread; nothing is held between calls.
"""

from __future__ import annotations

import os
from typing import Any

from shardkit.errors import NotFoundError, TransientStorageError
from shardkit.storage.atomic import LocalAtomicWrite, link_or_copy
from shardkit.storage.local_files import open_regular_file, read_regular_file
from shardkit.storage.ranges import RangeOptions
from shardkit.storage.retry import RetryPolicy
from shardkit.storage.store import AtomicWrite, ObjectStat, Store


class LocalStore(Store):
    """The objects of the folder ``url`` (a path, or ``file://`` + path)."""

    worth_caching = False
    range_options = RangeOptions(gap_bytes=0, max_in_flight=1)  # a pread costs no round trip

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None,
                 retry: RetryPolicy | None = None) -> None:
        super().__init__(url, storage_options, retry)
        self.root = os.path.abspath(url.partition("://")[2] if url.startswith("file://") else url)

    def url_of(self, name: str) -> str:
        return os.path.join(self.root, name)

    def local_path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def _path(self, name: str) -> str:
        return self.local_path(name)

    def read(self, name: str) -> bytes:
        return read_regular_file(self.local_path(name))

    def _read_range(self, name: str, start: int, end: int, retry: RetryPolicy | None) -> bytes:
        def once(path: str) -> bytes:
            fd, size = open_regular_file(path)
            try:
                data = os.pread(fd, end - start, start)
            finally:
                os.close(fd)
            if len(data) != end - start:  # the file may be growing: worth another look (ST3)
                raise TransientStorageError(
                    f"{path}: short read at bytes [{start}, {end}): expected {end - start} "
                    f"bytes, got {len(data)} (the file has {size})")
            return data

        return self._call(name, once, retry)

    def stat(self, name: str) -> ObjectStat:
        def once(path: str) -> ObjectStat:
            try:
                info = os.stat(path)
            except FileNotFoundError:
                raise NotFoundError(f"{path}: file does not exist") from None
            # A replacement is a rename of a new file: a new inode, even within one mtime tick.
            return ObjectStat(info.st_size, f"{info.st_ino:x}-{info.st_size:x}-{info.st_mtime_ns:x}")

        return self._call(name, once)

    def exists(self, name: str) -> bool:
        return os.path.exists(self.local_path(name))

    def list(self, prefix: str = "") -> list[str]:
        top = self.local_path(prefix)
        if os.path.isfile(top):
            return [prefix]
        found = [os.path.join(folder, file) for folder, _, files in os.walk(top) for file in files]
        return sorted(os.path.relpath(path, self.root).replace(os.sep, "/") for path in found)

    def write_atomic(self, name: str, data: bytes) -> None:
        file = self.open_atomic(name)
        file.write(data)
        file.commit()

    def open_atomic(self, name: str) -> AtomicWrite:
        return LocalAtomicWrite(self.local_path(name))

    def delete(self, name: str) -> None:
        def once(path: str) -> None:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass

        self._call(name, once)

    def copy(self, src: str, dst: str) -> None:
        """A hard link renamed into place (no bytes copied)."""
        link_or_copy(self.local_path(src), self.local_path(dst))
