"""Where a shard's bytes come from: a local file (``os.pread``) or a store (range requests)."""

from __future__ import annotations

import os
from typing import Protocol

from shardkit.errors import NotFoundError, StorageError
from shardkit.storage import Store


class ByteSource(Protocol):
    """Random access to one file. ``where`` names it in errors."""

    where: str

    def size(self) -> int: ...

    def read_range(self, start: int, end: int) -> bytes: ...

    def close(self) -> None: ...


class LocalFileSource:
    """A local file kept open; ``read_range`` is one ``pread``. Thread-safe."""

    def __init__(self, path: str) -> None:
        self.where = path
        self._fd = -1
        try:
            self._fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise NotFoundError(f"{path}: shard file does not exist") from None
        except OSError as exc:
            raise StorageError(f"{path}: cannot open: {exc.strerror}") from None
        self._size = os.fstat(self._fd).st_size

    def size(self) -> int:
        return self._size

    def read_range(self, start: int, end: int) -> bytes:
        data = os.pread(self._fd, end - start, start)
        if len(data) != end - start:
            raise OSError(f"{self.where}: short read at [{start}, {end}): got {len(data)} bytes")
        return data

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()


class StoreSource:
    """An object in a store, read with range requests (no local copy)."""

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
    if store.is_local:
        return LocalFileSource(store.local_path(name))
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
