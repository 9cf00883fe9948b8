"""Where a shard's bytes come from: a local file (``pread``) or a store (range requests)."""

from __future__ import annotations

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
    """A local regular file kept open; ``read_range`` copies with ``pread`` into bytes this
    process owns. A FIFO, device or directory is refused on open, naming it
    (storage/local_files.py).

    Never memory-mapped (RP2, specs/read-path.md): a mapped shard's touched pages count in the
    reading process's resident set until the last view of the map dies, so RSS grew with the
    shards a window touched, not with what the consumer holds. A block read is one ``pread``;
    the copy is what a range request makes anyway. Thread-safe."""

    thread_safe = True

    def __init__(self, path: str) -> None:
        self.where = path
        self._fd = -1
        self._fd, self._size = open_regular_file(path, "shard file")

    def size(self) -> int:
        return self._size

    def stat(self) -> os.stat_result:
        """``fstat`` of the file this source reads (not of whatever its path names now)."""
        return os.fstat(self._fd)

    def read_into(self, buffer: bytearray, offset: int) -> int:
        """Copy bytes from ``offset`` into ``buffer`` (reused across calls); the count read."""
        return os.preadv(self._fd, [buffer], offset)

    def read_range(self, start: int, end: int) -> bytes:
        if start < 0 or end > self._size or start > end:
            raise OSError(f"{self.where}: short read at [{start}, {end}) of a {self._size}-byte file")
        if start == end:
            return b""
        data = os.pread(self._fd, end - start, start)
        if len(data) != end - start:
            raise OSError(f"{self.where}: short read at [{start}, {end}): got {len(data)} bytes (file shrank?)")
        return data

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
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


def open_source(store: Store, name: str, size: int | None = None) -> ByteSource:
    """A local file source for local stores, else range requests on the store."""
    local = store.local_path(name)
    if local is not None:
        return LocalFileSource(local)
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
