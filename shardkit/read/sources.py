"""Where a shard's bytes come from: a local file (memory-mapped views) or a store (range requests)."""

from __future__ import annotations

import mmap
import os
from typing import Protocol

from shardkit.storage import Store
from shardkit.storage.local_files import open_regular_file


class ByteSource(Protocol):
    """Random access to one file. ``where`` names it in errors."""

    where: str

    def size(self) -> int: ...

    def read_range(self, start: int, end: int) -> bytes | memoryview: ...

    def close(self) -> None: ...


class LocalFileSource:
    """A local regular file kept open and memory-mapped; ``read_range`` returns a zero-copy view.
    A FIFO, device or directory is refused on open, naming it (storage/local_files.py).

    ``mapped=False``: ``read_range`` copies with ``pread`` instead, so pages read once do not
    stay in this process's resident set (verification reads every byte once).
    Thread-safe. Views stay valid after ``close`` (the mapping lives until the last one dies)."""

    thread_safe = True

    def __init__(self, path: str, mapped: bool = True) -> None:
        self.where = path
        self._fd = -1
        self._fd, self._size = open_regular_file(path, "shard file")
        self._map = mmap.mmap(self._fd, 0, access=mmap.ACCESS_READ) if self._size and mapped else None
        self._view = memoryview(self._map) if self._map is not None else None

    def size(self) -> int:
        return self._size

    def stat(self) -> os.stat_result:
        """``fstat`` of the file this source reads (not of whatever its path names now)."""
        return os.fstat(self._fd)

    def read_into(self, buffer: bytearray, offset: int) -> int:
        """Copy bytes from ``offset`` into ``buffer`` (reused across calls); the count read."""
        return os.preadv(self._fd, [buffer], offset)

    def read_range(self, start: int, end: int) -> bytes | memoryview:
        if start < 0 or end > self._size or start > end:
            raise OSError(f"{self.where}: short read at [{start}, {end}) of a {self._size}-byte file")
        if self._view is not None:
            return self._view[start:end]
        if start == end:
            return b""
        data = os.pread(self._fd, end - start, start)
        if len(data) != end - start:
            raise OSError(f"{self.where}: short read at [{start}, {end}): got {len(data)} bytes (file shrank?)")
        return data

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # the mapping stays valid for views still alive
            self._fd = -1

    def __del__(self) -> None:
        self.close()


class StoreSource:
    """An object in a store, read with range requests (no local copy). Thread-safe (the store
    is); ``ranged``: a reader fetches its blocks ahead with concurrent requests (K33)."""

    ranged = True

    def __init__(self, store: Store, name: str, size: int | None = None) -> None:
        self.where = store.url_of(name)
        self._store = store
        self._name = name
        self._size = size

    def size(self) -> int:
        if self._size is None:
            self._size = self._store.size(self._name)
        return self._size

    def read_range(self, start: int, end: int) -> bytes:
        return self._store.read_range(self._name, start, end)

    def close(self) -> None:
        pass


def open_source(store: Store, name: str, size: int | None = None, mapped: bool = True) -> ByteSource:
    """A local file source for local stores (``mapped``: see ``LocalFileSource``), else range
    requests on the store."""
    local = store.local_path(name)
    if local is not None:
        return LocalFileSource(local, mapped)
    return StoreSource(store, name, size)


class MemorySource:
    """Bytes already in memory (verification reads each shard whole once)."""

    def __init__(self, data: bytes, where: str) -> None:
        self.where = where
        self._data = data

    def size(self) -> int:
        return len(self._data)

    def read_range(self, start: int, end: int) -> bytes:
        if end > len(self._data):
            raise OSError(f"{self.where}: short read at [{start}, {end}) of {len(self._data)} bytes")
        return self._data[start:end]

    def close(self) -> None:
        pass
