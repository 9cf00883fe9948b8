"""The in-memory backend: objects in a dict, for tests and for data made on the fly.

``MemoryStore()`` is a real store (it passes the contract suite, specs/store.md): reads copy out
of immutable ``bytes``, writes replace a whole object under a lock, so a reader sees the old
object or the new one (ST8); every replacement gets a new etag from a counter (ST5). Its
objects live in this process only: a forked child or a spawned one (the store pickles with its
objects) has its own copy from then on. ``worth_caching`` stays True: it behaves as a remote
store does, so the node cache can be tested against it.
Thread-safety: every method may be called from any thread.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

from shardkit.errors import NotFoundError, TransientStorageError
from shardkit.storage.atomic import BufferedAtomicWrite
from shardkit.storage.ranges import RangeOptions
from shardkit.storage.retry import RetryPolicy
from shardkit.storage.store import AtomicWrite, ObjectStat, Store

_NUM_STORES = itertools.count()


class MemoryStore(Store):
    """Objects held in this process's memory, under a made-up ``inmemory://`` URL."""

    range_options = RangeOptions(gap_bytes=0, max_in_flight=1)  # a slice costs no round trip

    def __init__(self, url: str | None = None, retry: RetryPolicy | None = None) -> None:
        super().__init__(url or f"inmemory://store-{next(_NUM_STORES)}", None, retry)
        self._lock = threading.Lock()
        self._objects: dict[str, tuple[bytes, str]] = {}
        self._versions = itertools.count(1)

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            state = self.__dict__.copy()
            state["_objects"] = dict(self._objects)
        del state["_lock"], state["_versions"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._versions = itertools.count(len(self._objects) + 1)

    def _get(self, name: str) -> tuple[bytes, str]:
        with self._lock:
            found = self._objects.get(name)
        if found is None:
            raise NotFoundError(f"{self.url_of(name)}: no such object")
        return found

    def read(self, name: str) -> bytes:
        return self._get(name)[0]

    def _read_range(self, name: str, start: int, end: int, retry: RetryPolicy | None) -> bytes:
        data = self._get(name)[0][start:end]
        if len(data) != end - start:  # permanent here, but the same error every store raises (ST3)
            raise TransientStorageError(f"{self.url_of(name)}: short read at bytes [{start}, {end}): "
                                        f"expected {end - start} bytes, got {len(data)}")
        return data

    def stat(self, name: str) -> ObjectStat:
        data, etag = self._get(name)
        return ObjectStat(len(data), etag)

    def list(self, prefix: str = "") -> list[str]:
        with self._lock:
            names = list(self._objects)
        folder = prefix.rstrip("/") + "/"
        return sorted(n for n in names if not prefix or n == prefix or n.startswith(folder))

    def write_atomic(self, name: str, data: bytes) -> None:
        data = bytes(data)
        with self._lock:
            self._objects[name] = (data, f"v{next(self._versions)}")

    def open_atomic(self, name: str) -> AtomicWrite:
        return BufferedAtomicWrite(lambda data: self.write_atomic(name, data))

    def delete(self, name: str) -> None:
        with self._lock:
            self._objects.pop(name, None)

    def copy(self, src: str, dst: str) -> None:
        self.write_atomic(dst, self.read(src))
